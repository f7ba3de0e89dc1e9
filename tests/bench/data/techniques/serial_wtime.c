/* Serial i-k-j kernel that times itself with omp_get_wtime and asks for the thread count. Techniques: none. */
#include <omp.h>
static double spent;
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double t0 = omp_get_wtime();
    int nt = omp_get_max_threads();
    (void)nt;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) C[i * N + j] = 0.0;
        for (int k = 0; k < K; k++) {
            double a = A[i * K + k];
            for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
        }
    }
    spent += omp_get_wtime() - t0;
}
