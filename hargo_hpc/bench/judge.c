/*
 * hargo-hpc DGEMM judge.  Trusted: it never maps, links or runs a model's code.
 *
 *     judge CANDIDATE REFERENCE M N K M2 N2 K2 WARMUP REPS MAX_REPS BUDGET_MS SEED UID GID THREADS
 *           UNTIMED_MS CALL_MS OUTPUT
 *
 * CANDIDATE and REFERENCE are static/dynamic executables built from kernel_main.c and one
 * `void gemm(int M, int N, int K, const double *A, const double *B, double *C)`: the model's
 * (untrusted) and a trusted DGEMM (numpy's OpenBLAS, or a shipped kernel); REFERENCE "-" = none.
 *
 * Processes.  The judge creates two memfds, one per child: a header page (sizes, offsets, the
 * control block) and, for the timed problem and the check problem, A, B and C, each between
 * guard pages.  It forks the candidate child (RLIMIT_NPROC = THREADS + 8 for its private uid: it
 * cannot make hundreds of threads), which closes every descriptor but its memfd (fd 3),
 * its executable (fd 4) and a report pipe (fd 5; both close-on-exec), drops to UID/GID (setgroups, setresgid, setresuid:
 * never the judge's uid when the judge runs as root), sets the parent-death signal, installs a
 * strict seccomp filter and only then execs the candidate from fd 4.  So every load-time hook of
 * the kernel's binary (ifunc resolvers, constructors, init arrays, relocations) runs in that
 * child, after the filter, as the run's uid.  The reference child execs REFERENCE the same way
 * but unfiltered and as the judge's uid (trusted code; a candidate cannot signal or re-pin it).
 *
 * Calls.  A child runs only during its own call: between calls it is SIGSTOPped (all threads).
 * For every call the judge draws a fresh 256-bit key from getrandom AFTER the previous call,
 * expands it with ChaCha12 into the private pristine inputs A0, B0, copies them into the child's
 * buffers and poisons C with NaN while the child is stopped, then SIGCONTs it, reads
 * CLOCK_MONOTONIC, bumps `go` (futex), waits for `done`, reads the clock, SIGSTOPs the child and
 * waits until it has stopped (the clock spans SIGCONT to the confirmed stop).  Only then does it
 * snapshot C and verify: the guard pages' canary
 * (a guard made writable and written is seen), the inputs unchanged, Freivalds' check with vectors
 * drawn from getrandom after the call (an exact element-wise check on the second size).  The
 * child's CPU time per call (its process CPU clock) is compared with the call's wall time x
 * THREADS (more CPUs than it was given) and x the CPUs it may run on (CPU used outside the timed
 * window): either is flagged.
 *
 * Timed repetitions of the candidate and the reference are interleaved (C R, R C, C R, ...) on
 * the same threads and buffers' sizes, so load on the node and the node's speed cancel in g/g_ref.
 * THREADS is the candidate's thread count k (the runner's: 1 for a kernel whose object starts no
 * threads); the runner gives both children the same k in their environment (OMP_NUM_THREADS,
 * OPENBLAS_NUM_THREADS), so the reference runs on as many threads as the candidate may use.
 * Each pair's calls are made with the judge on the next of its CPUs in turn (judge_on_cpu).
 * After each pair, one empty call of each child in the pair's order (empty_call): the child
 * wakes, does not call gemm and says done, timed by the same code as a timed call: the
 * protocol's own cost per call (SIGCONT, futex round trip, SIGSTOP confirmed), which the reward
 * subtracts (reward.speed_ratio).
 * There are at least REPS pairs; more follow, up to MAX_REPS, until the candidate's timed calls
 * sum to BUDGET_MS: a fast kernel gets many pairs (its per-pair ratio is the noisiest), a slow
 * one few (each of its calls is long enough to average the noise by itself).
 * The reference (trusted) is verified on its warm-up calls only.
 * Untimed calls (warm-up, check) each get UNTIMED_MS milliseconds, timed calls CALL_MS, then the
 * child is killed.
 *
 * Priority.  Where it may (root, or RLIMIT_RTPRIO), the judge runs SCHED_RR at priority 20 and
 * both children at 10, with RLIMIT_RTTIME = CALL_MS: ordinary processes on the node (another
 * job's hog) cannot preempt a call, so spinning thread teams (OpenMP, OpenBLAS) are not
 * serialised behind them, and the judge can always stop or kill a child.  Elsewhere everything
 * stays SCHED_OTHER (reported as rt=off).
 * The judge sizes its memfds first and then lowers RLIMIT_FSIZE to OUTPUT bytes, the limit of
 * what the children may write to stdout and stderr.
 *
 * Verdict on fd 3 (the judge's only; the children never hold it), one fact per line:
 *
 *     READY                           the judge is set up; failures from here on are the kernel's
 *     SANDBOX uid=<n> rt=on|off       the candidate's uid and priority
 *     SANDBOX seccomp=on|off          its filter (once it runs)
 *     CHILD signal <n> | exit <n>     the candidate died
 *     CHILD exec <errno> | load <n>   its binary could not be exec'd / it died (signal n) loading
 *     TIME <seconds>                  one line per timed candidate call
 *     REF <seconds>                   one line per timed reference call
 *     NOOP <seconds>                  one line per empty candidate call (one per pair)
 *     REFNOOP <seconds>               one line per empty reference call (one per pair)
 *     CPU <cpu seconds> <wall seconds> one line per timed candidate call
 *     REFCPU <cpu seconds> <wall seconds> one line per timed reference call (its threads at work)
 *     CPUS <n>                        the CPUs the children may run on (the judge's mask)
 *     KEYS <hex> ...                  the first 64 bits of every candidate call's key
 *     RESULT ok | wrong <why> | inputs <why> | memory <why> | timeout <why> | infra <why>
 *     INFRA <why>                     harness (or reference) failure
 *
 * Freivalds: w = C r, z = A0 (B0 r), t = |A0| (|B0| |r|); pass iff |w_i - z_i| <= 8 (K + N + 2)
 * eps t_i for every row (NaN fails).  t_i bounds the rounding error of any summation order, so a
 * correct kernel never fails; a wrong entry of size >> eps |A||B| is caught with probability ~1.
 * ChaCha12: the RFC 8439 block function with 12 rounds (as Rust's StdRng; the best published
 * attacks reach 7), key from getrandom, counter from 0; each 32-bit word gives one input
 * k / 2^31 in [-1, 1), so a 256^3 call's 2 x 65536 inputs cost 8192 blocks (~1 ms).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sched.h>

#include "hargo_shared.h"

static FILE *verdict;
static int ready;
static int realtime;      /* the judge runs SCHED_RR: so do its children, below it */
static rlim_t rt_limit_us;
static long nproc_limit;  /* the candidate's RLIMIT_NPROC: THREADS + 8 */
static cpu_set_t allowed; /* the CPUs the judge was given: its children get all of them */

