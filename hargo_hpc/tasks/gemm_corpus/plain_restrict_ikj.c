/* Loop reordering i-k-j with restrict-qualified row pointers, so the compiler knows the rows do not alias. Techniques: none. */
void gemm(int M, int N, int K, const double *restrict A, const double *restrict B,
          double *restrict C) {
    for (int i = 0; i < M; i++) {
        double *restrict c = C + (long)i * N;
        const double *restrict a = A + (long)i * K;
        for (int j = 0; j < N; j++) {
            c[j] = a[0] * B[j];
        }
        for (int k = 1; k < K; k++) {
            const double *restrict b = B + (long)k * N;
            const double aik = a[k];
            for (int j = 0; j < N; j++) {
                c[j] += aik * b[j];
            }
        }
    }
}
