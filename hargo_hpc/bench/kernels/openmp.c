/* Reference kernel: the i-k-j order with the rows of C shared among OpenMP threads. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
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
