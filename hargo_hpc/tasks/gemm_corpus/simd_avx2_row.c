/* SIMD with AVX2/FMA intrinsics: a broadcast element of A times 4 columns of B added into C (plain C where the target has no AVX2). Techniques: simd. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        double *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0;
        for (int k = 0; k < K; k++) {
            const double a = A[(long)i * K + k];
            const double *b = B + (long)k * N;
            int j = 0;
#if defined(__AVX2__) && defined(__FMA__)
            const __m256d av = _mm256_set1_pd(a);
            for (; j + 4 <= N; j += 4) {
                __m256d cv = _mm256_loadu_pd(c + j);
                cv = _mm256_fmadd_pd(av, _mm256_loadu_pd(b + j), cv);
                _mm256_storeu_pd(c + j, cv);
            }
#endif
            for (; j < N; j++) c[j] += a * b[j];
        }
    }
}
