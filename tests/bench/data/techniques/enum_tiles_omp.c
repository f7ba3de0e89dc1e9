/* Threads over row tiles of size given by an enum constant, k tiles inside. Techniques: openmp, blocking. */
enum { TI = 48, TK = 96 };
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
    for (int ib = 0; ib < M; ib += TI) {
        int ie = ib + TI < M ? ib + TI : M;
        for (int i = ib; i < ie; i++)
            for (int j = 0; j < N; j++) C[i * N + j] = 0.0;
        for (int kb = 0; kb < K; kb += TK) {
            int ke = kb + TK < K ? kb + TK : K;
            for (int i = ib; i < ie; i++)
                for (int k = kb; k < ke; k++) {
                    double a = A[i * K + k];
                    for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
                }
        }
    }
}
