/* Cache blocking with 64 x 64 tiles of C shared among OpenMP threads (collapse(2)); each thread sweeps k in tiles of 64. Techniques: openmp, blocking. */
#define BS 64
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int ii = 0; ii < M; ii += BS) {
        for (int jj = 0; jj < N; jj += BS) {
            const int ie = MIN(ii + BS, M), je = MIN(jj + BS, N);
            for (int i = ii; i < ie; i++)
                for (int j = jj; j < je; j++) C[(long)i * N + j] = 0.0;
            for (int kk = 0; kk < K; kk += BS) {
                const int ke = MIN(kk + BS, K);
                for (int i = ii; i < ie; i++) {
                    double *c = C + (long)i * N;
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        const double *b = B + (long)k * N;
                        for (int j = jj; j < je; j++) c[j] += a * b[j];
                    }
                }
            }
        }
    }
}
