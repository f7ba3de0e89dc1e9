/* OpenMP threads over the rows of C and #pragma omp simd on the inner i-k-j loop. Techniques: openmp, simd. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++) {
        double *restrict c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *restrict b = B + (long)k * N;
#pragma omp simd
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
