/* The memory shared by the judge and one child (judge.c, kernel_main.c): a header page, then for
 * the timed problem and the check problem A, B and C between guard pages.  The judge writes the
 * header before the fork and keeps its own copy: nothing the child writes here is believed. */
#ifndef HARGO_SHARED_H
#define HARGO_SHARED_H
#include <stdint.h>

#define HARGO_MAGIC 0x48415247304A4447ULL /* "HARG0JDG" */
#define HARGO_MEMORY_FD 3                  /* the child's memfd */
#define HARGO_CANDIDATE_FD 4               /* the child's executable (close-on-exec) */
#define HARGO_MAX_GUARDS 32

enum { HARGO_STAGE_FORKED = 0, HARGO_STAGE_EXEC = 1, HARGO_STAGE_EXEC_FAILED = 2,
       HARGO_STAGE_UID_FAILED = 3, HARGO_STAGE_RUNNING = 4 };

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
    volatile int32_t which;     /* 0: timed problem, 1: check problem */
    volatile int32_t seccomp;   /* 1 filter on, 2 unsupported, 0 not asked (reference) */
    volatile int32_t stage;     /* HARGO_STAGE_* */
    volatile int32_t exec_errno;
} hargo_control;

typedef struct {
    hargo_layout layout;
    hargo_control control;
} hargo_header;
#endif
