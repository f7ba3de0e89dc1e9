/* SIMD with GCC vector extensions: 4 doubles per vector along a row of C, scalar remainder columns. Techniques: simd. */
#include <string.h>

typedef double v4d __attribute__((vector_size(32)));

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int n4 = N - N % 4;
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            const v4d av = {a, a, a, a};
            for (int j = 0; j < n4; j += 4) {
                v4d bv, cv;
                memcpy(&bv, b + j, sizeof bv); /* unaligned loads and stores */
                memcpy(&cv, c + j, sizeof cv);
                cv += av * bv;
                memcpy(c + j, &cv, sizeof cv);
            }
            for (int j = n4; j < N; j++) c[j] += a * b[j];
        }
    }
}
