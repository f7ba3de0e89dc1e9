/* AVX-512 DGEMM with a packed 8 x 16 register micro-kernel (16 zmm accumulators), for the
 * reward curve of docs/bench.md (not a shipped kernel: it needs AVX-512F). C = A B, row-major.
 * B is packed per k-block into 16-column panels, A per thread into 8-row panels (zero-padded,
 * so edges run the same micro-kernel into a scratch tile); OpenMP over the 8-row tiles. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR 8
#define NR 16
#define KC 256

static void micro(int kc, const double *restrict a, const double *restrict b, double *restrict c,
                  long ldc, int accumulate) {
    __m512d c0a = _mm512_setzero_pd(), c0b = _mm512_setzero_pd();
    __m512d c1a = _mm512_setzero_pd(), c1b = _mm512_setzero_pd();
    __m512d c2a = _mm512_setzero_pd(), c2b = _mm512_setzero_pd();
    __m512d c3a = _mm512_setzero_pd(), c3b = _mm512_setzero_pd();
    __m512d c4a = _mm512_setzero_pd(), c4b = _mm512_setzero_pd();
    __m512d c5a = _mm512_setzero_pd(), c5b = _mm512_setzero_pd();
    __m512d c6a = _mm512_setzero_pd(), c6b = _mm512_setzero_pd();
    __m512d c7a = _mm512_setzero_pd(), c7b = _mm512_setzero_pd();
    for (int k = 0; k < kc; k++) {
        const __m512d b0 = _mm512_load_pd(b + (long)k * NR), b1 = _mm512_load_pd(b + (long)k * NR + 8);
        const double *ak = a + (long)k * MR;
        __m512d x;
        x = _mm512_set1_pd(ak[0]); c0a = _mm512_fmadd_pd(x, b0, c0a); c0b = _mm512_fmadd_pd(x, b1, c0b);
        x = _mm512_set1_pd(ak[1]); c1a = _mm512_fmadd_pd(x, b0, c1a); c1b = _mm512_fmadd_pd(x, b1, c1b);
        x = _mm512_set1_pd(ak[2]); c2a = _mm512_fmadd_pd(x, b0, c2a); c2b = _mm512_fmadd_pd(x, b1, c2b);
        x = _mm512_set1_pd(ak[3]); c3a = _mm512_fmadd_pd(x, b0, c3a); c3b = _mm512_fmadd_pd(x, b1, c3b);
        x = _mm512_set1_pd(ak[4]); c4a = _mm512_fmadd_pd(x, b0, c4a); c4b = _mm512_fmadd_pd(x, b1, c4b);
        x = _mm512_set1_pd(ak[5]); c5a = _mm512_fmadd_pd(x, b0, c5a); c5b = _mm512_fmadd_pd(x, b1, c5b);
        x = _mm512_set1_pd(ak[6]); c6a = _mm512_fmadd_pd(x, b0, c6a); c6b = _mm512_fmadd_pd(x, b1, c6b);
        x = _mm512_set1_pd(ak[7]); c7a = _mm512_fmadd_pd(x, b0, c7a); c7b = _mm512_fmadd_pd(x, b1, c7b);
    }
#define PUT(r, va, vb)                                                                  \
    do {                                                                                \
        double *row = c + (long)(r) * ldc;                                              \
        if (accumulate) {                                                               \
            va = _mm512_add_pd(va, _mm512_loadu_pd(row));                               \
            vb = _mm512_add_pd(vb, _mm512_loadu_pd(row + 8));                           \
        }                                                                               \
        _mm512_storeu_pd(row, va);                                                      \
        _mm512_storeu_pd(row + 8, vb);                                                  \
    } while (0)
    PUT(0, c0a, c0b); PUT(1, c1a, c1b); PUT(2, c2a, c2b); PUT(3, c3a, c3b);
    PUT(4, c4a, c4b); PUT(5, c5a, c5b); PUT(6, c6a, c6b); PUT(7, c7a, c7b);
#undef PUT
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    const int nb = (N + NR - 1) / NR, mb = (M + MR - 1) / MR;
    double *bp = aligned_alloc(64, sizeof(double) * (size_t)nb * KC * NR);
    if (!bp) abort();
    for (int k0 = 0; k0 < K || (K == 0 && k0 == 0); k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC;
#pragma omp parallel
        {
            double ap[MR * KC] __attribute__((aligned(64)));
            double tile[MR * NR] __attribute__((aligned(64)));
#pragma omp for schedule(static)
            for (int jb = 0; jb < nb; jb++) /* pack B[k0:k0+kc, 16 jb : 16 jb + 16] */
                for (int k = 0; k < kc; k++)
                    for (int jj = 0; jj < NR; jj++) {
                        const int j = jb * NR + jj;
                        bp[((long)jb * KC + k) * NR + jj] = j < N ? B[(long)(k0 + k) * N + j] : 0.0;
                    }
#pragma omp for schedule(static)
            for (int ib = 0; ib < mb; ib++) {
                const int i0 = ib * MR, mr = M - i0 < MR ? M - i0 : MR;
                for (int k = 0; k < kc; k++) /* pack A[i0:i0+8, k0:k0+kc], k-major */
                    for (int ii = 0; ii < MR; ii++)
                        ap[k * MR + ii] = ii < mr ? A[(long)(i0 + ii) * K + k0 + k] : 0.0;
                for (int jb = 0; jb < nb; jb++) {
                    const int j0 = jb * NR, nr = N - j0 < NR ? N - j0 : NR;
                    const double *b = bp + (long)jb * KC * NR;
                    if (mr == MR && nr == NR) {
                        micro(kc, ap, b, C + (long)i0 * N + j0, N, k0 > 0);
                    } else { /* an edge: the full tile into scratch, the valid part into C */
                        micro(kc, ap, b, tile, NR, 0);
                        for (int ii = 0; ii < mr; ii++)
                            for (int jj = 0; jj < nr; jj++) {
                                double *cij = C + (long)(i0 + ii) * N + j0 + jj;
                                *cij = (k0 > 0 ? *cij : 0.0) + tile[ii * NR + jj];
                            }
                    }
                }
            }
        }
        if (K == 0) break;
    }
    free(bp);
}
