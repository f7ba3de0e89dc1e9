/* Loop unrolling over k by 4 with four independent partial sums (B transposed first for unit stride). Techniques: unrolling. */
#include <stdlib.h>

static double dot(const double *a, const double *b, int K) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int k = 0;
    for (; k + 3 < K; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < K; k++) {
        s0 += a[k] * b[k];
    }
    return (s0 + s1) + (s2 + s3);
}

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
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = dot(A + (long)i * K, bt + (long)j * K, K);
    free(bt);
}
