/* Cache blocking with 32 x 32 x 32 tiles, i-k-j order inside a tile, partial tiles at the edges. Techniques: blocking. */
#define BS 32
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int ii = 0; ii < M; ii += BS) {
        const int ie = MIN(ii + BS, M);
        for (int kk = 0; kk < K; kk += BS) {
            const int ke = MIN(kk + BS, K);
            for (int jj = 0; jj < N; jj += BS) {
                const int je = MIN(jj + BS, N);
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
