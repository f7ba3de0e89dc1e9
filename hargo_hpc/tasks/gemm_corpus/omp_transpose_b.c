/* OpenMP: B transposed into a buffer by all threads, then row-parallel dot products of contiguous rows. Techniques: openmp. */
#include <stdlib.h>

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double *bt = malloc(sizeof(double) * (size_t)N * (size_t)K);
    if (bt == NULL) {
#pragma omp parallel for
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
                C[(long)i * N + j] = s;
            }
        return;
    }
#pragma omp parallel
    {
#pragma omp for
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++) bt[(long)j * K + k] = B[(long)k * N + j];
#pragma omp for
        for (int i = 0; i < M; i++) {
            const double *a = A + (long)i * K;
            for (int j = 0; j < N; j++) {
                const double *b = bt + (long)j * K;
                double s = 0.0;
                for (int k = 0; k < K; k++) s += a[k] * b[k];
                C[(long)i * N + j] = s;
            }
        }
    }
    free(bt);
}
