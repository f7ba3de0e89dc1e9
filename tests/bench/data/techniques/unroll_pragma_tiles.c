/* Square tiles of a #define'd size with the innermost loop unrolled by #pragma GCC unroll 4. Techniques: blocking, unrolling. */
#define T 40
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int x = 0; x < M * N; x++) C[x] = 0.0;
    for (int ii = 0; ii < M; ii += T)
        for (int kk = 0; kk < K; kk += T)
            for (int i = ii; i < (ii + T < M ? ii + T : M); i++)
                for (int k = kk; k < (kk + T < K ? kk + T : K); k++) {
                    double a = A[i * K + k];
#pragma GCC unroll 4
                    for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
                }
}
