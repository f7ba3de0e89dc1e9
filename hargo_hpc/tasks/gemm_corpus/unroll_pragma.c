/* Loop unrolling by pragma: the i-k-j order with GCC asked to unroll the inner loop 8 times. Techniques: unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
#pragma GCC unroll 8
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
