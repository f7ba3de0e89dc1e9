/* GCC vector extension of 4 doubles over columns, inside column tiles of const width, scalar tails. Techniques: simd, blocking. */
typedef double v4d __attribute__((vector_size(32)));
static const int JT = 128;
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int jt = 0; jt < N; jt += JT) {
        int je = jt + JT < N ? jt + JT : N;
        for (int i = 0; i < M; i++) {
            int j = jt;
            for (; j + 3 < je; j += 4) {
                v4d acc = {0, 0, 0, 0};
                for (int k = 0; k < K; k++) {
                    v4d b;
                    __builtin_memcpy(&b, B + k * N + j, sizeof b);
                    acc += A[i * K + k] * b;
                }
                __builtin_memcpy(C + i * N + j, &acc, sizeof acc);
            }
            for (; j < je; j++) {
                double s = 0.0;
                for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
                C[i * N + j] = s;
            }
        }
    }
}
