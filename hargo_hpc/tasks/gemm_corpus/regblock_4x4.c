/* Register blocking 4 x 4: a 4 x 4 tile of C in a local array, updated with a row of 4 of B per k; edges by a scalar loop. Techniques: blocking. */
#define MR 4
#define NR 4

static void edge(int i0, int i1, int j0, int j1, int N, int K, const double *A,
                 const double *B, double *C) {
    for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
            C[(long)i * N + j] = s;
        }
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int mb = M - M % MR, nb = N - N % NR;
    for (int i = 0; i < mb; i += MR) {
        for (int j = 0; j < nb; j += NR) {
            double acc[MR][NR] = {{0.0}};
            for (int k = 0; k < K; k++) {
                const double *b = B + (long)k * N + j;
                for (int r = 0; r < MR; r++) {
                    const double a = A[(long)(i + r) * K + k];
                    for (int s = 0; s < NR; s++) acc[r][s] += a * b[s];
                }
            }
            for (int r = 0; r < MR; r++)
                for (int s = 0; s < NR; s++) C[(long)(i + r) * N + j + s] = acc[r][s];
        }
        edge(i, i + MR, nb, N, N, K, A, B, C);
    }
    edge(mb, M, 0, N, N, K, A, B, C);
}
