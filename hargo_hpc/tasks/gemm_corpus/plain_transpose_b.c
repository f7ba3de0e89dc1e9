/* Transposed copy of B: each element of C is then a dot product of two contiguous rows. Techniques: none. */
#include <stdlib.h>

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double *bt = malloc(sizeof(double) * (size_t)N * (size_t)K);
    if (bt == NULL) { /* no memory for the copy: the plain order still gives the product */
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double sum = 0.0;
                for (int k = 0; k < K; k++) sum += A[(long)i * K + k] * B[(long)k * N + j];
                C[(long)i * N + j] = sum;
            }
        }
        return;
    }
    for (int k = 0; k < K; k++) {
        for (int j = 0; j < N; j++) {
            bt[(long)j * K + k] = B[(long)k * N + j];
        }
    }
    for (int i = 0; i < M; i++) {
        const double *a = A + (long)i * K;
        for (int j = 0; j < N; j++) {
            const double *b = bt + (long)j * K;
            double sum = 0.0;
            for (int k = 0; k < K; k++) {
                sum += a[k] * b[k];
            }
            C[(long)i * N + j] = sum;
        }
    }
    free(bt);
}
