/* Loop reordering j-k-i: a column of C at a time (strided access, the slow order to compare against). Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int j = 0; j < N; j++) {
        for (int i = 0; i < M; i++) {
            C[(long)i * N + j] = 0.0;
        }
        for (int k = 0; k < K; k++) {
            const double b = B[(long)k * N + j];
            for (int i = 0; i < M; i++) {
                C[(long)i * N + j] += A[(long)i * K + k] * b;
            }
        }
    }
}
