/* Autotunes the k-tile on the first call with clock_gettime, then uses the fastest one. Techniques: blocking. */
#include <time.h>
static int best_tile;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static void run(int tile, int M, int N, int K, const double *A, const double *B, double *C) {
    for (int x = 0; x < M * N; x++) C[x] = 0.0;
    for (int kk = 0; kk < K; kk += tile) {
        int ke = kk + tile < K ? kk + tile : K;
        for (int i = 0; i < M; i++)
            for (int k = kk; k < ke; k++) {
                double a = A[i * K + k];
                for (int j = 0; j < N; j++) C[i * N + j] += a * B[k * N + j];
            }
    }
}
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    if (!best_tile) {
        static const int tiles[] = {16, 64, 256};
        double best = 1e30;
        for (int n = 0; n < 3; n++) {
            double t0 = now();
            run(tiles[n], M, N, K, A, B, C);
            double dt = now() - t0;
            if (dt < best) { best = dt; best_tile = tiles[n]; }
        }
    }
    run(best_tile, M, N, K, A, B, C);
}
