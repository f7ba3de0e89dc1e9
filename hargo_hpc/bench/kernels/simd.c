/* Reference kernel: explicit SIMD (AVX2/FMA intrinsics when the target has them, else plain C)
 * on a 4 x 8 register block of C, with cache blocking over k and OpenMP over row blocks.
 * Edges that do not fill a register block use the scalar path. */
#include <stddef.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define KB 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static void scalar_block(int i0, int i1, int j0, int j1, int k0, int k1, int N, int K,
                         const double *A, const double *B, double *C) {
    for (int i = i0; i < i1; i++)
        for (int k = k0; k < k1; k++) {
            const double a = A[(long)i * K + k];
            for (int j = j0; j < j1; j++) C[(long)i * N + j] += a * B[(long)k * N + j];
        }
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (long x = 0; x < (long)M * N; x++) C[x] = 0.0;
    const int M4 = M / 4 * 4, N8 = N / 8 * 8;
    for (int kk = 0; kk < K; kk += KB) {
        const int ke = MIN(kk + KB, K);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < M4; i += 4) {
#if defined(__AVX2__) && defined(__FMA__)
            for (int j = 0; j < N8; j += 8) {
                __m256d c[4][2];
                for (int r = 0; r < 4; r++) {
                    c[r][0] = _mm256_loadu_pd(C + (long)(i + r) * N + j);
                    c[r][1] = _mm256_loadu_pd(C + (long)(i + r) * N + j + 4);
                }
                for (int k = kk; k < ke; k++) {
                    const __m256d b0 = _mm256_loadu_pd(B + (long)k * N + j);
                    const __m256d b1 = _mm256_loadu_pd(B + (long)k * N + j + 4);
                    for (int r = 0; r < 4; r++) {
                        const __m256d a = _mm256_broadcast_sd(A + (long)(i + r) * K + k);
                        c[r][0] = _mm256_fmadd_pd(a, b0, c[r][0]);
                        c[r][1] = _mm256_fmadd_pd(a, b1, c[r][1]);
                    }
                }
                for (int r = 0; r < 4; r++) {
                    _mm256_storeu_pd(C + (long)(i + r) * N + j, c[r][0]);
                    _mm256_storeu_pd(C + (long)(i + r) * N + j + 4, c[r][1]);
                }
            }
#else
            scalar_block(i, i + 4, 0, N8, kk, ke, N, K, A, B, C);
#endif
            scalar_block(i, i + 4, N8, N, kk, ke, N, K, A, B, C);
        }
        scalar_block(M4, M, 0, N, kk, ke, N, K, A, B, C);
    }
}
