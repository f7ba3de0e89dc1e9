/* Dot-product kernel whose row offsets advance in the loop headers: for (ia = 0; ...; ia += K). Techniques: none. */
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    int ic = 0;
    for (int ia = 0; ia < M * K; ia += K) {
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[ia + k] * B[k * N + j];
            C[ic + j] = s;
        }
        ic += N;
    }
}