#define HARGO_RT_JUDGE 20
#define HARGO_RT_CHILD 10

#define CANARY 0xA5

/* ---- children ------------------------------------------------------------------------------- */

typedef struct {
    const char *name;        /* "candidate" | "reference" */
    pid_t pid;
    int memfd;               /* its shared memory, until spawn hands it over */
    unsigned char *base;     /* the judge's mapping of the child's memfd */
    size_t bytes;
    hargo_layout lay;        /* the judge's own copy: the child may scribble on the header */
    int seccomp;             /* reported before the exec: 1 on, 2 unsupported, 0 not asked */
    int running;             /* it said ready: its main runs (deaths before are load failures) */
    double *A0[2], *B0[2], *Cs[2];
    clockid_t cpu;
    uint32_t calls;          /* `go` of its last call (timed, untimed or empty) */
} child;

static child cand, ref;

static void kill_child(child *c) {
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0); /* reap it: no zombie left for the harness */
        c->pid = 0;
    }
}

static void stop_all(void) {
    kill_child(&cand);
    kill_child(&ref);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(verdict, fmt, ap);
    va_end(ap);
    fflush(verdict);
}

static void infra(const char *why) {
    stop_all();
    if (verdict) say(ready ? "RESULT infra %s\n" : "INFRA %s\n", why);
    _exit(90);
}

static void finish(int code, const char *fmt, const char *why) {
    stop_all();
    say(fmt, why);
    _exit(code);
}

static hargo_control *ctl_of(child *c) { return (hargo_control *)(c->base + c->lay.control_off); }

