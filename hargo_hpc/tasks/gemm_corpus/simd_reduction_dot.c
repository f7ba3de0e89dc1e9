/* SIMD reduction: B transposed once, then each element of C is a dot product under #pragma omp simd reduction. Techniques: simd. */
#include <stdlib.h>

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double *bt = malloc(sizeof(double) * (size_t)N * (size_t)K);
    if (bt == NULL) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
                C[(long)i * N + j] = s;
            }
        return;
    }
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) bt[(long)j * K + k] = B[(long)k * N + j];
    for (int i = 0; i < M; i++) {
        const double *a = A + (long)i * K;
        for (int j = 0; j < N; j++) {
            const double *b = bt + (long)j * K;
            double s = 0.0;
#pragma omp simd reduction(+ : s)
            for (int k = 0; k < K; k++) s += a[k] * b[k];
            C[(long)i * N + j] = s;
        }
    }
    free(bt);
}
