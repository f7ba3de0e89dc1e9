/* Cache blocking with 64 x 64 x 64 tiles in ii-jj-kk order; each C tile accumulates dot products over the k tiles. Techniques: blocking. */
#define TILE 64

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    for (int ii = 0; ii < M; ii += TILE)
        for (int jj = 0; jj < N; jj += TILE)
            for (int kk = 0; kk < K; kk += TILE)
                for (int i = ii; i < M && i < ii + TILE; i++)
                    for (int j = jj; j < N && j < jj + TILE; j++) {
                        double s = C[(long)i * N + j];
                        for (int k = kk; k < K && k < kk + TILE; k++)
                            s += A[(long)i * K + k] * B[(long)k * N + j];
                        C[(long)i * N + j] = s;
                    }
}