static long futex(volatile uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(child *c) {
    struct timespec ts;
    if (clock_gettime(c->cpu, &ts) != 0) return -1.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- randomness: getrandom keys, ChaCha12 streams --------------------------------------------- */

static void random_bytes(void *buf, size_t n) {
    unsigned char *b = buf;
    while (n) {
        ssize_t got = getrandom(b, n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            infra("getrandom failed");
        }
        b += got;
        n -= (size_t)got;
    }
}

#ifndef CHACHA_ROUNDS
#define CHACHA_ROUNDS 12 /* tests build it with 20 to check RFC 8439's test vectors */
#endif

typedef struct {
    uint32_t key[8];
    uint32_t counter;
    uint32_t block[16];
    int used; /* 32-bit words of `block` consumed */
} chacha;

#define ROTL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))
#define QR(a, b, c, d)                                                                        \
    a += b, d ^= a, d = ROTL(d, 16), c += d, b ^= c, b = ROTL(b, 12), a += b, d ^= a,        \
    d = ROTL(d, 8), c += d, b ^= c, b = ROTL(b, 7)

static void chacha_block(chacha *s) {
    uint32_t in[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574};
    memcpy(in + 4, s->key, sizeof s->key);
    in[12] = s->counter++;
    in[13] = in[14] = in[15] = 0;
    uint32_t x[16];
    memcpy(x, in, sizeof x);
    for (int i = 0; i < CHACHA_ROUNDS / 2; i++) {
        QR(x[0], x[4], x[8], x[12]);
        QR(x[1], x[5], x[9], x[13]);
        QR(x[2], x[6], x[10], x[14]);
        QR(x[3], x[7], x[11], x[15]);
        QR(x[0], x[5], x[10], x[15]);
        QR(x[1], x[6], x[11], x[12]);
        QR(x[2], x[7], x[8], x[13]);
        QR(x[3], x[4], x[9], x[14]);
    }
    for (int i = 0; i < 16; i++) s->block[i] = x[i] + in[i];
    s->used = 0;
}

static void chacha_init(chacha *s, const uint32_t key[8]) {
    memcpy(s->key, key, sizeof s->key);
    s->counter = 0;
    s->used = 16; /* empty: the first draw makes a block */
}

static uint32_t chacha_u32(chacha *s) {
    if (s->used >= 16) chacha_block(s);
    return s->block[s->used++];
}

static double uniform(chacha *s) { /* k / 2^31 in [-1, 1) */
    return (double)(int32_t)chacha_u32(s) * (1.0 / 2147483648.0);
}

static void fill(double *x, size_t n, chacha *s) {
    for (size_t i = 0; i < n; i++) x[i] = uniform(s);
}

/* A fresh key: getrandom, or (SEED != 0, debugging only: predictable) derived from the seed. */
static void fresh_key(uint32_t key[8], uint64_t seed, uint64_t call, uint32_t salt) {
    if (!seed) {
        random_bytes(key, 32);
        return;
    }
    uint64_t words[4] = {seed, call, salt, 0x9E3779B97F4A7C15ULL};
    memcpy(key, words, 32);
}

/* ---- checks --------------------------------------------------------------------------------- */

static int canaries_intact(const child *c) {
    for (int g = 0; g < c->lay.nguards; g++) {
        const unsigned char *q = c->base + c->lay.guard_off[g];
        for (uint64_t i = 0; i < c->lay.guard_len[g]; i++)
            if (q[i] != CANARY) return 0;
    }
    return 1;
}

static int freivalds(const hargo_problem *p, const double *A, const double *B, const double *C,
                     chacha *s, char *why, size_t whylen) {
    int M = p->M, N = p->N, K = p->K;
    double *r = malloc(sizeof(double) * (size_t)N);
    double *y = malloc(sizeof(double) * (size_t)K);
    double *ya = malloc(sizeof(double) * (size_t)K);
    if (!r || !y || !ya) infra("malloc in the check failed");
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

/* Exact check of every element: |C - A0 B0| <= 8 (K + 2) eps (|A0| |B0|) element-wise. */
static int exact_check(const hargo_problem *p, const double *A, const double *B, const double *C,
                       char *why, size_t whylen) {
    double tol_factor = 8.0 * (double)(p->K + 2) * DBL_EPSILON;
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->N; j++) {
            double s = 0.0, t = 0.0;
            for (int k = 0; k < p->K; k++) {
                double a = A[(size_t)i * p->K + k], b = B[(size_t)k * p->N + j];
                s += a * b;
                t += fabs(a) * fabs(b);
            }
            double c = C[(size_t)i * p->N + j];
            if (!(fabs(c - s) <= tol_factor * t + DBL_MIN)) {
                snprintf(why, whylen, "C[%d][%d] = %.6g, expected %.6g", i, j, c, s);
                return 0;
            }
        }
    return 1;
}

/* ---- seccomp: the candidate's allow-list, installed before its binary is loaded ---------------- */

#if defined(__x86_64__)
#define HARGO_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define HARGO_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef HARGO_AUDIT_ARCH
#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LD_ARG_LO(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]))
#define LD_ARG_HI(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[i]) + 4)
#define ALLOW_NR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define ERRNO_NR(nr, e) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (e))
#define KILL BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#ifndef __NR_open
#define __NR_open -1000
#endif
#ifndef __NR_readlink
#define __NR_readlink -1001
#endif

static int install_seccomp(pid_t self) {
    struct sock_filter prog[] = {
        /* wrong architecture (e.g. int 0x80 on x86_64): kill */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HARGO_AUDIT_ARCH, 1, 0),
        KILL,
        LD_NR,
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), /* x32 system calls */
        KILL,
#endif
        /* execveat(4, "", argv, envp, AT_EMPTY_PATH): loading the candidate from fd 4, which is
         * close-on-exec, so it works once; nothing can open another file to exec (open: EACCES) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_execveat, 0, 8),
        LD_ARG_HI(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 5),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HARGO_CANDIDATE_FD, 0, 3),
        LD_ARG_LO(4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AT_EMPTY_PATH, 0, 1),
        ALLOW,
        KILL,
        /* clone3 passes its flags in memory that BPF cannot read: ENOSYS makes glibc use clone */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        /* clone: threads only (CLONE_THREAD set), never a new process */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
        ALLOW,
        KILL,
        /* mmap / mprotect: never PROT_EXEC (no new code, no patching code) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 0, 4),
        LD_ARG_LO(2),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
        KILL,
        ALLOW,
        /* write / writev: only to stdout, stderr and the report pipe (fd 5, close-on-exec:
         * after the exec no fd 5 can exist, the filter refuses every call that makes an fd) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_writev, 0, 8),
        LD_ARG_HI(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 4),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 2, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HARGO_REPORT_FD, 1, 0),
        KILL,
        ALLOW,
        /* prlimit64: reading a limit only (new_limit NULL) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prlimit64, 0, 6),
        LD_ARG_LO(2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
        LD_ARG_HI(2),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
        ALLOW,
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        /* files: none to read (runtimes that probe /sys or /proc fall back), no ioctl on a tty */
        ERRNO_NR(__NR_openat, EACCES),
        ERRNO_NR(__NR_open, EACCES),
        ERRNO_NR(__NR_readlink, ENOENT),
        ERRNO_NR(__NR_readlinkat, ENOENT),
        ERRNO_NR(__NR_ioctl, ENOTTY),
        ERRNO_NR(__NR_sysinfo, EPERM),
        /* tgkill: only this process's own threads (abort, raise); the pid survives the exec */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 4),
        LD_ARG_LO(0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)self, 0, 1),
        ALLOW,
        KILL,
        ALLOW_NR(__NR_close),
        ALLOW_NR(__NR_fstat),
        ALLOW_NR(__NR_newfstatat),
        ALLOW_NR(__NR_munmap),
        ALLOW_NR(__NR_mremap),
        ALLOW_NR(__NR_madvise),
        ALLOW_NR(__NR_mbind), /* NUMA placement */
        ALLOW_NR(__NR_get_mempolicy),
        ALLOW_NR(__NR_set_mempolicy),
        ALLOW_NR(__NR_brk),
        ALLOW_NR(__NR_futex),
        ALLOW_NR(__NR_set_robust_list),
        ALLOW_NR(__NR_set_tid_address),
        ALLOW_NR(__NR_rseq),
