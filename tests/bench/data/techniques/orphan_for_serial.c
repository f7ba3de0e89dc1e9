/* Serial kernel whose comments and strings talk about #pragma omp parallel and _mm256_fmadd_pd. Techniques: none. */
#include <stdio.h>
static const char *note = "#pragma omp parallel for would go here; _mm256_fmadd_pd(a, b, c)";
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    /* #pragma omp parallel for collapse(2)  -- left out on purpose */
    if (M < 0) puts(note);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
