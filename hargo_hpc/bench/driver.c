/*
 * hargo-hpc DGEMM harness driver.  Owned by the project, linked with ONE untrusted kernel:
 *
 *     void gemm(int M, int N, int K, const double *A, const double *B, double *C);
 *
 * which must compute C = A * B (row-major, C overwritten).  The driver owns main, the buffers,
 * the inputs, the clock and the checks.  Usage:
 *
 *     gemm.bin M N K M2 N2 K2 WARMUP REPS SEED
 *
 * Protocol: the verdict goes to file descriptor 3 (opened by the harness; the kernel has no
 * libc symbol that could write to it), one line per fact:
 *
 *     SANDBOX seccomp=on|off          layers the driver itself put in force
 *     READY                           the first kernel call is about to start
 *     TIME <seconds>                  one line per timed call (CLOCK_MONOTONIC around the call)
 *     RESULT ok | wrong <why> | inputs <why> | memory <why>
 *     INFRA <why>                     harness failure; only believed before READY
 *
 * Every call (warm-up, timed, check) gets fresh random inputs (seed, call number), a NaN-poisoned
 * C, and is verified afterwards against pristine copies of its inputs:
 *   - inputs unchanged: memcmp(A, A0) and memcmp(B, B0);
 *   - no write outside C: canary bytes in the slack between C and its guard pages
 *     (writes further out hit a PROT_NONE guard page: SIGSEGV);
 *   - C = A0 B0 by Freivalds' check with two random vectors r, O(MK + KN + MN) per vector:
 *         w = C r,  z = A0 (B0 r),  t = |A0| (|B0| |r|)
 *         pass iff |w_i - z_i| <= 8 (K + N + 2) eps t_i for every row i   (NaN fails).
 *     t_i bounds the rounding error of any summation order of the exact product, so a correct
 *     kernel never fails and a wrong entry of size >> eps |A||B| is caught with probability ~1.
 * After the timed calls one more verified call runs on the second size (M2, N2, K2), chosen not
 * to be a multiple of any block size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#endif

void gemm(int M, int N, int K, const double *A, const double *B, double *C);

static FILE *verdict; /* fd 3 */
static int ready;

#define CANARY 0xA5

static void report_infra(const char *why) {
    if (verdict && !ready) {
        fprintf(verdict, "INFRA %s\n", why);
        fflush(verdict);
    }
    _exit(90);
}

/* ---- buffers with guard pages -------------------------------------------------------------- */

typedef struct {
    double *p;           /* first element, 64-byte aligned */
    size_t n;            /* elements */
    unsigned char *lo;   /* start of the read-write region (slack before p is canary) */
    unsigned char *hi;   /* end of the read-write region (slack after p + n is canary) */
} guarded;

static guarded guarded_alloc(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = n * sizeof(double);
    size_t padded = (bytes + 63) & ~(size_t)63;
    size_t body = (padded + page - 1) / page * page;
    unsigned char *map = mmap(NULL, body + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) report_infra("mmap of a guarded buffer failed");
    if (mprotect(map + page, body, PROT_READ | PROT_WRITE) != 0) report_infra("mprotect failed");
    guarded g;
    g.lo = map + page;
    g.hi = map + page + body;
    g.p = (double *)(g.hi - padded); /* the data ends flush with the upper guard (to 64 B) */
    g.n = n;
    memset(g.lo, CANARY, body);
    return g;
}

static int canary_intact(const guarded *g) {
    const unsigned char *begin = (const unsigned char *)g->p;
    const unsigned char *end = (const unsigned char *)(g->p + g->n);
    for (const unsigned char *q = g->lo; q < begin; q++)
        if (*q != CANARY) return 0;
    for (const unsigned char *q = end; q < g->hi; q++)
        if (*q != CANARY) return 0;
    return 1;
}

