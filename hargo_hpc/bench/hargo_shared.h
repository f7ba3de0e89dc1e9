/* The memory shared by the judge and one child (judge.c, kernel_main.c): a header page, then for
 * the timed problem and the check problem A, B and C between guard pages.  The judge writes the
 * header before the fork and keeps its own copy: nothing the child writes here is believed
 * beyond "ready" and "done" (a lie about either only costs the kernel). */
#ifndef HARGO_SHARED_H
#define HARGO_SHARED_H
#include <stdint.h>

#define HARGO_MAGIC 0x48415247304A4447ULL /* "HARG0JDG" */
#define HARGO_MEMORY_FD 3                  /* the child's memfd */
#define HARGO_CANDIDATE_FD 4               /* the child's executable (close-on-exec) */
#define HARGO_REPORT_FD 5                  /* the child's pre-exec report pipe (close-on-exec) */
#define HARGO_MAX_GUARDS 32
#define HARGO_EMPTY_CALL 2                 /* `which` of an empty call: gemm is not called */

typedef struct {
    int32_t M, N, K;
    uint64_t a_off, b_off, c_off;
} hargo_problem;

typedef struct {
    uint64_t magic;
    uint64_t control_off;
    hargo_problem problem[2]; /* 0: timed, 1: check */
    int32_t nguards;
    uint64_t guard_off[HARGO_MAX_GUARDS], guard_len[HARGO_MAX_GUARDS];
} hargo_layout;

typedef struct {
    volatile uint32_t go;       /* judge -> child: bumped for each call */
    volatile uint32_t done;     /* child -> judge: set to `go` when gemm returned */
    volatile uint32_t ready;    /* child -> judge: 1 once mapped and waiting */
    volatile int32_t which;     /* 0: timed problem, 1: check problem, 2: empty call */
} hargo_control;

typedef struct {
    hargo_layout layout;
    hargo_control control;
} hargo_header;
#endif
