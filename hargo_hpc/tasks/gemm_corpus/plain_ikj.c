/* Loop reordering i-k-j: the inner loop walks rows of B and C with unit stride. Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) {
            c[j] = 0.0;
        }
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            for (int j = 0; j < N; j++) {
                c[j] += a * b[j];
            }
        }
    }
}
