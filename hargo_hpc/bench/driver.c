/*
 * hargo-hpc DGEMM harness driver.  Owned by the project, linked with ONE untrusted kernel:
 *
 *     void gemm(int M, int N, int K, const double *A, const double *B, double *C);
 *
 * which must compute C = A * B (row-major, C overwritten).  Usage:
 *
 *     gemm.bin M N K M2 N2 K2 WARMUP REPS SEED
 *
 * Two processes.  The kernel can read and write every byte of its own address space, so nothing
 * it shares an address space with can be trusted.  Hence:
 *
 *   parent ("judge")  allocates A, B, C (and a small control block) in MAP_SHARED memory with
 *                     PROT_NONE guard pages, then forks.  It never calls kernel code.  For every
 *                     call it draws fresh getrandom() bytes AFTER the previous call finished,
 *                     fills private pristine inputs A0, B0, copies them into the shared buffers,
 *                     poisons C with NaN, reads CLOCK_MONOTONIC, tells the child to go (futex),
 *                     waits for "done", reads the clock, snapshots C into private memory and
 *                     verifies the snapshot: canaries, inputs unchanged, Freivalds' check with
 *                     vectors drawn from getrandom after the call (and an exact element-wise
 *                     check on the second size).  Only the parent holds fd 3, the verdict.
 *   child ("runner")  closes fd 3 (and every other fd above 2), installs a strict seccomp
 *                     filter, and runs gemm on the shared buffers when told to; nothing else.
 *
 * The child cannot reach the parent's memory, GOT, clock, keys or verdict fd: no ptrace, no
 * process_vm_*, no open (of /proc/<pid>/mem), no kill/tgkill of another pid, no write except to
 * fds 1 and 2, no lseek, no new executable memory, no new processes (threads only).
 *
 * Protocol on fd 3 (written by the parent only), one line per fact:
 *
 *     SANDBOX seccomp=on|off          the child's filter was installed (reported by the child
 *                                     through the control block; "off" only where unsupported)
 *     READY                           the child exists; from here on failures are the kernel's
 *     CHILD signal <n> | exit <n>     the child died before the parent finished
 *     TIME <seconds>                  one line per timed call
 *     KEYS <hex> ...                  the getrandom keys of every call (record, reproducibility)
 *     RESULT ok | wrong <why> | inputs <why> | memory <why>
 *     INFRA <why>                     harness failure; only believed before READY
 *
 * Freivalds: w = C r, z = A0 (B0 r), t = |A0| (|B0| |r|); pass iff |w_i - z_i| <= 8 (K + N + 2)
 * eps t_i for every row (NaN fails).  t_i bounds the rounding error of any summation order, so a
 * correct kernel never fails; a wrong entry of size >> eps |A||B| is caught with probability ~1,
 * and r is unknowable to the kernel (drawn after it returned).
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
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/audit.h>
#include <linux/futex.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#endif

void gemm(int M, int N, int K, const double *A, const double *B, double *C);

static FILE *verdict; /* fd 3, the parent's only */
static int ready;
static pid_t child_pid;

#define CANARY 0xA5

static void stop_child(void) {
    if (child_pid > 0) {
        kill(child_pid, SIGKILL);
        waitpid(child_pid, NULL, 0); /* reap it: no zombie left for the harness to wait on */
        child_pid = 0;
    }
}