/* ---- random inputs -------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { /* in [-1, 1) */
    return (double)(splitmix(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void fill(double *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) x[i] = uniform(s);
}

/* ---- Freivalds check ------------------------------------------------------------------------ */

static int freivalds(int M, int N, int K, const double *A, const double *B, const double *C,
                     uint64_t *s, char *why, size_t whylen) {
    double *r = malloc(sizeof(double) * (size_t)N);
    double *y = malloc(sizeof(double) * (size_t)K);
    double *ya = malloc(sizeof(double) * (size_t)K);
    if (!r || !y || !ya) report_infra("malloc in the check failed");
    int ok = 1;
    for (int round = 0; round < 2 && ok; round++) {
        fill(r, (size_t)N, s);
        for (int k = 0; k < K; k++) {
            double acc = 0.0, acca = 0.0;
            const double *b = B + (size_t)k * N;
            for (int j = 0; j < N; j++) {
                acc += b[j] * r[j];
                acca += fabs(b[j]) * fabs(r[j]);
            }
            y[k] = acc;
            ya[k] = acca;
        }
        double tol_factor = 8.0 * (double)(K + N + 2) * DBL_EPSILON;
        for (int i = 0; i < M && ok; i++) {
            const double *a = A + (size_t)i * K;
            const double *c = C + (size_t)i * N;
            double z = 0.0, t = 0.0, w = 0.0;
            for (int k = 0; k < K; k++) {
                z += a[k] * y[k];
                t += fabs(a[k]) * ya[k];
            }
            for (int j = 0; j < N; j++) w += c[j] * r[j];
            double tol = tol_factor * t + DBL_MIN;
            if (!(fabs(w - z) <= tol)) {
                snprintf(why, whylen, "row %d of C is wrong (Freivalds: |Cr - ABr| = %.3g > %.3g)",
                         i, fabs(w - z), tol);
                ok = 0;
            }
        }
    }
    free(r);
    free(y);
    free(ya);
    return ok;
}

/* ---- seccomp: an allow-list of system calls for the kernel's lifetime ------------------------ */

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
#define HARGO_AUDIT_ARCH AUDIT_ARCH_X86_64
#else
#define HARGO_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LD_ARG_LO(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define ALLOW_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define KILL BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)

static int install_seccomp(void) {
    struct sock_filter prog[] = {
        /* wrong architecture (e.g. int 0x80 on x86_64): kill */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HARGO_AUDIT_ARCH, 1, 0),
        KILL,
        LD_NR,
#if defined(__x86_64__)
        /* x32 system calls: kill */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        KILL,
#endif
        /* clone3 passes its flags in memory that BPF cannot read: ENOSYS makes glibc use clone */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        /* clone: threads only (CLONE_THREAD set), never a new process */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        KILL,
        /* mmap / mprotect: never PROT_EXEC (no new code, no patching the driver's code) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 0, 4),
        LD_ARG_LO(2),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
        KILL,
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        ALLOW_NR(__NR_read),
        ALLOW_NR(__NR_write),
        ALLOW_NR(__NR_writev),
        ALLOW_NR(__NR_close),
        ALLOW_NR(__NR_lseek),
        ALLOW_NR(__NR_fstat),
        ALLOW_NR(__NR_newfstatat),
        ALLOW_NR(__NR_munmap),
        ALLOW_NR(__NR_mremap),
        ALLOW_NR(__NR_madvise),
        ALLOW_NR(__NR_mbind), /* NUMA placement (OpenBLAS buffers) */
        ALLOW_NR(__NR_get_mempolicy),
        ALLOW_NR(__NR_set_mempolicy),
        ALLOW_NR(__NR_brk),
        ALLOW_NR(__NR_futex),
        ALLOW_NR(__NR_set_robust_list),
        ALLOW_NR(__NR_rseq),
        ALLOW_NR(__NR_rt_sigaction),
        ALLOW_NR(__NR_rt_sigprocmask),
        ALLOW_NR(__NR_rt_sigreturn),
        ALLOW_NR(__NR_sched_yield),
        ALLOW_NR(__NR_sched_getaffinity),
        ALLOW_NR(__NR_sched_setaffinity),
        ALLOW_NR(__NR_getpid),
        ALLOW_NR(__NR_gettid),
        ALLOW_NR(__NR_tgkill),
        ALLOW_NR(__NR_clock_gettime),
        ALLOW_NR(__NR_clock_getres),
        ALLOW_NR(__NR_gettimeofday),
        ALLOW_NR(__NR_clock_nanosleep),
        ALLOW_NR(__NR_nanosleep),
        ALLOW_NR(__NR_getrandom),
        ALLOW_NR(__NR_exit),
        ALLOW_NR(__NR_exit_group),
        KILL,
    };
    struct sock_fprog fprog = {(unsigned short)(sizeof(prog) / sizeof(prog[0])), prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 0;
    return syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0;
}
#else
static int install_seccomp(void) { return 0; }
#endif

/* ---- one verified call ---------------------------------------------------------------------- */

typedef struct {
    int M, N, K;
    guarded A, B, C;
    double *A0, *B0;
} problem;

static problem problem_new(int M, int N, int K) {
    problem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.A = guarded_alloc((size_t)M * K);
    p.B = guarded_alloc((size_t)K * N);
    p.C = guarded_alloc((size_t)M * N);
    p.A0 = malloc(sizeof(double) * (size_t)M * K);
    p.B0 = malloc(sizeof(double) * (size_t)K * N);
    if (!p.A0 || !p.B0) report_infra("malloc of pristine inputs failed");
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs gemm once on fresh inputs; returns its seconds, exits with the verdict if it failed. */
static double verified_call(problem *p, uint64_t seed, uint64_t call) {
    uint64_t s = seed ^ (call * 0xD1B54A32D192ED03ULL);
    size_t na = (size_t)p->M * p->K, nb = (size_t)p->K * p->N, nc = (size_t)p->M * p->N;
    fill(p->A0, na, &s);
    fill(p->B0, nb, &s);
    memcpy(p->A.p, p->A0, na * sizeof(double));
    memcpy(p->B.p, p->B0, nb * sizeof(double));
    for (size_t i = 0; i < nc; i++) p->C.p[i] = NAN;

    double t0 = now();
    gemm(p->M, p->N, p->K, p->A.p, p->B.p, p->C.p);
    double t1 = now();

    char why[200];
    if (!canary_intact(&p->A) || !canary_intact(&p->B) || !canary_intact(&p->C)) {
        fprintf(verdict, "RESULT memory wrote outside the buffers (call %llu, %dx%dx%d)\n",
                (unsigned long long)call, p->M, p->N, p->K);
        fflush(verdict);
        _exit(4);
    }
    if (memcmp(p->A.p, p->A0, na * sizeof(double)) || memcmp(p->B.p, p->B0, nb * sizeof(double))) {
        fprintf(verdict, "RESULT inputs A or B were modified (call %llu, %dx%dx%d)\n",
                (unsigned long long)call, p->M, p->N, p->K);
        fflush(verdict);
        _exit(5);
    }
    if (!freivalds(p->M, p->N, p->K, p->A0, p->B0, p->C.p, &s, why, sizeof why)) {
        fprintf(verdict, "RESULT wrong %s (call %llu, %dx%dx%d)\n", why,
                (unsigned long long)call, p->M, p->N, p->K);
        fflush(verdict);
        _exit(3);
    }
    return t1 - t0;
}

int main(int argc, char **argv) {
    verdict = fdopen(3, "w");
    if (!verdict) _exit(91);
    if (argc != 10) report_infra("usage: gemm.bin M N K M2 N2 K2 WARMUP REPS SEED");
    int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
    int M2 = atoi(argv[4]), N2 = atoi(argv[5]), K2 = atoi(argv[6]);
    int warmup = atoi(argv[7]), reps = atoi(argv[8]);
    uint64_t seed = strtoull(argv[9], NULL, 10);
    if (M <= 0 || N <= 0 || K <= 0 || M2 <= 0 || N2 <= 0 || K2 <= 0 || warmup < 0 || reps < 1)
        report_infra("bad sizes");

    problem main_p = problem_new(M, N, K);
    problem check_p = problem_new(M2, N2, K2);
    double *times = malloc(sizeof(double) * (size_t)reps);
    if (!times) report_infra("malloc failed");

    /* No OpenMP region of our own: a pool of spinning idle threads would steal cycles from
     * kernels that thread otherwise (OpenBLAS).  The kernel's first parallel region creates
     * the pool under the filter (clone with CLONE_THREAD is allowed). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core files, no ptrace by the same uid */
    int filtered = install_seccomp();
    fprintf(verdict, "SANDBOX seccomp=%s\n", filtered ? "on" : "off");
    fprintf(verdict, "READY\n");
    fflush(verdict);
    ready = 1;

    uint64_t call = 0;
    for (int w = 0; w < warmup; w++) verified_call(&main_p, seed, call++);
    for (int r = 0; r < reps; r++) times[r] = verified_call(&main_p, seed, call++);
    verified_call(&check_p, seed, call++);

    for (int r = 0; r < reps; r++) fprintf(verdict, "TIME %.9e\n", times[r]);
    fprintf(verdict, "RESULT ok\n");
    fflush(verdict);
    return 0;
}
