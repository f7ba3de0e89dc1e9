/* Loop reordering i-k-j into a local row buffer that is copied to C once per row. Techniques: none. */
#include <stdlib.h>
#include <string.h>

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double *row = malloc(sizeof(double) * (size_t)N);
    for (int i = 0; i < M; i++) {
        double *acc = row != NULL ? row : C + (long)i * N;
        for (int j = 0; j < N; j++) {
            acc[j] = 0.0;
        }
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            for (int j = 0; j < N; j++) {
                acc[j] += a * b[j];
            }
        }
        if (row != NULL) {
            memcpy(C + (long)i * N, row, sizeof(double) * (size_t)N);
        }
    }
    free(row);
}