#if defined(__x86_64__)
        ALLOW_NR(__NR_arch_prctl), /* TLS of a static binary */
#endif
        ALLOW_NR(__NR_rt_sigaction),
        ALLOW_NR(__NR_rt_sigprocmask),
        ALLOW_NR(__NR_rt_sigreturn),
        ALLOW_NR(__NR_sigaltstack),
        ALLOW_NR(__NR_sched_yield),
        ALLOW_NR(__NR_sched_getaffinity),
        ALLOW_NR(__NR_sched_setaffinity),
        ALLOW_NR(__NR_getpid),
        ALLOW_NR(__NR_gettid),
        ALLOW_NR(__NR_getuid),
        ALLOW_NR(__NR_geteuid),
        ALLOW_NR(__NR_getgid),
        ALLOW_NR(__NR_getegid),
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

/* ---- setting up a child ---------------------------------------------------------------------- */

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Lay out header, then per problem [guard][A][guard][B][guard][C][guard]; returns total bytes. */
static size_t layout(hargo_layout *lay, const int sizes[2][3]) {
    size_t page = page_size(), off = round_up(sizeof(hargo_header), page);
    memset(lay, 0, sizeof *lay);
    lay->magic = HARGO_MAGIC;
    lay->control_off = offsetof(hargo_header, control);
    for (int p = 0; p < 2; p++) {
        hargo_problem *q = &lay->problem[p];
        q->M = sizes[p][0];
        q->N = sizes[p][1];
        q->K = sizes[p][2];
        size_t n[3] = {(size_t)q->M * q->K, (size_t)q->K * q->N, (size_t)q->M * q->N};
        uint64_t *data[3] = {&q->a_off, &q->b_off, &q->c_off};
        for (int m = 0; m < 3; m++) {
            size_t bytes = n[m] * sizeof(double), padded = round_up(bytes, 64);
            size_t body = round_up(padded, page);
            lay->guard_off[lay->nguards] = off; /* lower guard page */
            lay->guard_len[lay->nguards++] = page;
            off += page;
            *data[m] = off + body - padded; /* data ends flush with the upper guard (to 64 B) */
            if (body > padded) { /* slack before the data: canary too */
                lay->guard_off[lay->nguards] = off;
                lay->guard_len[lay->nguards++] = body - padded;
            }
            if (padded > bytes) {
                lay->guard_off[lay->nguards] = *data[m] + bytes;
                lay->guard_len[lay->nguards++] = padded - bytes;
            }
            off += body;
        }
        lay->guard_off[lay->nguards] = off; /* the last upper guard */
        lay->guard_len[lay->nguards++] = page;
        off += page;
    }
    return off;
}

