/* Packing B: each 128 x 256 panel of B copied into a contiguous buffer, then OpenMP threads update their rows of C from it. Techniques: openmp, blocking. */
#include <stdlib.h>

#define KC 128
#define NC 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    double *panel = malloc(sizeof(double) * KC * NC);
    for (int kk = 0; kk < K; kk += KC) {
        const int ke = MIN(kk + KC, K);
        for (int jj = 0; jj < N; jj += NC) {
            const int je = MIN(jj + NC, N), w = je - jj;
            const double *src = B + jj; /* the unpacked panel, row stride N */
            long stride = N;
            if (panel != NULL) {
                for (int k = kk; k < ke; k++)
                    for (int j = jj; j < je; j++)
                        panel[(long)(k - kk) * w + (j - jj)] = B[(long)k * N + j];
                src = panel;
                stride = w;
            }
            const int rows = ke - kk;
#pragma omp parallel for schedule(static)
            for (int i = 0; i < M; i++) {
                double *c = C + (long)i * N + jj;
                const double *a = A + (long)i * K + kk;
                for (int k = 0; k < rows; k++) {
                    const double x = a[k];
                    const double *b = panel != NULL ? src + (long)k * stride
                                                    : src + (long)(kk + k) * stride;
                    for (int j = 0; j < w; j++) c[j] += x * b[j];
                }
            }
        }
    }
    free(panel);
}
