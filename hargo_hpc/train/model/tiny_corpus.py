"""The text the `tiny` model's byte-level BPE tokenizer is trained on (written for this project).

A few KB covering what the tasks put in front of the model: English instructions and short
answers, yes/no verdicts, C with OpenMP (the GEMM signature among it), Fortran with OpenMP, and
the chat markers. The tokenizer is byte-level, so any text still encodes; this corpus only decides
which byte sequences become single tokens. Changing a character here changes the recipe hash and
so the cache directory of the tiny model (`models.tiny_recipe_hash`).
"""

from __future__ import annotations

ENGLISH = """\
Below is an instruction that describes a task. Write a response that appropriately completes
the request. Answer with yes or no. Does the following code contain a data race?
Yes. No. yes no Yes, it does. No, it does not.
A data race happens when two threads touch the same memory location at the same time, at least
one of them writes, and nothing orders the two accesses. A reduction clause, an atomic update or
a critical section removes the race. Private copies of a variable cannot race.
What is the benchmark used for training large language models in MLPerf? The training suite
measures the time to reach a target quality. The inference suite measures throughput and latency.
What does the OpenMP schedule clause control? It controls how loop iterations are divided among
the threads of a team: static, dynamic, guided, auto or runtime.
Explain what a parallel region is. A parallel region is a block of code executed by a team of
threads. The master thread forks the team at the start and joins it at the end.
The kernel multiplies two matrices of doubles and adds the product to a third one.
Write a fast double-precision matrix multiplication in C. Use blocking for the caches, keep the
inner loop contiguous, and let the compiler vectorise it. The harness owns main and the timing.
The measured rate is reported in GFLOPS: two floating point operations per multiply-add, so the
count is 2 * M * N * K for one call.
"""

C_CODE = """\
#include <stddef.h>
#include <omp.h>

void gemm(int M, int N, int K, const double *A, const double *B, double *C)
{
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++) {
        for (int k = 0; k < K; k++) {
            const double a = A[i * K + k];
            for (int j = 0; j < N; j++) {
                C[i * N + j] += a * B[k * N + j];
            }
        }
    }
}

void gemm(int M, int N, int K, const double *A, const double *B, double *C)
{
    const int BS = 64;
    #pragma omp parallel for collapse(2)
    for (int ii = 0; ii < M; ii += BS)
        for (int jj = 0; jj < N; jj += BS)
            for (int kk = 0; kk < K; kk += BS)
                for (int i = ii; i < ii + BS && i < M; i++)
                    for (int k = kk; k < kk + BS && k < K; k++) {
                        double a = A[(size_t)i * K + k];
                        #pragma omp simd
                        for (int j = jj; j < jj + BS && j < N; j++)
                            C[(size_t)i * N + j] += a * B[(size_t)k * N + j];
                    }
}

int main(int argc, char **argv)
{
    int sum = 0;
    int a[1000];
    #pragma omp parallel for reduction(+:sum)
    for (int i = 0; i < 1000; i++) {
        a[i] = i * 2;
        sum += a[i];
    }
    #pragma omp parallel for
    for (int i = 0; i < 999; i++)
        a[i + 1] = a[i] + 1;
    #pragma omp parallel
    {
        #pragma omp single
        printf("threads: %d\\n", omp_get_num_threads());
        #pragma omp critical
        sum = sum + 1;
        #pragma omp atomic
        sum += 2;
        #pragma omp barrier
    }
    return 0;
}
"""

FORTRAN = """\
program race
    use omp_lib
    implicit none
    integer :: i, total
    integer, dimension(100) :: a
    total = 0
    !$omp parallel do reduction(+:total)
    do i = 1, 100
        a(i) = i
        total = total + a(i)
    end do
    !$omp end parallel do
    !$omp parallel do
    do i = 1, 99
        a(i + 1) = a(i) + 1
    end do
    !$omp end parallel do
    print *, 'total =', total
end program race

subroutine gemm(m, n, k, a, b, c)
    integer, intent(in) :: m, n, k
    double precision, intent(in) :: a(m, k), b(k, n)
    double precision, intent(inout) :: c(m, n)
    integer :: i, j, l
    !$omp parallel do private(i, l)
    do j = 1, n
        do l = 1, k
            do i = 1, m
                c(i, j) = c(i, j) + a(i, l) * b(l, j)
            end do
        end do
    end do
    !$omp end parallel do
end subroutine gemm
"""

DIALOGUE = """\
<|im_start|>system
You are a helpful assistant for high performance computing.<|im_end|>
<|im_start|>user
Does this loop have a data race? for (i = 0; i < n; i++) x[i] = x[i + 1];<|im_end|>
<|im_start|>assistant
yes<|im_end|>
<|im_start|>user
Is a variable declared inside the parallel region shared by default?<|im_end|>
<|im_start|>assistant
no<|im_end|>
<|im_start|>user
Write the kernel.<|im_end|>
<|im_start|>assistant
```c
void gemm(int M, int N, int K, const double *A, const double *B, double *C)
{
}
```<|im_end|>
"""

CORPUS = "\n".join([ENGLISH, C_CODE, FORTRAN, DIALOGUE, ENGLISH.lower(), C_CODE])
