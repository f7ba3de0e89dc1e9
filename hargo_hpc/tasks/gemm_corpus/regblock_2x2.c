/* Register blocking 2 x 2: four accumulators per step of k, edge rows and columns done one by one. Techniques: blocking. */
#define MR 2
#define NR 2

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int mb = M - M % MR, nb = N - N % NR;
    for (int i = 0; i < mb; i += MR) {
        for (int j = 0; j < nb; j += NR) {
            double c00 = 0.0, c01 = 0.0, c10 = 0.0, c11 = 0.0;
            for (int k = 0; k < K; k++) {
                const double a0 = A[(long)i * K + k], a1 = A[(long)(i + 1) * K + k];
                const double b0 = B[(long)k * N + j], b1 = B[(long)k * N + j + 1];
                c00 += a0 * b0;
                c01 += a0 * b1;
                c10 += a1 * b0;
                c11 += a1 * b1;
            }
            C[(long)i * N + j] = c00;
            C[(long)i * N + j + 1] = c01;
            C[(long)(i + 1) * N + j] = c10;
            C[(long)(i + 1) * N + j + 1] = c11;
        }
    }
    for (int i = 0; i < M; i++) {
        /* the columns past the last full pair for the blocked rows, every column for the rest */
        for (int j = i < mb ? nb : 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
            C[(long)i * N + j] = s;
        }
    }
}
