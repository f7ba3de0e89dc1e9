/* POSIX threads, each computing a band of rows with an i-k-j loop. Techniques: openmp. */
#include <pthread.h>
#include <omp.h>
struct band { int M, N, K, lo, hi; const double *A, *B; double *C; };
static void *run(void *arg) {
    struct band *b = arg;
    for (int i = b->lo; i < b->hi; i++) {
        double *c = b->C + (long)i * b->N;
        for (int j = 0; j < b->N; j++) c[j] = 0.0;
        for (int k = 0; k < b->K; k++) {
            double a = b->A[(long)i * b->K + k];
            const double *row = b->B + (long)k * b->N;
            for (int j = 0; j < b->N; j++) c[j] += a * row[j];
        }
    }
    return 0;
}
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    int t = omp_get_max_threads();
    if (t > 8) t = 8;
    pthread_t tid[8];
    struct band bands[8];
    for (int n = 0; n < t; n++) {
        bands[n] = (struct band){M, N, K, M * n / t, M * (n + 1) / t, A, B, C};
        pthread_create(&tid[n], 0, run, &bands[n]);
    }
    for (int n = 0; n < t; n++) pthread_join(tid[n], 0);
}
