/* Two rows of C at a time (i += 2) sharing each row of B, with a leftover row. Techniques: unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    int i = 0;
    for (; i + 1 < M; i += 2) {
        for (int j = 0; j < N; j++) { C[i * N + j] = 0.0; C[(i + 1) * N + j] = 0.0; }
        for (int k = 0; k < K; k++) {
            double a0 = A[i * K + k], a1 = A[(i + 1) * K + k];
            for (int j = 0; j < N; j++) {
                C[i * N + j] += a0 * B[k * N + j];
                C[(i + 1) * N + j] += a1 * B[k * N + j];
            }
        }
    }
    for (; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
