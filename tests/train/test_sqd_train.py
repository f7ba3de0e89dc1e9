"""SQD in a real `hargo train` of jobs/gemm_sqd.toml (the tiny model, a few steps, a real local
bench worker): each request carries its stage's forbidden techniques, the prompts state them,
problems advance, the state is in the run directory and the checkpoint, `hargo sqd report`
prints its table and writes a PNG; an OpenMP kernel under a stage forbidding OpenMP is judged,
then off its stage (-5; -100 before the code under stage_rules "before") in the real bench."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hargo_hpc.bench import BenchRequest, BenchSettings, run_bench
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.cli import main
from hargo_hpc.config import load_config
from hargo_hpc.sqd import SqdSettings
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "jobs" / "gemm_sqd.toml"
STAGES = SqdSettings().stages  # open, no_simd, no_blocking (jobs/gemm_sqd.toml's too)


def small(tmp_path: Path, name: str = "gemm-sqd") -> Any:
    """jobs/gemm_sqd.toml with the tiny model (on one rank: its reference on the policy, no
    checkpointing), 2 prompts x G 2, 3 steps, a 64^3 bench on one local worker, max_steps 1 (a
    move after every step a problem was prompted in: the untrained model solves no stage, and an
    unsolved stage moves on only at max_steps; after the last stage it cycles)."""
    return load_config(JOB, [
        f"run.dir={tmp_path}", f"run.name={name}", "model.path=tiny", "model.dtype=float32",
        "model.reference_device=policy", "model.gradient_checkpointing=false",
        "rollout.num_generations=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=16",
        "training.steps=3", "training.zero_stage=2", "training.precision=fp32",
        "training.micro_batch_size=4", "training.save_every=0", "bench.size=64",
        "handoff.local_workers=1", "handoff.workers=1", "sqd.max_steps=1"])


def test_gemm_sqd_trains_with_stages_and_reports(tmp_path: Path) -> None:
    result = loop.train(small(tmp_path), log=lambda _: None, progress=False)
    run_dir = result.run_dir
    records = m.read_records(result.metrics)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all("sqd/stage_mean" in r and "sqd/archive_size" in r and "sqd/bonus_mean" in r
               for r in records)  # fmt: skip

    # every problem starts at its own stage (the i-th in name order at stage i mod 3); step 1's
    # requests forbid what their problem's stage forbids, and its prompts say so (an open
    # stage's prompt is the plain one)
    state = json.loads((run_dir / "sqd" / "state.json").read_text())
    start = {name: i % len(STAGES) for i, name in enumerate(sorted(state["problems"]))}
    requests = json.loads(next((run_dir / "handoff" / "steps").glob("step-00000001"))
                          .joinpath("requests.json").read_text())["requests"]
    assert requests
    for r in requests:
        assert r["kind"] == "gemm"
        payload = r["payload"]
        assert payload["forbidden"] == STAGES[start[payload["problem"]["name"]]].forbid, r
    for r in m.read_records(run_dir / "rollouts" / "step_000001.jsonl"):
        stage = STAGES[start[r["id"].removeprefix("gemm:")]]
        assert ("Forbidden techniques" in r["prompt"]) == (not stage.open), r["prompt"]
        for technique in stage.forbid:
            assert f"Forbidden techniques: {technique}" in r["prompt"]

    # the untrained model writes no kernel that runs: with max_steps 1 every prompted problem
    # moves on after each step it was prompted in, cycling after the last stage
    prompted: dict[str, set[int]] = {}
    for step in (1, 2, 3):
        for row in m.read_records(run_dir / "rollouts" / f"step_{step:06d}.jsonl"):
            prompted.setdefault(row["id"].removeprefix("gemm:"), set()).add(step)
    assert prompted
    for problem, steps in prompted.items():
        moved = (start[problem] + len(steps)) % len(STAGES)
        assert state["problems"][problem]["stage"] == moved, (problem, steps)
        assert sum(state["problems"][problem]["visits"].values()) == len(steps)
    results = [json.loads(x) for x in (run_dir / "sqd" / "results.jsonl").read_text()
               .splitlines()]
    assert [r["step"] for r in results] == sorted(r["step"] for r in results)
    assert {r["stage"] for r in results if r["step"] == 1} == {
        STAGES[start[r["problem"]]].name for r in results if r["step"] == 1}
    assert (run_dir / "sqd" / "state.json.bak").is_file()
    saved = ckpt.read_state(result.checkpoint)
    assert saved["client_state"]["sqd"]["problems"] == state["problems"]  # what resume restores

    done = CliRunner().invoke(main, ["sqd", "report", str(run_dir)])
    assert done.exit_code == 0, done.output
    for problem in prompted:
        assert f"{problem}: stage " in done.output
    assert "problems by stages visited:" in done.output
    png = run_dir / "sqd" / "gflops.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sqd_survives_a_stop_and_resume(tmp_path: Path) -> None:
    """Stopped by SIGUSR1 after step 1 and resumed, SQD ends where an uninterrupted run ends:
    stages, history and the results log (the untrained model's kernels fail the same way in
    both, so the bench's verdicts, and with them SQD's moves, repeat)."""
    straight = loop.train(small(tmp_path, "straight"), log=lambda _: None, progress=False)
    stopped = loop.train(small(tmp_path, "stopped"), log=lambda _: None, progress=False,
                         on_step=lambda r: r["step"] == 1 and os.kill(os.getpid(),
                                                                      signal.SIGUSR1))
    assert stopped.interrupted and stopped.step == 1
    resumed = loop.train(small(tmp_path, "stopped"), resume=True, log=lambda _: None,
                         progress=False)
    assert resumed.step == 3

    def sqd_of(run_dir: Path) -> tuple[Any, list[tuple[Any, ...]]]:
        state = json.loads((run_dir / "sqd" / "state.json").read_text())
        log = [json.loads(x) for x in (run_dir / "sqd" / "results.jsonl").read_text()
               .splitlines()]
        return state["problems"], [(r["step"], r["problem"], r["stage"], r["status"])
                                   for r in log]

    assert sqd_of(resumed.run_dir) == sqd_of(straight.run_dir)


def test_an_openmp_kernel_under_a_stage_forbidding_openmp_is_off_stage() -> None:
    """Judged first, then off its stage: -5 (stage_rules "after"); -100 before the code under
    the ablation's "before"."""
    settings = BenchSettings(size=64, check_size=37, repetitions=2, timed_budget_ms=0, warmup=0)
    request = BenchRequest(id="omp", completion=kernel_source("openmp"),
                           forbidden=["openmp"])
    record = run_bench(request, settings).to_dict()
    assert (record["status"], record["reward"], record["off_stage"]) == ("ok", -5.0, ["openmp"])
    before = settings.model_copy(update={"stage_rules": "before"})
    record = run_bench(request, before).to_dict()
    assert (record["status"], record["reward"]) == ("format_violation", -100.0)
    assert "openmp" in record["reason"]