static void child_memory(child *c, const int sizes[2][3], const char *name) {
    c->name = name;
    c->bytes = layout(&c->lay, sizes);
    int fd = (int)syscall(SYS_memfd_create, "hargo", MFD_CLOEXEC);
    if (fd < 0) infra("memfd_create failed");
    if (ftruncate(fd, (off_t)c->bytes) != 0) infra("ftruncate of the shared memory failed");
    c->base = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c->base == MAP_FAILED) infra("mmap of the shared memory failed");
    memset(c->base, 0, c->bytes);
    for (int g = 0; g < c->lay.nguards; g++)
        memset(c->base + c->lay.guard_off[g], CANARY, c->lay.guard_len[g]);
    memcpy(c->base, &c->lay, sizeof c->lay); /* the child reads its layout from the header */
    for (int p = 0; p < 2; p++) {
        hargo_problem *q = &c->lay.problem[p];
        c->A0[p] = malloc(sizeof(double) * (size_t)q->M * q->K);
        c->B0[p] = malloc(sizeof(double) * (size_t)q->K * q->N);
        c->Cs[p] = malloc(sizeof(double) * (size_t)q->M * q->N);
        if (!c->A0[p] || !c->B0[p] || !c->Cs[p]) infra("malloc of private buffers failed");
    }
    c->memfd = fd;
}

/* Move the judge to the n-th of its allowed CPUs (n = call number mod their count) for a call.
 * A woken real-time child is placed off the CPU the judge runs on, so a serial kernel runs on
 * each CPU in turn: on a VM whose virtual CPUs differ in speed from moment to moment, one slow
 * CPU then weighs on every request alike instead of on the requests that happened to land on
 * it (reward CV over 10 requests of the serial blocked kernel: 11 % pinned by chance, 4 %
 * rotated).  The children keep every allowed CPU. */
static void judge_on_cpu(uint64_t number) {
    int count = CPU_COUNT(&allowed), pick = count ? (int)(number % (uint64_t)count) : 0, seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && count > 1; cpu++)
        if (CPU_ISSET(cpu, &allowed) && seen++ == pick) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            sched_setaffinity(0, sizeof one, &one); /* best effort: a refusal only costs noise */
            return;
        }
}

static void close_from(int lowest) {
    for (int fd = lowest; fd < 4096; fd++) close(fd);
}

/* What the child reports before its exec, on a close-on-exec pipe: nothing the kernel's code
 * can reach (after a successful exec the pipe is closed, the judge reads EOF). */
enum { REPORT_SECCOMP = 1, REPORT_SETUP_FAILED = 2, REPORT_EXEC_FAILED = 3 };

static void report(int kind, int value) {
    int msg[2] = {kind, value};
    (void)!write(HARGO_REPORT_FD, msg, sizeof msg);
}

/* Fork the child: fd 3 = its memfd, fd 4 = its executable and fd 5 = the report pipe (both
 * close-on-exec), then (candidate) the run's uid and the filter, then exec. */
static void spawn(child *c, const char *path, int untrusted, uid_t uid, gid_t gid) {
    int memfd = c->memfd;
    int exe = open(path, O_RDONLY | O_CLOEXEC);
    if (exe < 0) infra("cannot open a kernel binary");
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) infra("pipe failed");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) infra("fork failed");
    if (pid == 0) {
        if (dup2(memfd, HARGO_MEMORY_FD) < 0 || dup2(exe, HARGO_CANDIDATE_FD) < 0 ||
            dup2(pipefd[1], HARGO_REPORT_FD) < 0)
            _exit(120);
        fcntl(HARGO_CANDIDATE_FD, F_SETFD, FD_CLOEXEC);
        fcntl(HARGO_REPORT_FD, F_SETFD, FD_CLOEXEC);
        close_from(HARGO_REPORT_FD + 1);
        sched_setaffinity(0, sizeof allowed, &allowed); /* not the CPU the judge is on now */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (realtime) { /* below the judge, above ordinary processes, for one call's time */
            struct sched_param prio = {.sched_priority = HARGO_RT_CHILD};
            struct rlimit rt = {rt_limit_us, rt_limit_us + 1000000};
            if (setrlimit(RLIMIT_RTTIME, &rt) != 0 || sched_setscheduler(0, SCHED_RR, &prio) != 0) {
                report(REPORT_SETUP_FAILED, errno);
                _exit(124);
            }
        }
        if (untrusted && uid != (uid_t)-1) {
            if ((getuid() == 0 && setgroups(0, NULL) != 0) || setresgid(gid, gid, gid) != 0 ||
                setresuid(uid, uid, uid) != 0) {
                report(REPORT_SETUP_FAILED, errno ? errno : EPERM);
                _exit(121);
            }
        }
        if (untrusted) { /* its uid is the request's own: this caps the threads it can make */
            struct rlimit nproc = {(rlim_t)nproc_limit, (rlim_t)nproc_limit};
            if (setrlimit(RLIMIT_NPROC, &nproc) != 0) {
                report(REPORT_SETUP_FAILED, errno);
                _exit(125);
            }
        }
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* after setuid, which clears it */
        if (getppid() == 1) _exit(122);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        report(REPORT_SECCOMP, untrusted ? (install_seccomp(getpid()) ? 1 : 2) : 0);
        char *argv[] = {(char *)c->name, NULL};
        extern char **environ;
        syscall(__NR_execveat, HARGO_CANDIDATE_FD, "", argv, environ, AT_EMPTY_PATH);
        report(REPORT_EXEC_FAILED, errno); /* the filter allows write(5): no later fd 5 exists */
        syscall(SYS_exit_group, 123);
    }
    close(exe);
    close(memfd);
    close(pipefd[1]);
    c->pid = pid;
    if (clock_getcpuclockid(pid, &c->cpu) != 0) infra("no CPU clock of the child");
    int msg[2], exec_errno = 0;
    ssize_t got;
    while ((got = read(pipefd[0], msg, sizeof msg)) != 0) { /* until EOF: exec'd, or dead */
        if (got < 0 && errno == EINTR) continue;
        if (got != (ssize_t)sizeof msg) break;
        if (msg[0] == REPORT_SECCOMP) c->seccomp = msg[1];
        if (msg[0] == REPORT_EXEC_FAILED) exec_errno = msg[1] ? msg[1] : EINVAL;
        if (msg[0] == REPORT_SETUP_FAILED) {
            close(pipefd[0]);
            infra(c == &ref ? "cannot set up the reference process"
                            : "cannot set up the kernel's process (uid or priority)");
        }
    }
    close(pipefd[0]);
    if (exec_errno) {
        if (c == &ref) infra("the reference binary cannot be executed");
        say("CHILD exec %d\n", exec_errno);
        stop_all();
        _exit(6);
    }
}

