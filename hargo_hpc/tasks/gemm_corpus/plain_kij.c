/* Loop reordering k-i-j: C is cleared first, then every k adds the outer product of a column of A and a row of B. Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) {
        C[x] = 0.0;
    }
    for (int k = 0; k < K; k++) {
        const double *b = B + (long)k * N;
        for (int i = 0; i < M; i++) {
            const double a = A[(long)i * K + k];
            double *c = C + (long)i * N;
            for (int j = 0; j < N; j++) {
                c[j] += a * b[j];
            }
        }
    }
}
