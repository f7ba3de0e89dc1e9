/* OpenMP with schedule(guided) over columns of C: each thread owns whole columns (j-i-k order). Techniques: openmp. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(guided)
    for (int j = 0; j < N; j++) {
        for (int i = 0; i < M; i++) {
            const double *a = A + (long)i * K;
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += a[k] * B[(long)k * N + j];
            C[(long)i * N + j] = sum;
        }
    }
}