static void child_died(child *c, int status) {
    c->pid = 0; /* already reaped */
    if (c == &ref) {
        char why[160];
        snprintf(why, sizeof why, "the reference process died (status %d)", status);
        infra(why);
    }
    if (!c->running && WIFSIGNALED(status))
        say("CHILD load %d\n", WTERMSIG(status)); /* died while its binary was being loaded */
    else if (WIFSIGNALED(status))
        say("CHILD signal %d\n", WTERMSIG(status));
    else
        say("CHILD exit %d\n", WEXITSTATUS(status));
    stop_all();
    _exit(6);
}

/* Wait (sleeping on the futex, 20 ms polls for a dead child) until `*word == want`; give up
 * after `limit_s` (<= 0: no limit of our own) and return 0. */
static int wait_word(child *c, volatile uint32_t *word, uint32_t want, double limit_s) {
    double end = now() + limit_s;
    struct timespec poll = {0, 20 * 1000 * 1000};
    for (;;) {
        uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (seen == want) return 1;
        futex(word, FUTEX_WAIT, seen, &poll);
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == want) return 1;
        int status;
        if (waitpid(c->pid, &status, WNOHANG) == c->pid && (WIFEXITED(status) || WIFSIGNALED(status)))
            child_died(c, status);
        if (limit_s > 0 && now() > end) return 0;
    }
}

static void stop_child(child *c) {
    if (kill(c->pid, SIGSTOP) != 0) infra("cannot stop a child");
    for (;;) {
        int status;
        pid_t r = waitpid(c->pid, &status, WUNTRACED);
        if (r < 0 && errno == EINTR) continue;
        if (r != c->pid) infra("waitpid of a child failed");
        if (WIFSTOPPED(status)) return;
        child_died(c, status);
    }
}

/* ---- one call -------------------------------------------------------------------------------- */

typedef struct {
    double seconds, cpu;
    uint64_t key;
} call_result;

/* The timed section of every call, timed and empty alike: the child is stopped and `which` set;
 * the clock runs from before SIGCONT until the stop is confirmed: however many threads the
 * kernel made, waking and stopping them is its own time, and no thread runs unmeasured. */
static call_result run_call(child *c, int which, double limit_s, const char *what) {
    hargo_control *ctl = ctl_of(c);
    ctl->which = which;
    uint32_t g = ++c->calls;
    double cpu0 = cpu_seconds(c);
    double t0 = now();
    if (kill(c->pid, SIGCONT) != 0) infra("cannot resume a child");
    __atomic_store_n(&ctl->go, g, __ATOMIC_RELEASE);
    futex(&ctl->go, FUTEX_WAKE, 1, NULL);
    if (!wait_word(c, &ctl->done, g, limit_s)) {
        char why[120];
        snprintf(why, sizeof why, "the %s call took over %.3g s", what, limit_s);
        if (c == &ref) infra(why);
        finish(7, "RESULT timeout %s\n", why);
    }
    stop_child(c); /* stray threads stop here: nothing they do later can count */
    double t1 = now();
    call_result out = {t1 - t0, cpu_seconds(c) - cpu0, 0};
    return out;
}

