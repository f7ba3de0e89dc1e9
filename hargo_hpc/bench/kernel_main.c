/*
 * The child side of the judge (judge.c): linked with ONE gemm (the model's kernel, statically;
 * or the trusted reference) into the executable the judge execs after the fork, the uid drop
 * and (for the model's kernel) the seccomp filter.  It maps the memfd on fd 3, makes the guard
 * pages inaccessible, says it is ready, and then runs gemm on the shared buffers each time the
 * judge bumps `go` (an empty call, `which` = HARGO_EMPTY_CALL, says done without calling it: the
 * judge times the protocol alone); between calls the judge keeps it stopped.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hargo_shared.h"

void gemm(int M, int N, int K, const double *A, const double *B, double *C);

static long futex(volatile uint32_t *addr, int op, uint32_t val) {
    return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

int main(void) {
    struct stat st;
    if (fstat(HARGO_MEMORY_FD, &st) != 0) return 70;
    unsigned char *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                               HARGO_MEMORY_FD, 0);
    if (base == MAP_FAILED) return 71;
    close(HARGO_MEMORY_FD);
    hargo_header *h = (hargo_header *)base;
    if (h->layout.magic != HARGO_MAGIC) return 72;
    long page = sysconf(_SC_PAGESIZE);
    for (int g = 0; g < h->layout.nguards && g < HARGO_MAX_GUARDS; g++)
        if (h->layout.guard_off[g] % (uint64_t)page == 0 && h->layout.guard_len[g] % (uint64_t)page == 0)
            mprotect(base + h->layout.guard_off[g], h->layout.guard_len[g], PROT_NONE);
    hargo_control *ctl = &h->control;
    __atomic_store_n(&ctl->ready, 1u, __ATOMIC_RELEASE);
    futex(&ctl->ready, FUTEX_WAKE, 1);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        while ((g = __atomic_load_n(&ctl->go, __ATOMIC_ACQUIRE)) == seen)
            futex(&ctl->go, FUTEX_WAIT, seen);
        seen = g;
        int32_t which = ctl->which;
        if (which != HARGO_EMPTY_CALL) {
            const hargo_problem *p = &h->layout.problem[which ? 1 : 0];
            gemm(p->M, p->N, p->K, (const double *)(base + p->a_off),
                 (const double *)(base + p->b_off), (double *)(base + p->c_off));
        }
        __atomic_store_n(&ctl->done, g, __ATOMIC_RELEASE);
        futex(&ctl->done, FUTEX_WAKE, 1);
    }
}
