/* Every technique: cache blocking (64 x 128 x 256 tiles), OpenMP over row tiles, #pragma GCC unroll on k and #pragma omp simd on j. Techniques: openmp, simd, blocking, unrolling. */
#define MB 64
#define KB 128
#define NB 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
    for (int ii = 0; ii < M; ii += MB) {
        const int ie = MIN(ii + MB, M);
        for (int i = ii; i < ie; i++)
            for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
        for (int kk = 0; kk < K; kk += KB) {
            const int ke = MIN(kk + KB, K);
            for (int jj = 0; jj < N; jj += NB) {
                const int je = MIN(jj + NB, N);
                for (int i = ii; i < ie; i++) {
                    double *restrict c = C + (long)i * N;
#pragma GCC unroll 4
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        const double *restrict b = B + (long)k * N;
#pragma omp simd
                        for (int j = jj; j < je; j++) c[j] += a * b[j];
                    }
                }
            }
        }
    }
}
