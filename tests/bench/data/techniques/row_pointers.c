/* Serial kernel walking rows with pointers bumped by the leading dimensions (ia += K, c += N). Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const double *a = A;
    double *c = C;
    for (int i = 0; i < M; i++, a += K, c += N) {
        for (int j = 0; j < N; j++) c[j] = 0.0;
        const double *b = B;
        for (int k = 0; k < K; k++, b += N)
            for (int j = 0; j < N; j++) c[j] += a[k] * b[j];
    }
}