/* An empty call: on the pair's CPU, the child wakes, skips gemm (kernel_main.c) and says done;
 * timed exactly as a timed call (run_call), without inputs or checks. */
static double empty_call(child *c, uint64_t number, double limit_s, const char *what) {
    judge_on_cpu(number);
    return run_call(c, HARGO_EMPTY_CALL, limit_s, what).seconds;
}

static call_result call(child *c, int which, uint64_t seed, uint64_t number, int check,
                        double limit_s, const char *what) {
    hargo_problem *p = &c->lay.problem[which];
    double *A = (double *)(c->base + p->a_off), *B = (double *)(c->base + p->b_off);
    double *C = (double *)(c->base + p->c_off);
    size_t na = (size_t)p->M * p->K, nb = (size_t)p->K * p->N, nc = (size_t)p->M * p->N;
    uint32_t key[8];
    chacha s;
    judge_on_cpu(number); /* both calls of a pair: the same CPU */
    fresh_key(key, seed, number, c == &ref);
    chacha_init(&s, key);
    fill(c->A0[which], na, &s);
    fill(c->B0[which], nb, &s);
    /* the child is stopped: it cannot watch the inputs arrive or precompute anything */
    for (size_t i = 0; i < nc; i++) C[i] = NAN;
    memcpy(A, c->A0[which], na * sizeof(double));
    memcpy(B, c->B0[which], nb * sizeof(double));
    call_result out = run_call(c, which, limit_s, what);
    memcpy(&out.key, key, sizeof out.key);
    memcpy(c->Cs[which], C, nc * sizeof(double));
    if (!check) return out;

    char why[200];
    if (!canaries_intact(c)) finish(4, "RESULT memory wrote outside the buffers%s\n", "");
    if (memcmp(A, c->A0[which], na * sizeof(double)) || memcmp(B, c->B0[which], nb * sizeof(double)))
        finish(5, "RESULT inputs A or B were modified%s\n", "");
    uint32_t vkey[8];
    fresh_key(vkey, seed, number, 7); /* the check vectors: drawn after the call returned */
    chacha_init(&s, vkey);
    int exact = which == 1 && (double)p->M * p->N * p->K <= 1.5e8;
    int good = exact ? exact_check(p, c->A0[which], c->B0[which], c->Cs[which], why, sizeof why)
                     : freivalds(p, c->A0[which], c->B0[which], c->Cs[which], &s, why, sizeof why);
    if (!good) {
        if (c == &ref) infra("the reference DGEMM computed a wrong result");
        char line[260];
        snprintf(line, sizeof line, "%s (call %llu, %dx%dx%d)", why, (unsigned long long)number,
                 p->M, p->N, p->K);
        finish(3, "RESULT wrong %s\n", line);
    }
    return out;
}

static void await_ready(child *c, double limit_s) {
    hargo_control *ctl = ctl_of(c);
    if (!wait_word(c, &ctl->ready, 1, limit_s)) {
        if (c == &ref) infra("the reference process did not start");
        finish(7, "RESULT timeout %s\n", "the kernel's process did not start in time");
    }
    c->running = 1;
    stop_child(c);
}

