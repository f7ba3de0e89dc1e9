/* Dot products with k unrolled by 3 through offset indexing, remainder after. Techniques: unrolling. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const double *a = A + i * K;
            double s = 0.0;
            int k = 0;
            for (; k + 2 < K; k += 3)
                s += a[k] * B[k * N + j] + a[k + 1] * B[(k + 1) * N + j] + a[k + 2] * B[(k + 2) * N + j];
            for (; k < K; k++) s += a[k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
