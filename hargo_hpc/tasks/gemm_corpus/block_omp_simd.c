/* Cache blocking (32 rows, 128 of k, 512 columns) with OpenMP over row tiles and #pragma omp simd inside. Techniques: openmp, simd, blocking. */
#define MB 32
#define KB 128
#define NB 512
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int tiles = (M + MB - 1) / MB;
#pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tiles; t++) {
        const int ii = t * MB, ie = MIN(ii + MB, M);
        for (int i = ii; i < ie; i++) {
#pragma omp simd
            for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
        }
        for (int kk = 0; kk < K; kk += KB) {
            const int ke = MIN(kk + KB, K);
            for (int jj = 0; jj < N; jj += NB) {
                const int je = MIN(jj + NB, N);
                for (int i = ii; i < ie; i++) {
                    double *restrict c = C + (long)i * N;
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
