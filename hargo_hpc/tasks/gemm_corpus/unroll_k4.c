/* Loop unrolling: the dot product over k unrolled by 4, with a remainder loop. Techniques: unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        const double *a = A + (long)i * K;
        for (int j = 0; j < N; j++) {
            const double *b = B + j;
            double sum = 0.0;
            int k = 0;
            for (; k + 3 < K; k += 4) {
                sum += a[k] * b[(long)k * N] + a[k + 1] * b[(long)(k + 1) * N]
                     + a[k + 2] * b[(long)(k + 2) * N] + a[k + 3] * b[(long)(k + 3) * N];
            }
            for (; k < K; k++) {
                sum += a[k] * b[(long)k * N];
            }
            C[(long)i * N + j] = sum;
        }
    }
}
