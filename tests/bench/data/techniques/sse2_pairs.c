/* SSE2 intrinsics: two columns of C per register, i-k-j order, scalar last column. Techniques: simd. */
#include <emmintrin.h>
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++) {
        int j = 0;
        for (; j + 1 < N; j += 2) {
            __m128d acc = _mm_setzero_pd();
            for (int k = 0; k < K; k++)
                acc = _mm_add_pd(acc, _mm_mul_pd(_mm_set1_pd(A[i * K + k]), _mm_loadu_pd(B + k * N + j)));
            _mm_storeu_pd(C + i * N + j, acc);
        }
        for (; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
    }
}
