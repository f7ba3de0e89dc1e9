/* A section named .interp makes the static link emit PT_INTERP: execveat then fails with the
 * loader's errno (ENOENT here), which runner._exec_failed files as infra_error (unscored). */
__attribute__((section(".interp"), used)) static const char interp[] = "/nonexistent/ld.so";

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[i * N + j] = 0.0; /* wrong on purpose: never checked */
}