static void report_infra(const char *why) {
    stop_child();
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
    unsigned char *map = mmap(NULL, body + 2 * page, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
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
#define LD_ARG_HI(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]) + 4)
#define ALLOW_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define KILL BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)

static int install_seccomp(pid_t self) {
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
        /* write / writev: only to stdout and stderr (fd 3, the verdict, is the parent's) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_writev, 0, 7),
        LD_ARG_HI(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 2, 1, 0),
        KILL,
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* tgkill: only this process's own threads (abort, raise) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 4),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)self, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        KILL,
        ALLOW_NR(__NR_close),
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
static int install_seccomp(pid_t self) {
    (void)self;
    return 0;
}
#endif

/* ---- shared state, child loop -------------------------------------------------------------- */

typedef struct {
    int M, N, K;
    guarded A, B, C;  /* MAP_SHARED: seen by the child */
    double *A0, *B0;  /* private pristine inputs (allocated after the fork: the child has none) */
    double *Cs;       /* private snapshot of C, taken as soon as the child said "done" */
} problem;

/* The control block lives in its own shared page.  The parent trusts nothing in it beyond
 * "the child claims to be done" (a lie only costs the kernel: C is checked from the snapshot). */
typedef struct {
    volatile uint32_t go;       /* parent -> child: bumped for each call */
    volatile uint32_t done;     /* child -> parent: set to `go` when gemm returned */
    volatile int32_t which;     /* 0: main problem, 1: check problem */
    volatile int32_t seccomp;   /* child -> parent: 1 filter on, 2 unsupported */
} control;

static control *ctl;

static long futex(volatile uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static guarded shared_block(size_t n) { return guarded_alloc(n); }

static void child_main(problem *p0, problem *p1) {
    verdict = NULL; /* report_infra must not touch the parent's stream */
    child_pid = 0;
    for (int fd = 3; fd < 1024; fd++) close(fd);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    int filtered = install_seccomp(getpid());
    ctl->seccomp = filtered ? 1 : 2;
    futex(&ctl->done, FUTEX_WAKE, 1, NULL);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        /* sleep, do not spin: a spinning child would hold a core the parent needs the moment
         * the call ends (measured: spinning cost threaded OpenBLAS 5-10 %, sleeping ~0 %) */
        while ((g = __atomic_load_n(&ctl->go, __ATOMIC_ACQUIRE)) == seen)
            futex(&ctl->go, FUTEX_WAIT, seen, NULL);
        seen = g;
        problem *p = ctl->which ? p1 : p0;
        gemm(p->M, p->N, p->K, p->A.p, p->B.p, p->C.p);
        __atomic_store_n(&ctl->done, g, __ATOMIC_RELEASE);
        futex(&ctl->done, FUTEX_WAKE, 1, NULL);
    }
}

/* ---- parent: inputs, waiting, checks ----------------------------------------------------------- */

static void random_bytes(void *buf, size_t n) {
    unsigned char *b = buf;
    while (n) {
        ssize_t got = getrandom(b, n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            fprintf(verdict, "RESULT infra getrandom failed\n");
            fflush(verdict);
            _exit(92);
        }
        b += got;
        n -= (size_t)got;
    }
}

static void verdict_exit(int code, const char *fmt, const char *why, uint64_t call, problem *p) {
    stop_child();
    fprintf(verdict, fmt, why, (unsigned long long)call, p->M, p->N, p->K);
    fflush(verdict);
    _exit(code);
}

static void child_died(int status) {
    child_pid = 0; /* already reaped */
    if (WIFSIGNALED(status))
        fprintf(verdict, "CHILD signal %d\n", WTERMSIG(status));
    else
        fprintf(verdict, "CHILD exit %d\n", WEXITSTATUS(status));
    fflush(verdict);
    _exit(6);
}

/* Sleeps until ctl->done == want; notices a dead child (polls every 20 ms while it waits). */
static void wait_done(uint32_t want) {
    struct timespec poll = {0, 20 * 1000 * 1000};
    for (;;) {
        uint32_t seen = __atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE);
        if (seen == want) break;
        futex(&ctl->done, FUTEX_WAIT, seen, &poll);
        if (__atomic_load_n(&ctl->done, __ATOMIC_ACQUIRE) == want) break;
        int status;
        pid_t r = waitpid(child_pid, &status, WNOHANG);
        if (r == child_pid) child_died(status);
    }
}

static problem problem_new(int M, int N, int K) {
    problem p;
    p.M = M;
    p.N = N;
    p.K = K;
    p.A = shared_block((size_t)M * K);
    p.B = shared_block((size_t)K * N);
    p.C = shared_block((size_t)M * N);
    p.A0 = p.B0 = p.Cs = NULL;
    return p;
}

static void problem_private(problem *p) {
    p->A0 = malloc(sizeof(double) * (size_t)p->M * p->K);
    p->B0 = malloc(sizeof(double) * (size_t)p->K * p->N);
    p->Cs = malloc(sizeof(double) * (size_t)p->M * p->N);
    if (!p->A0 || !p->B0 || !p->Cs) report_infra("malloc of private buffers failed");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Exact check of every element: |C - A0 B0| <= 8 (K + 2) eps (|A0| |B0|) element-wise. */
static int exact_check(const problem *p, char *why, size_t whylen) {
    double tol_factor = 8.0 * (double)(p->K + 2) * DBL_EPSILON;
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->N; j++) {
            double s = 0.0, t = 0.0;
            for (int k = 0; k < p->K; k++) {
                double a = p->A0[(size_t)i * p->K + k], b = p->B0[(size_t)k * p->N + j];
                s += a * b;
                t += fabs(a) * fabs(b);
            }
            double c = p->Cs[(size_t)i * p->N + j];
            if (!(fabs(c - s) <= tol_factor * t + DBL_MIN)) {
                snprintf(why, whylen, "C[%d][%d] = %.6g, expected %.6g", i, j, c, s);
                return 0;
            }
        }
    return 1;
}

/* Runs gemm once (in the child) on fresh inputs; returns its seconds, exits with the verdict if
 * it failed.  `key` receives the call's getrandom key (the record). */
static double verified_call(problem *p, int which, uint64_t seed, uint64_t call, int exact,
                            uint64_t *key) {
    uint64_t s;
    if (seed)
        s = seed ^ (call * 0xD1B54A32D192ED03ULL); /* reproduction only: predictable */
    else
        random_bytes(&s, sizeof s);
    *key = s;
    size_t na = (size_t)p->M * p->K, nb = (size_t)p->K * p->N, nc = (size_t)p->M * p->N;
    fill(p->A0, na, &s);
    fill(p->B0, nb, &s);
    /* The child can watch the shared buffers.  C is poisoned first and B (without which no
     * entry of C can be finished) is written last, right before the clock starts: a thread that
     * starts early gains at most the time of copying B. */
    for (size_t i = 0; i < nc; i++) p->C.p[i] = NAN;
    ctl->which = which;
    memcpy(p->A.p, p->A0, na * sizeof(double));
    memcpy(p->B.p, p->B0, nb * sizeof(double));
    uint32_t g = (uint32_t)call + 1u;

    double t0 = now();
    __atomic_store_n(&ctl->go, g, __ATOMIC_RELEASE);
    futex(&ctl->go, FUTEX_WAKE, 1, NULL);
    wait_done(g);
    double t1 = now();
    memcpy(p->Cs, p->C.p, nc * sizeof(double)); /* later writes by stray threads do not count */

    char why[200];
    if (!canary_intact(&p->A) || !canary_intact(&p->B) || !canary_intact(&p->C))
        verdict_exit(4, "RESULT memory wrote outside the buffers%s (call %llu, %dx%dx%d)\n", "",
                     call, p);
    if (memcmp(p->A.p, p->A0, na * sizeof(double)) || memcmp(p->B.p, p->B0, nb * sizeof(double)))
        verdict_exit(5, "RESULT inputs A or B were modified%s (call %llu, %dx%dx%d)\n", "", call,
                     p);
    uint64_t r;
    if (seed)
        r = s;
    else
        random_bytes(&r, sizeof r); /* the check vectors: drawn after the call returned */
    int good = exact ? exact_check(p, why, sizeof why)
                     : freivalds(p->M, p->N, p->K, p->A0, p->B0, p->Cs, &r, why, sizeof why);
    if (!good) verdict_exit(3, "RESULT wrong %s (call %llu, %dx%dx%d)\n", why, call, p);
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
    ctl = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ctl == MAP_FAILED) report_infra("mmap of the control block failed");
    memset((void *)ctl, 0, sizeof *ctl);

    /* No OpenMP region of our own: a pool of spinning idle threads would steal cycles from
     * kernels that thread otherwise (OpenBLAS).  The kernel's first parallel region creates
     * the pool in the child, under the filter (clone with CLONE_THREAD is allowed). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core files, no ptrace by the same uid */
    fflush(NULL);
    child_pid = fork();
    if (child_pid < 0) report_infra("fork of the kernel process failed");
    if (child_pid == 0) {
        child_main(&main_p, &check_p);
        _exit(0);
    }
    /* everything the checks depend on is created from here on, in the parent only */
    problem_private(&main_p);
    problem_private(&check_p);
    size_t ncalls = (size_t)warmup + (size_t)reps + 1;
    double *times = malloc(sizeof(double) * (size_t)reps);
    uint64_t *keys = malloc(sizeof(uint64_t) * ncalls);
    if (!times || !keys) report_infra("malloc failed");

    while (ctl->seccomp == 0) { /* the child reports its filter before the first call */
        struct timespec poll = {0, 20 * 1000 * 1000};
        futex(&ctl->done, FUTEX_WAIT, 0, &poll);
        int status;
        if (ctl->seccomp == 0 && waitpid(child_pid, &status, WNOHANG) == child_pid) {
            child_pid = 0;
            report_infra("the kernel process died before the first call");
        }
    }
    fprintf(verdict, "SANDBOX seccomp=%s\n", ctl->seccomp == 1 ? "on" : "off");
    fprintf(verdict, "READY\n");
    fflush(verdict);
    ready = 1;

    uint64_t call = 0;
    for (int w = 0; w < warmup; w++, call++) verified_call(&main_p, 0, seed, call, 0, &keys[call]);
    for (int r = 0; r < reps; r++, call++)
        times[r] = verified_call(&main_p, 0, seed, call, 0, &keys[call]);
    /* the second size is checked element by element unless that would be slow (> ~0.1 s) */
    int exact = (double)M2 * (double)N2 * (double)K2 <= 1.5e8;
    verified_call(&check_p, 1, seed, call, exact, &keys[call]);
    call++;
    stop_child();

    for (int r = 0; r < reps; r++) fprintf(verdict, "TIME %.9e\n", times[r]);
    fprintf(verdict, "KEYS");
    for (size_t c = 0; c < call; c++) fprintf(verdict, " %016llx", (unsigned long long)keys[c]);
    fprintf(verdict, "\nRESULT ok\n");
    fflush(verdict);
    return 0;
}
