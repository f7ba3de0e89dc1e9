/* OpenMP with collapse(2): every (i, j) element of C is an independent dot product shared among threads. Techniques: openmp. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            const double *a = A + (long)i * K;
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += a[k] * B[(long)k * N + j];
            C[(long)i * N + j] = sum;
        }
    }
}
