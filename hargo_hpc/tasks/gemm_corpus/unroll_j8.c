/* Loop unrolling: the i-k-j order with the inner loop over j unrolled by 8 and a remainder loop. Techniques: unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int n8 = N - N % 8;
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            for (int j = 0; j < n8; j += 8) {
                c[j] += a * b[j];
                c[j + 1] += a * b[j + 1];
                c[j + 2] += a * b[j + 2];
                c[j + 3] += a * b[j + 3];
                c[j + 4] += a * b[j + 4];
                c[j + 5] += a * b[j + 5];
                c[j + 6] += a * b[j + 6];
                c[j + 7] += a * b[j + 7];
            }
            for (int j = n8; j < N; j++) c[j] += a * b[j];
        }
    }
}
