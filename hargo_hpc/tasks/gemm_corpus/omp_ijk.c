/* OpenMP: the plain i-j-k loops with the rows of C divided among threads. Techniques: openmp. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) sum += A[(long)i * K + k] * B[(long)k * N + j];
            C[(long)i * N + j] = sum;
        }
    }
}
