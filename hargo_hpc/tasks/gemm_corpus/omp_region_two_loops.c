/* OpenMP: one parallel region with two work-shared loops, clearing C and then accumulating i-k-j. Techniques: openmp. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
        /* the implicit barrier after the first loop: C is clear before any row is updated */
#pragma omp for schedule(static)
        for (int i = 0; i < M; i++) {
            double *c = C + (long)i * N;
            for (int k = 0; k < K; k++) {
                const double a = A[(long)i * K + k];
                const double *b = B + (long)k * N;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
    }
}
