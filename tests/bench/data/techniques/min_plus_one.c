/* Dot products summed in two parts split at MIN(j + 1, K): a bound, not a tile. Techniques: none. */
#define MIN(a, b) ((a) < (b) ? (a) : (b))
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double head = 0.0, tail = 0.0;
            int split = MIN(j + 1, K);
            for (int k = 0; k < split; k++) head += A[i * K + k] * B[k * N + j];
            for (int k = split; k < K; k++) tail += A[i * K + k] * B[k * N + j];
            C[i * N + j] = head + tail;
        }
}
