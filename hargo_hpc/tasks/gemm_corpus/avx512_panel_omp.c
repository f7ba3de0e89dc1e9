/* AVX-512 intrinsics on 16-column strips of a row of C, k blocked by 128, OpenMP over rows, masked last strip (plain C without AVX-512). Techniques: openmp, simd, blocking. */
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define KB 128
#define MIN(a, b) ((a) < (b) ? (a) : (b))

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * N + j] = 0.0;
    for (int kk = 0; kk < K; kk += KB) {
        const int ke = MIN(kk + KB, K);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < M; i++) {
            double *c = C + (long)i * N;
            const double *a = A + (long)i * K;
#ifdef __AVX512F__
            int j = 0;
            for (; j + 16 <= N; j += 16) {
                __m512d c0 = _mm512_loadu_pd(c + j), c1 = _mm512_loadu_pd(c + j + 8);
                for (int k = kk; k < ke; k++) {
                    const __m512d x = _mm512_set1_pd(a[k]);
                    const double *b = B + (long)k * N + j;
                    c0 = _mm512_fmadd_pd(x, _mm512_loadu_pd(b), c0);
                    c1 = _mm512_fmadd_pd(x, _mm512_loadu_pd(b + 8), c1);
                }
                _mm512_storeu_pd(c + j, c0);
                _mm512_storeu_pd(c + j + 8, c1);
            }
            for (; j < N; j += 8) {
                const int left = N - j;
                const __mmask8 m = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1u);
                __m512d c0 = _mm512_maskz_loadu_pd(m, c + j);
                for (int k = kk; k < ke; k++)
                    c0 = _mm512_fmadd_pd(_mm512_set1_pd(a[k]),
                                         _mm512_maskz_loadu_pd(m, B + (long)k * N + j), c0);
                _mm512_mask_storeu_pd(c + j, m, c0);
            }
#else
            for (int k = kk; k < ke; k++) {
                const double *b = B + (long)k * N;
                for (int j = 0; j < N; j++) c[j] += a[k] * b[j];
            }
#endif
        }
    }
}
