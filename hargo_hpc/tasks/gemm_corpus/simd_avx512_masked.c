/* SIMD with AVX-512 intrinsics: 8 columns per vector and a masked load/store for the last partial vector (plain C without AVX-512). Techniques: simd. */
#ifdef __AVX512F__
#include <immintrin.h>
#endif

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
#ifdef __AVX512F__
            const __m512d av = _mm512_set1_pd(a);
            int j = 0;
            for (; j + 8 <= N; j += 8) {
                __m512d cv = _mm512_loadu_pd(c + j);
                _mm512_storeu_pd(c + j, _mm512_fmadd_pd(av, _mm512_loadu_pd(b + j), cv));
            }
            if (j < N) {
                const __mmask8 m = (__mmask8)((1u << (N - j)) - 1u);
                __m512d cv = _mm512_maskz_loadu_pd(m, c + j);
                cv = _mm512_fmadd_pd(av, _mm512_maskz_loadu_pd(m, b + j), cv);
                _mm512_mask_storeu_pd(c + j, m, cv);
            }
#else
            for (int j = 0; j < N; j++) c[j] += a * b[j];
#endif
        }
    }
}
