/* Reference kernel: cache blocking of the i-k-j order (tiles of BI x BK of A against BK x BJ of
 * B), with remainder handling for sizes that are not multiples of the tile sizes. */
#define BI 64
#define BK 128
#define BJ 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int ii = 0; ii < M; ii += BI)
        for (int kk = 0; kk < K; kk += BK)
            for (int jj = 0; jj < N; jj += BJ) {
                const int ie = MIN(ii + BI, M), ke = MIN(kk + BK, K), je = MIN(jj + BJ, N);
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
