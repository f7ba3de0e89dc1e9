/* Cache blocking with small 16 x 16 tiles, column tiles of C outermost (jj-ii-kk). Techniques: blocking. */
#define BLOCK 16
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int jj = 0; jj < N; jj += BLOCK) {
        const int je = MIN(jj + BLOCK, N);
        for (int ii = 0; ii < M; ii += BLOCK) {
            const int ie = MIN(ii + BLOCK, M);
            for (int kk = 0; kk < K; kk += BLOCK) {
                const int ke = MIN(kk + BLOCK, K);
                for (int i = ii; i < ie; i++)
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        for (int j = jj; j < je; j++) C[(long)i * N + j] += a * B[(long)k * N + j];
                    }
            }
        }
    }
}
