/* Cache blocking on two levels: 128-wide tiles for the L2 cache, 16-wide sub-tiles for L1. Techniques: blocking. */
#define L2_BLOCK 128
#define L1_BLOCK 16
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static void tile(int i0, int i1, int k0, int k1, int j0, int j1, int N, int K,
                 const double *A, const double *B, double *C) {
    for (int ii = i0; ii < i1; ii += L1_BLOCK)
        for (int kk = k0; kk < k1; kk += L1_BLOCK)
            for (int jj = j0; jj < j1; jj += L1_BLOCK) {
                const int ie = MIN(ii + L1_BLOCK, i1), ke = MIN(kk + L1_BLOCK, k1);
                const int je = MIN(jj + L1_BLOCK, j1);
                for (int i = ii; i < ie; i++)
                    for (int k = kk; k < ke; k++) {
                        const double a = A[(long)i * K + k];
                        for (int j = jj; j < je; j++) C[(long)i * N + j] += a * B[(long)k * N + j];
                    }
            }
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int i0 = 0; i0 < M; i0 += L2_BLOCK)
        for (int k0 = 0; k0 < K; k0 += L2_BLOCK)
            for (int j0 = 0; j0 < N; j0 += L2_BLOCK)
                tile(i0, MIN(i0 + L2_BLOCK, M), k0, MIN(k0 + L2_BLOCK, K), j0,
                     MIN(j0 + L2_BLOCK, N), N, K, A, B, C);
}
