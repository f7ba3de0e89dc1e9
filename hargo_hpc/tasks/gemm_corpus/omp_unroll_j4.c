/* OpenMP over the rows of C with the inner loop over j unrolled by 4 and a remainder loop. Techniques: openmp, unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            int j = 0;
            for (; j + 3 < N; j += 4) {
                c[j] += a * b[j];
                c[j + 1] += a * b[j + 1];
                c[j + 2] += a * b[j + 2];
                c[j + 3] += a * b[j + 3];
            }
            for (; j < N; j++) c[j] += a * b[j];
        }
    }
}
