/* Cache tiles whose size is chosen at run time from the L1 size (sysconf), i-k-j inside each tile. Techniques: blocking. */
#include <unistd.h>
static int imin(int a, int b) { return a < b ? a : b; }
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    int t = l1 > 0 ? (int)(l1 / 1024) : 32;
    if (t < 8) t = 8;
    for (int x = 0; x < M * N; x++) C[x] = 0.0;
    for (int i0 = 0; i0 < M; i0 += t)
        for (int k0 = 0; k0 < K; k0 += t)
            for (int j0 = 0; j0 < N; j0 += t)
                for (int i = i0; i < imin(i0 + t, M); i++)
                    for (int k = k0; k < imin(k0 + t, K); k++) {
                        double a = A[i * K + k];
                        for (int j = j0; j < imin(j0 + t, N); j++) C[i * N + j] += a * B[k * N + j];
                    }
}
