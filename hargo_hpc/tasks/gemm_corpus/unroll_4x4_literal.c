/* Loop unrolling of both i and j by 4: a 4 x 4 block of C kept in scalars, edges done one element at a time. Techniques: unrolling. */
static double dot1(int i, int j, int N, int K, const double *A, const double *B) {
    double s = 0.0;
    for (int k = 0; k < K; k++) s += A[(long)i * K + k] * B[(long)k * N + j];
    return s;
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int m4 = M - M % 4, n4 = N - N % 4;
    for (int i = 0; i < m4; i += 4) {
        const double *a0 = A + (long)i * K, *a1 = a0 + K, *a2 = a1 + K, *a3 = a2 + K;
        for (int j = 0; j < n4; j += 4) {
            double c00 = 0, c01 = 0, c02 = 0, c03 = 0, c10 = 0, c11 = 0, c12 = 0, c13 = 0;
            double c20 = 0, c21 = 0, c22 = 0, c23 = 0, c30 = 0, c31 = 0, c32 = 0, c33 = 0;
            for (int k = 0; k < K; k++) {
                const long kn = (long)k * N;
                const double b0 = B[kn + j], b1 = B[kn + j + 1];
                const double b2 = B[kn + j + 2], b3 = B[kn + j + 3];
                c00 += a0[k] * b0; c01 += a0[k] * b1; c02 += a0[k] * b2; c03 += a0[k] * b3;
                c10 += a1[k] * b0; c11 += a1[k] * b1; c12 += a1[k] * b2; c13 += a1[k] * b3;
                c20 += a2[k] * b0; c21 += a2[k] * b1; c22 += a2[k] * b2; c23 += a2[k] * b3;
                c30 += a3[k] * b0; c31 += a3[k] * b1; c32 += a3[k] * b2; c33 += a3[k] * b3;
            }
            double *c = C + (long)i * N + j;
            c[0] = c00; c[1] = c01; c[2] = c02; c[3] = c03;
            c += N;
            c[0] = c10; c[1] = c11; c[2] = c12; c[3] = c13;
            c += N;
            c[0] = c20; c[1] = c21; c[2] = c22; c[3] = c23;
            c += N;
            c[0] = c30; c[1] = c31; c[2] = c32; c[3] = c33;
        }
        for (int r = i; r < i + 4; r++)
            for (int j = n4; j < N; j++) C[(long)r * N + j] = dot1(r, j, N, K, A, B);
    }
    for (int i = m4; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = dot1(i, j, N, K, A, B);
}
