/* Trusted calibration kernel (never a model's): DGEMM of OpenBLAS, the machine's roof.
 * HARGO_CBLAS / HARGO_BLASINT are defined by the harness for the library it found
 * (numpy's scipy-openblas64: scipy_cblas_dgemm64_ with 64-bit integers). */
#ifndef HARGO_CBLAS
#define HARGO_CBLAS cblas_dgemm
#endif
#ifndef HARGO_BLASINT
#define HARGO_BLASINT int
#endif

enum { ROW_MAJOR = 101, NO_TRANS = 111 };
void HARGO_CBLAS(int order, int ta, int tb, HARGO_BLASINT m, HARGO_BLASINT n, HARGO_BLASINT k,
                 double alpha, const double *a, HARGO_BLASINT lda, const double *b,
                 HARGO_BLASINT ldb, double beta, double *c, HARGO_BLASINT ldc);

void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    HARGO_CBLAS(ROW_MAJOR, NO_TRANS, NO_TRANS, M, N, K, 1.0, A, K, B, N, 0.0, C, N);
}
