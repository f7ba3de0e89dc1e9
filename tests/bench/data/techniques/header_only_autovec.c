/* Includes immintrin.h but writes plain loops the compiler vectorises itself at -O3. Techniques: none. */
#include <immintrin.h>
#include <string.h>
void gemm(int M, int N, int K, const double *restrict A, const double *restrict B, double *restrict C) {
    memset(C, 0, sizeof(double) * (size_t)M * (size_t)N);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const double a = A[i * K + k];
            for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
        }
}
