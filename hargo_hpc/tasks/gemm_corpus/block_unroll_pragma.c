/* Cache blocking with 48 x 48 x 48 tiles and the inner loop unrolled 4 times by #pragma GCC unroll. Techniques: blocking, unrolling. */
#define BS 48
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int ii = 0; ii < M; ii += BS)
        for (int kk = 0; kk < K; kk += BS)
            for (int jj = 0; jj < N; jj += BS) {
                const int ie = MIN(ii + BS, M), ke = MIN(kk + BS, K), je = MIN(jj + BS, N);
                for (int i = ii; i < ie; i++) {
                    double *c = C + (long)i * N;
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        const double *b = B + (long)k * N;
#pragma GCC unroll 4
                        for (int j = jj; j < je; j++) c[j] += a * b[j];
                    }
                }
            }
}
