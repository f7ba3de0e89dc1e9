/* i-k-j loops with the compiler's unrolling switched off (#pragma GCC unroll 1). Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) C[i * N + j] = 0.0;
        for (int k = 0; k < K; k++) {
            double a = A[i * K + k];
#pragma GCC unroll 1
            for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
        }
    }
}
