/* A parallel region over rows (also reading omp_get_wtime), dot products inside. Techniques: openmp. */
#include <omp.h>
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    double t0 = omp_get_wtime();
    #pragma omp parallel
    {
        #pragma omp for
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
                C[i * N + j] = s;
            }
    }
    (void)(omp_get_wtime() - t0);
}
