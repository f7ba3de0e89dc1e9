/* Cache blocking with rectangular tiles (32 rows of A, 128 of k, 256 columns of B), i-k-j inside. Techniques: blocking. */
#define MB 32
#define KB 128
#define NB 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    for (int jj = 0; jj < N; jj += NB) {
        const int je = MIN(jj + NB, N);
        for (int kk = 0; kk < K; kk += KB) {
            const int ke = MIN(kk + KB, K);
            for (int ii = 0; ii < M; ii += MB) {
                const int ie = MIN(ii + MB, M);
                for (int i = ii; i < ie; i++) {
                    double *c = C + (long)i * N;
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        const double *b = B + (long)k * N;
                        for (int j = jj; j < je; j++) c[j] += a * b[j];
                    }
                }
            }
        }
    }
}
