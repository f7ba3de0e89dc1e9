/* Register blocking 4 x 8 with the k loop unrolled by 4; scalar edges. Techniques: blocking, unrolling. */
#define MR 4
#define NR 8

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
            int k = 0;
            for (; k + 3 < K; k += 4) {
                const double *b0 = B + (long)k * N + j, *b1 = b0 + N, *b2 = b1 + N, *b3 = b2 + N;
                /* the four values of A per row into a local array first: gcc 12 -O3 with
                 * AVX-512 vectorised the direct form with a load past the end of A */
                double x[MR][4];
                for (int r = 0; r < MR; r++) {
                    const double *a = A + (long)(i + r) * K;
                    x[r][0] = a[k];
                    x[r][1] = a[k + 1];
                    x[r][2] = a[k + 2];
                    x[r][3] = a[k + 3];
                }
                for (int r = 0; r < MR; r++)
                    for (int s = 0; s < NR; s++)
                        acc[r][s] += x[r][0] * b0[s] + x[r][1] * b1[s] + x[r][2] * b2[s]
                                   + x[r][3] * b3[s];
            }
            for (; k < K; k++) {
                const double *b = B + (long)k * N + j;
                for (int r = 0; r < MR; r++) {
                    const double x = A[(long)(i + r) * K + k];
                    for (int s = 0; s < NR; s++) acc[r][s] += x * b[s];
                }
            }
            for (int r = 0; r < MR; r++)
                for (int s = 0; s < NR; s++) C[(long)(i + r) * N + j + s] = acc[r][s];
        }
        edge(i, i + MR, nb, N, N, K, A, B, C);
    }
    edge(mb, M, 0, N, N, K, A, B, C);
}
