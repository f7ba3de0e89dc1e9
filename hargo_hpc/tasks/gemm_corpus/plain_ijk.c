/* Plain i-j-k loops: one dot product of a row of A and a column of B per element. Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int k = 0; k < K; k++) {
                sum += A[(long)i * K + k] * B[(long)k * N + j];
            }
            C[(long)i * N + j] = sum;
        }
    }
}
