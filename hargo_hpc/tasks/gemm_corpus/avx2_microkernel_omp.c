/* AVX2/FMA 4 x 8 micro-kernel on packed, zero-padded panels of B, k blocked by 256, OpenMP over 4-row strips (plain C without AVX2). Techniques: openmp, simd, blocking. */
#include <stdlib.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define MR 4
#define NR 8
#define KC 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* C[mr x nr] += A[mr x kc] (row stride K) times the packed panel bp[kc x NR] */
static void micro(int mr, int nr, int kc, const double *a, int K, const double *bp, double *c,
                  int N) {
#if defined(__AVX2__) && defined(__FMA__)
    if (mr == MR) {
        __m256d acc[MR][2];
        for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_pd();
        for (int k = 0; k < kc; k++) {
            const __m256d b0 = _mm256_loadu_pd(bp + (long)k * NR);
            const __m256d b1 = _mm256_loadu_pd(bp + (long)k * NR + 4);
            for (int r = 0; r < MR; r++) {
                const __m256d x = _mm256_broadcast_sd(a + (long)r * K + k);
                acc[r][0] = _mm256_fmadd_pd(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_pd(x, b1, acc[r][1]);
            }
        }
        double tile[MR][NR];
        for (int r = 0; r < MR; r++) {
            _mm256_storeu_pd(tile[r], acc[r][0]);
            _mm256_storeu_pd(tile[r] + 4, acc[r][1]);
        }
        for (int r = 0; r < MR; r++)
            for (int s = 0; s < nr; s++) c[(long)r * N + s] += tile[r][s];
        return;
    }
#endif
    for (int r = 0; r < mr; r++)
        for (int k = 0; k < kc; k++) {
            const double x = a[(long)r * K + k];
            for (int s = 0; s < nr; s++) c[(long)r * N + s] += x * bp[(long)k * NR + s];
        }
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int panels = (N + NR - 1) / NR;
    double *bp = malloc(sizeof(double) * KC * NR * (size_t)panels);
#pragma omp parallel for
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    if (bp == NULL) { /* no buffer: the i-k-j order, threads over rows */
#pragma omp parallel for
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++)
                for (int j = 0; j < N; j++)
                    C[(long)i * N + j] += A[(long)i * K + k] * B[(long)k * N + j];
        return;
    }
    for (int kk = 0; kk < K; kk += KC) {
        const int kc = MIN(kk + KC, K) - kk;
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (int p = 0; p < panels; p++) {
                double *dst = bp + (long)p * KC * NR;
                const int j0 = p * NR, nr = MIN(j0 + NR, N) - j0;
                for (int k = 0; k < kc; k++)
                    for (int s = 0; s < NR; s++)
                        dst[(long)k * NR + s] = s < nr ? B[(long)(kk + k) * N + j0 + s] : 0.0;
            }
#pragma omp for schedule(static)
            for (int i = 0; i < M; i += MR) {
                const int mr = MIN(i + MR, M) - i;
                for (int p = 0; p < panels; p++) {
                    const int j0 = p * NR, nr = MIN(j0 + NR, N) - j0;
                    micro(mr, nr, kc, A + (long)i * K + kk, K, bp + (long)p * KC * NR,
                          C + (long)i * N + j0, N);
                }
            }
        }
    }
    free(bp);
}
