/* OpenMP with schedule(dynamic, 4): chunks of 4 rows of C handed to threads as they finish, i-k-j inside. Techniques: openmp. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(dynamic, 4)
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
