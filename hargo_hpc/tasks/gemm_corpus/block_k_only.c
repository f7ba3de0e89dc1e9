/* Cache blocking of k alone: panels of 64 rows of B stay in cache while every row of C is updated. Techniques: blocking. */
#define KC 64

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    for (int kk = 0; kk < K; kk += KC) {
        const int ke = kk + KC < K ? kk + KC : K;
        for (int i = 0; i < M; i++) {
            double *c = C + (long)i * N;
            for (int k = kk; k < ke; k++) {
                const double a = A[(long)i * K + k];
                const double *b = B + (long)k * N;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
    }
}
