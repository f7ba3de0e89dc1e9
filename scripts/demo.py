#!/usr/bin/env python3
"""`make demo`: one RL step's reward path for generated DGEMM code, end to end on Slurm.

What runs (all real: Slurm, the C compiler, the sandboxed harness, the handoff files):
  1. the resolved config of jobs/demo.toml is written to runs/demo/config.toml;
  2. a bench worker job array is submitted with sbatch to the `cpu` partition, rendered from
     hargo_hpc/slurm/templates/bench_worker.sh.j2;
  3. the "trainer" side writes one step of completions (two GRPO groups of four, with the
     shipped reference kernels and typical failures of generated code, one of them using a
     technique that its SQD stage forbids) into the handoff directory and polls for rewards;
  4. the workers compile, verify and time each kernel and write result records;
  5. rewards become GRPO advantages and HARGO weights (discrimination signal only: the demo
     has no policy model yet, so no reference log-probs), printed side by side;
  6. the trainer writes the stop sentinel; the array's tasks exit; sacct shows their states.

The RL trainer itself lands in a later issue; this is the longest real path that exists now.
Exit status 0 only when every completion got the status it should.
Usage: scripts/demo.py [section.key=value ...]   (needs SLURM_CONF; `make demo` sets it)
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "hargo_hpc" / "bench" / "kernels"

FENCE = "```"


def completion(source: str, preface: str = "Here is an optimised kernel.") -> str:
    """What a chat model typically answers: a sentence and a fenced C block."""
    return f"{preface}\n\n{FENCE}c\n{source.strip()}\n{FENCE}\n"


def kernel(name: str) -> str:
    return (KERNELS / f"{name}.c").read_text()


SYNTAX_ERROR = """
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
"""

TRANSPOSED = """
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    /* a classic slip: indexes B as if it were transposed */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[j * K + k];
            C[i * N + j] = s;
        }
}
"""

# (id, completion, techniques SQD forbids for this problem, expected status)
GROUP_A = [
    ("p0-naive", completion(kernel("naive")), [], "ok"),
    ("p0-blocked", completion(kernel("blocked")), [], "ok"),
    ("p0-simd", completion(kernel("simd")), [], "ok"),
    ("p0-syntax", completion(SYNTAX_ERROR, "Try this:"), [], "compile_error"),
]
GROUP_B = [
    ("p1-openmp", completion(kernel("openmp")), [], "ok"),
    ("p1-reordered", completion(kernel("reordered")), [], "ok"),
    ("p1-transposed", completion(TRANSPOSED), [], "wrong_result"),
    ("p1-openmp-forbidden", completion(kernel("openmp")), ["openmp"], "format_violation"),
]


def main(argv: list[str]) -> int:
    import torch

    from hargo_hpc.algorithms import compute_advantages, hargo_weights
    from hargo_hpc.config import ConfigError, load_config, save_resolved
    from hargo_hpc.handoff import Trainer
    from hargo_hpc.slurm.jobs import (
        SlurmError,
        bench_worker_script,
        sbatch,
        wait_finished,
        write_script,
    )

    try:
        cfg = load_config(REPO / "jobs" / "demo.toml", argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run_dir = cfg.run_dir().resolve()
    handoff_dir = cfg.handoff_dir().resolve()
    if handoff_dir.is_relative_to(run_dir):  # the demo owns its run directory, nothing else
        shutil.rmtree(handoff_dir, ignore_errors=True)
    config_file = save_resolved(cfg, run_dir)
    print(f"[1/6] resolved config: {config_file}")

    script = write_script(
        bench_worker_script(cfg, handoff_dir, config_file, log_dir=run_dir / "logs",
                            python=sys.executable),
        run_dir / "bench_worker.sh",
    )
    (run_dir / "logs").mkdir(exist_ok=True)
    trainer = Trainer(handoff_dir, cfg.handoff)
    try:
        job_id = sbatch(script)
    except SlurmError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[2/6] bench worker array: job {job_id}, {cfg.handoff.workers} task(s) on "
          f"partition {cfg.slurm.bench.partition} ({script})")

    groups = [GROUP_A, GROUP_B]
    requests = [
        {"id": rid, "completion": text, "forbidden": forbidden, "stage": 1 if forbidden else 0}
        for group in groups for rid, text, forbidden, _ in group
    ]
    start = time.monotonic()
    trainer.submit(0, requests)
    print(f"[3/6] step 0: {len(requests)} completions in {len(groups)} groups written to "
          f"{handoff_dir}")
    results = trainer.collect(0, timeout=300)
    print(f"[4/6] all results in after {time.monotonic() - start:.1f} s")

    ordered = [rid for group in groups for rid, *_ in group]
    unscored = [rid for rid in ordered if not results[rid].get("scored", True)]
    if unscored:  # infra_error (timeouts, give-ups): never scored against the policy
        print(f"error: no reward for {', '.join(unscored)}: "
              f"{results[unscored[0]].get('reason', '')}", file=sys.stderr)
        trainer.stop("demo failed")
        return 1
    rewards = torch.tensor([float(results[rid]["reward"]) for rid in ordered])
    group_index = torch.tensor([g for g, group in enumerate(groups) for _ in group])
    advantages = compute_advantages("grpo", rewards, group_index)
    lengths = [len(text) for group in groups for _, text, *_ in group]
    mask = torch.zeros(len(ordered), max(lengths), dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    weights, _ = hargo_weights(rewards, group_index, torch.zeros(mask.shape), mask,
                               confidence=False)

    expected = {rid: status for group in groups for rid, _, _, status in group}
    print("[5/6] rewards, GRPO advantages, HARGO weights (discrimination signal only)")
    header = (f"  {'completion':<21}{'status':<18}{'GFLOPS':>8}{'reward':>9}{'GRPO A':>9}"
              f"{'HARGO w':>9}  techniques")
    print(header)
    print("  " + "-" * (len(header) - 2))
    wrong = []
    for i, rid in enumerate(ordered):
        record = results[rid]
        gflops = (record.get("gflops") or {}).get("median")
        flops = f"{gflops:8.2f}" if gflops is not None else f"{'-':>8}"
        techniques = ",".join(record.get("techniques") or []) or "-"
        mark = "" if record["status"] == expected[rid] else f"   <- expected {expected[rid]}"
        if mark:
            wrong.append(rid)
        print(f"  {rid:<21}{record['status']:<18}{flops}{record['reward']:9.2f}"
              f"{advantages[i]:9.3f}{weights[i]:9.3f}  {techniques}{mark}")

    trainer.stop("demo finished")
    try:
        states = wait_finished(job_id, count=cfg.handoff.workers, timeout=120)
    except SlurmError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    summary = ", ".join(f"{job}={state}" for job, state in sorted(states.items()))
    print(f"[6/6] stop sentinel written; sacct: {summary}")
    if wrong or any(state != "COMPLETED" for state in states.values()):
        print(f"demo FAILED: unexpected status for {', '.join(wrong) or 'the worker array'}",
              file=sys.stderr)
        return 1
    print("demo ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
