"""The status taxonomy of a benchmarked completion: the fixed set of verdicts a result carries.

Its own module, with no imports, so that the handoff (which validates result records) and the
bench (which produces them) share it without the handoff loading the bench's runtime.

    ok                 compiled, verified and timed
    format_violation   no code, wrong/missing gemm, forbidden header/symbol (or technique,
                       under the SQD ablation's stage_rules "before")
    compile_error      the compiler refused the completion's code
    timeout            compile or run took too long
    runtime_error      crash, signal, OOM, non-zero exit, output flood, forbidden syscall
    wrong_result       verification failed, or the inputs were modified
    infra_error        the harness or the machine failed: not the policy's fault, never scored
"""

STATUSES = (
    "ok", "format_violation", "compile_error", "timeout", "runtime_error", "wrong_result",
    "infra_error",
)  # fmt: skip
UNSCORED = ("infra_error",)
