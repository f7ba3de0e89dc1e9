/* SIMD by pragma: #pragma GCC ivdep tells the compiler the rows of B and C do not overlap. Techniques: simd. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
#pragma GCC ivdep
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}