#ifdef HARGO_CHACHA_SELFTEST
int main(void) { /* the keystream of an all-zero key, counter 0 and 1 (tests only) */
    uint32_t key[8] = {0};
    chacha s;
    chacha_init(&s, key);
    for (int i = 0; i < 32; i++) {
        uint32_t w = chacha_u32(&s);
        printf("%02x%02x%02x%02x", w & 255, (w >> 8) & 255, (w >> 16) & 255, w >> 24);
    }
    printf("\n");
    return 0;
}
#else
int main(int argc, char **argv) {
    verdict = fdopen(3, "w");
    if (!verdict) _exit(91);
    if (argc != 20)
        infra("usage: judge CANDIDATE REFERENCE M N K M2 N2 K2 WARMUP REPS MAX_REPS BUDGET_MS SEED "
              "UID GID THREADS UNTIMED_MS CALL_MS OUTPUT");
    const char *cand_path = argv[1], *ref_path = argv[2];
    int sizes[2][3] = {{atoi(argv[3]), atoi(argv[4]), atoi(argv[5])},
                       {atoi(argv[6]), atoi(argv[7]), atoi(argv[8])}};
    int warmup = atoi(argv[9]), min_reps = atoi(argv[10]), max_reps = atoi(argv[11]);
    double budget_s = atof(argv[12]) / 1000.0;
    uint64_t seed = strtoull(argv[13], NULL, 10);
    long uid = atol(argv[14]), gid = atol(argv[15]);
    int threads = atoi(argv[16]);
    double untimed_s = atof(argv[17]) / 1000.0, call_s = atof(argv[18]) / 1000.0;
    long long output_limit = atoll(argv[19]);
    for (int p = 0; p < 2; p++)
        for (int d = 0; d < 3; d++)
            if (sizes[p][d] <= 0) infra("bad sizes");
    if (warmup < 0 || min_reps < 1 || max_reps < min_reps || budget_s < 0 || threads < 1 ||
        untimed_s <= 0 || call_s <= 0 || output_limit <= 0)
        infra("bad arguments");
    nproc_limit = threads + 8;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) infra("sched_getaffinity failed");
    struct sched_param judge_prio = {.sched_priority = HARGO_RT_JUDGE};
    realtime = sched_setscheduler(0, SCHED_RR, &judge_prio) == 0;
    rt_limit_us = (rlim_t)(call_s * 1e6);
    int with_ref = strcmp(ref_path, "-") != 0;

    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* no core files, no ptrace of the judge */
    child_memory(&cand, sizes, "candidate");
    if (with_ref) child_memory(&ref, sizes, "reference");
    struct rlimit fsize = {(rlim_t)output_limit, (rlim_t)output_limit};
    if (setrlimit(RLIMIT_FSIZE, &fsize) != 0) infra("cannot limit the children's output");
    size_t ncalls = (size_t)warmup + (size_t)max_reps + 1;
    double *times = calloc((size_t)max_reps, sizeof(double));
    double *cpus = calloc((size_t)max_reps, sizeof(double));
    double *ref_times = calloc((size_t)max_reps, sizeof(double));
    double *ref_cpus = calloc((size_t)max_reps, sizeof(double));
    double *empty = calloc((size_t)max_reps, sizeof(double));
    double *ref_empty = calloc((size_t)max_reps, sizeof(double));
    uint64_t *keys = calloc(ncalls, sizeof(uint64_t));
    if (!times || !cpus || !ref_times || !ref_cpus || !empty || !ref_empty || !keys)
        infra("malloc failed");
    if (with_ref) {
        spawn(&ref, ref_path, 0, (uid_t)-1, (gid_t)-1);
        await_ready(&ref, 30.0);
    }
    say("READY\n");
    ready = 1;
    say("SANDBOX uid=%ld rt=%s\n", (long)uid, realtime ? "on" : "off");
    spawn(&cand, cand_path, 1, uid < 0 ? (uid_t)-1 : (uid_t)uid, gid < 0 ? (gid_t)-1 : (gid_t)gid);
    await_ready(&cand, untimed_s);
    say("SANDBOX seccomp=%s\n", cand.seccomp == 1 ? "on" : "off");

    uint64_t number = 0;
    for (int w = 0; w < warmup; w++, number++) {
        keys[number] = call(&cand, 0, seed, number, 1, untimed_s, "warm-up").key;
        if (with_ref) call(&ref, 0, seed, number, 1, call_s, "reference warm-up");
    }
    int reps = 0;
    double timed_s = 0.0;
    for (int r = 0; r < max_reps && (r < min_reps || timed_s < budget_s); r++, number++, reps++) {
        int ref_first = with_ref && (r % 2 == 1);
        call_result refd = {0, 0, 0};
        if (ref_first) refd = call(&ref, 0, seed, number, 0, call_s, "reference");
        call_result got = call(&cand, 0, seed, number, 1, call_s, "timed");
        times[r] = got.seconds;
        timed_s += got.seconds;
        cpus[r] = got.cpu;
        keys[number] = got.key;
        if (with_ref && !ref_first) refd = call(&ref, 0, seed, number, 0, call_s, "reference");
        ref_times[r] = refd.seconds;
        ref_cpus[r] = refd.cpu;
        /* the protocol's cost, in the pair's order and on its CPU: not counted in the budget */
        if (ref_first) ref_empty[r] = empty_call(&ref, number, call_s, "empty reference");
        empty[r] = empty_call(&cand, number, call_s, "empty");
        if (with_ref && !ref_first)
            ref_empty[r] = empty_call(&ref, number, call_s, "empty reference");
    }
    keys[number] = call(&cand, 1, seed, number, 1, untimed_s, "check").key;
    number++;
    stop_all();

    for (int r = 0; r < reps; r++) say("TIME %.9e\n", times[r]);
    for (int r = 0; with_ref && r < reps; r++) say("REF %.9e\n", ref_times[r]);
    for (int r = 0; r < reps; r++) say("NOOP %.9e\n", empty[r]);
    for (int r = 0; with_ref && r < reps; r++) say("REFNOOP %.9e\n", ref_empty[r]);
    for (int r = 0; r < reps; r++) say("CPU %.9e %.9e\n", cpus[r], times[r]);
    for (int r = 0; with_ref && r < reps; r++)
        say("REFCPU %.9e %.9e\n", ref_cpus[r], ref_times[r]);
    say("CPUS %d\n", CPU_COUNT(&allowed));
    fprintf(verdict, "KEYS");
    for (size_t k = 0; k < number; k++) fprintf(verdict, " %016llx", (unsigned long long)keys[k]);
    say("\nRESULT ok\n");
    return 0;
}
#endif
