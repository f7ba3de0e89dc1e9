/* GCC vector extensions (8 doubles) on column tiles of 256 and k tiles of 64, scalar remainder columns. Techniques: simd, blocking. */
#include <string.h>

#define KB 64
#define NB 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef double v8d __attribute__((vector_size(64)));

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    for (int jj = 0; jj < N; jj += NB) {
        const int je = MIN(jj + NB, N);
        const int jv = jj + (je - jj) / 8 * 8; /* end of the whole vectors of this tile */
        for (int kk = 0; kk < K; kk += KB) {
            const int ke = MIN(kk + KB, K);
            for (int i = 0; i < M; i++) {
                double *c = C + (long)i * N;
                for (int k = kk; k < ke; k++) {
                    const double a = A[(long)i * K + k];
                    const double *b = B + (long)k * N;
                    const v8d av = {a, a, a, a, a, a, a, a};
                    for (int j = jj; j < jv; j += 8) {
                        v8d bv, cv;
                        memcpy(&bv, b + j, sizeof bv);
                        memcpy(&cv, c + j, sizeof cv);
                        cv += av * bv;
                        memcpy(c + j, &cv, sizeof cv);
                    }
                    for (int j = jv; j < je; j++) c[j] += a * b[j];
                }
            }
        }
    }
}
