/* Plain j-i-k loops: columns of C outermost, a dot product per element. Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int j = 0; j < N; j++) {
        for (int i = 0; i < M; i++) {
            const double *a = A + (long)i * K;
            double sum = 0.0;
            for (int k = 0; k < K; k++) {
                sum += a[k] * B[(long)k * N + j];
            }
            C[(long)i * N + j] = sum;
        }
    }
}
