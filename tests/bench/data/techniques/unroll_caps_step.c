/* Four columns at a time, stepping by a one-letter constant (j += U), the remainder after. Techniques: unrolling. */
#define U 4
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        int j = 0;
        for (; j + U <= N; j += U) {
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (int k = 0; k < K; k++) {
                double a = A[i * K + k];
                const double *b = B + k * N;
                s0 += a * b[j];
                s1 += a * b[j + 1];
                s2 += a * b[j + 2];
                s3 += a * b[j + 3];
            }
            double *c = C + i * N;
            c[j] = s0;
            c[j + 1] = s1;
            c[j + 2] = s2;
            c[j + 3] = s3;
        }
        for (; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
    }
}
