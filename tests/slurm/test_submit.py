"""`hargo render` / `hargo submit`: the plan of an experiment (sweep, jobs, dependencies), its
batch scripts, and real submissions on the local cluster: a two-method sweep with a GEMM task
served by one worker array and the chained eval, a refused submission that leaves nothing
behind, a requeued training task that finishes like an uninterrupted one, and the local
executor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from waiting import wait_until

from hargo_hpc.cli import main
from hargo_hpc.config import ConfigError, JobResources, load_config, validate_config
from hargo_hpc.slurm import submission as sub
from hargo_hpc.slurm import submitter
from hargo_hpc.slurm.manifest import load_manifest
from hargo_hpc.slurm.watch import job_states, log_path, status, wait_for

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "jobs" / "tiny.toml"
JOBS = sorted((REPO / "jobs").glob("*.toml"))
PY = sys.executable
SMALL = ["training.steps=2", "training.save_every=0", f"slurm.python={PY}",
         "slurm.train.time=00:10:00", "slurm.bench.time=00:10:00", "slurm.eval.time=00:05:00",
         "slurm.eval.partition=cpu", "slurm.eval.gpus_per_node=0", "slurm.train.mem=2G",
         "slurm.bench.mem=2G", "slurm.eval.mem=2G"]
GEMM_SWEEP = ['data.tasks=[{name="plp_qa"},{name="gemm"}]',
              'sweep={"algorithm.name"=["grpo","hargo"]}', "handoff.workers=1",
              "handoff.worker_max_idle_s=300"]


def requeues(job_id: str) -> int:
    """How often Slurm requeued the job: sacct's REQUEUED records of it (-D: every run)."""
    out = subprocess.run(["sacct", "-j", job_id, "-D", "-X", "-n", "-P", "-o", "JobID,State"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return sum(line.split("|")[1].startswith("REQUEUED") for line in out.splitlines())


def tiny(tmp_path: Path, *overrides: str) -> Any:
    return load_config(TINY, [f"run.dir={tmp_path}", *SMALL, *overrides])


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)



# ---------------------------------------------------------------- the plan, without Slurm


def test_a_sweep_with_gemm_plans_one_worker_array_for_every_run(tmp_path: Path) -> None:
    plan = sub.plan_submission(tiny(tmp_path, *GEMM_SWEEP))
    root = tmp_path / "tiny"
    assert [j.name for j in plan.jobs] == ["bench", "train", "eval", "report", "stop"]
    assert [(j.name, j.tasks) for j in plan.jobs] == [("bench", 1), ("train", 2), ("eval", 2),
                                                     ("report", 1), ("stop", 1)]
    assert plan.job("report").after == [("afterok", "eval")]
    assert plan.job("report").commands[0][-5:] == [
        "report", str(root / "name-grpo"), str(root / "name-hargo"), "-o", str(root / "report")]
    # the workers first, training once one of them has started (up before its first wait)
    assert plan.job("bench").after == []
    assert plan.job("train").after == [("after", "bench")]
    assert plan.job("stop").after == [("afterany", "train"), ("afterany", "eval")]
    # evaluation i once training i succeeded, beside the trainings still running
    assert plan.job("eval").after == [("aftercorr", "train")]
    assert plan.job("stop").resources.partition == "cpu"  # the bench's
    # only sft and train requeue and checkpoint themselves (workers: Slurm's JobRequeue
    # default; an explicit --requeue left a cut-off node's worker "launch failed requeued held")
    assert [j.name for j in plan.jobs if j.requeue] == ["train"]
    assert plan.root == root and plan.handoff_dir == root / "handoff"
    assert [(r.label, r.dir, r.config.algorithm.name) for r in plan.runs] == [
        ("name-grpo", root / "name-grpo", "grpo"), ("name-hargo", root / "name-hargo", "hargo")]
    # both runs meet the same workers in one directory, their handoff steps 1e6 apart
    assert {r.config.handoff_dir() for r in plan.runs} == {root / "handoff"}
    assert [r.config.handoff.step_offset for r in plan.runs] == [0, 1_000_000]
    assert all(r.config.handoff.local_workers == 0 and not r.config.sweep for r in plan.runs)
    assert plan.job("train").commands[1] == [PY, "-m", "hargo_hpc", "train",
                                             str(root / "name-hargo" / "config.toml")]
    assert plan.job("eval").commands[0][-2:] == ["eval", str(root / "name-grpo")]


def test_without_a_sweep_or_a_bench_task_the_run_is_the_submission(tmp_path: Path) -> None:
    plan = sub.plan_submission(tiny(tmp_path))
    assert [j.name for j in plan.jobs] == ["train", "eval", "report"]  # no workers to stop
    assert [r.dir for r in plan.runs] == [tmp_path / "tiny"]  # where `hargo train` writes


@pytest.mark.parametrize(("sweep", "message"), [
    ('sweep={"algorithm.nme"=["grpo"]}', "unknown key 'nme' in algorithm"),
    ('sweep={"training.lr"=[]}', "sweep key 'training.lr': no values"),
    ('sweep={"training.lr"=["fast"]}', "(sweep point lr-fast): training.lr: bad value"),
    ('sweep={"bench.size"=[64, 128]}', "sweep key 'bench.size': every run of a submission"),
])
def test_a_bad_sweep_is_one_line_and_nothing_is_written(tmp_path: Path, sweep: str,
                                                        message: str) -> None:
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", sweep, "--dry-run")
    assert done.exit_code == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_dry_run_prints_every_script_and_the_graph_and_submits_nothing(tmp_path: Path) -> None:
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL, *GEMM_SWEEP, "--dry-run")
    assert done.exit_code == 0, done.stderr
    out = done.stdout
    for name in ("bench", "train", "eval", "report", "stop"):
        assert f"# ---- {name}.sh\n#!/bin/bash\n" in out
    graph = out.split("# ---- dependency graph\n")[1].splitlines()
    assert [line.split()[0] for line in graph] == ["bench", "train", "eval", "report", "stop"]
    assert "after -" in graph[0] and "after after:bench" in graph[1]
    assert "after aftercorr:train" in graph[2]
    assert "after afterok:eval" in graph[3]
    assert "after afterany:train, afterany:eval" in graph[4]
    assert "#SBATCH --requeue" in out and "#SBATCH --signal=USR1@120" in out
    assert list(tmp_path.iterdir()) == []


def test_render_writes_standalone_scripts_and_their_configs(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    done = invoke("render", str(TINY), f"run.dir={tmp_path / 'runs'}", *SMALL, *GEMM_SWEEP,
                  "-o", str(out))
    assert done.exit_code == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bench.sh", "configs", "eval.sh", "logs",
                                                    "report.sh", "stop.sh", "train.sh"]
    # Slurm does not create an output file's directory (a job without one fails unseen)
    assert f"#SBATCH --output={out.absolute()}/logs/%x-%A_%a.out" in (out / "train.sh").read_text()
    configs = sorted((out / "configs").iterdir())
    assert [p.name for p in configs] == ["name-grpo.toml", "name-hargo.toml"]
    assert load_config(configs[1]).algorithm.name == "hargo"
    train = (out / "train.sh").read_text()
    assert f"1) CMD=({PY} -m hargo_hpc train {configs[1]}) ;;" in train
    for script in out.glob("*.sh"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
    assert not (tmp_path / "runs").exists()  # rendering submits and trains nothing


def test_the_scripts_of_a_submission_log_into_a_directory_that_exists(tmp_path: Path) -> None:
    """Slurm opens a job's --output before it runs the script and does not create its
    directory: a script sbatched by hand from scripts/ failed at once (exit 0:53)."""
    plan = sub.plan_submission(tiny(tmp_path, *GEMM_SWEEP))
    for path in sub.write_scripts(plan).values():
        output = next(line for line in path.read_text().splitlines()
                      if line.startswith("#SBATCH --output="))
        assert Path(output.split("=", 1)[1]).parent == plan.log_dir, output
    assert plan.log_dir.is_dir()


def test_without_sbatch_the_error_points_to_the_local_executor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    plan = sub.plan_submission(tiny(tmp_path))
    with pytest.raises(sub.SubmitError, match=r"sbatch not found: .* `--executor local`"):
        submitter.submit_plan(plan, log=lambda _: None)


def test_a_signal_lead_not_shorter_than_the_time_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"slurm\.train\.signal_lead_s \(120 s\) must be "
                                          r"shorter than its time limit \(00:02:00\)"):
        sub.plan_submission(tiny(tmp_path, "slurm.train.time=00:02:00"))
    assert sub.plan_submission(tiny(tmp_path, "slurm.train.time=00:02:00",
                                    "slurm.train.signal_lead_s=60")).jobs


def test_an_existing_submission_is_refused(tmp_path: Path) -> None:
    plan = sub.plan_submission(tiny(tmp_path))
    plan.root.mkdir(parents=True)
    (plan.root / "run.json").write_text("{}")
    for executor in ("slurm", "local"):
        with pytest.raises(sub.SubmitError, match="holds a submission or run already"):
            submitter.submit_plan(plan, executor, log=lambda _: None)
    assert (plan.root / "run.json").read_text() == "{}"
    assert not (plan.root / "submitit").exists()


# ---------------------------------------------------------------- on the local cluster


def fits_here(job: Path) -> list[str]:
    """Overrides that shrink a shipped job's resources to the local cluster's one node."""
    config = load_config(job)
    out = []
    for kind in ("train", "bench", "eval"):
        out += [f"slurm.{kind}.nodes=1", f"slurm.{kind}.ntasks_per_node=1",
                f"slurm.{kind}.cpus_per_task=1", f"slurm.{kind}.mem=1G",
                f"slurm.{kind}.gpus_per_node={min(1, getattr(config.slurm, kind).gpus_per_node)}"]
    return out


@pytest.mark.slurm
@pytest.mark.parametrize("job", JOBS, ids=[p.stem for p in JOBS])
def test_every_shipped_job_renders_to_scripts_sbatch_accepts(
        slurm_cluster: dict[str, str], tmp_path: Path, job: Path) -> None:
    for name, overrides in (("as-shipped", []), ("local-size", fits_here(job))):
        out = tmp_path / name
        done = invoke("render", str(job), f"run.dir={tmp_path / 'runs'}", *overrides,
                      "-o", str(out))
        assert done.exit_code == 0, done.stderr
        for script in sorted(out.glob("*.sh")):
            assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
            test = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                                  text=True, timeout=60)
            said = test.stderr.strip()
            if name == "as-shipped" and test.returncode != 0:
                # a production size (8 GPUs, 512G) this one-node cluster cannot hold: Slurm
                # parsed every option and refused only the size
                assert "Requested node configuration is not available" in said, (script, said)
            else:
                assert test.returncode == 0 and "to start at" in said, (script, said)


@pytest.mark.slurm
def test_submit_a_two_method_sweep_with_gemm_served_by_one_worker_array(
        slurm_cluster: dict[str, str], tmp_path: Path, summary_line: Any) -> None:
    started = time.monotonic()
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL, *GEMM_SWEEP, "--wait")
    root = tmp_path / "tiny"
    assert done.exit_code == 0, done.stderr + "\n" + "".join(
        p.read_text()[-2000:] for p in (root / "submitit").rglob("*.out"))
    manifest = load_manifest(root)
    assert [j.name for j in manifest.jobs] == ["bench", "train", "eval", "report", "stop"]
    assert manifest.job("train").dependency == f"after:{manifest.job('bench').job_id}"
    progress = done.stderr.splitlines()  # --wait: a line whenever states or steps change
    assert any("train 2 RUNNING" in line for line in progress), progress
    assert "train 2 COMPLETED" in progress[-1] and "name-hargo step 2/2" in progress[-1]
    assert progress[-1].endswith("0 pending benchmarks")
    summary_line(f"hargo submit: 2-run sweep + GEMM worker array + eval + report + stop on the "
                 f"local cluster: {time.monotonic() - started:.0f} s")

    states = job_states(manifest.job_ids())
    arrays = {job.job_id for job in manifest.jobs if job.tasks > 1}  # one-task jobs: plain ids
    tasks = {k: v for k, v in states.items() if "[" not in k and k not in arrays}
    assert len(tasks) == 2 + 1 + 2 + 1 + 1 and set(tasks.values()) == {"COMPLETED"}, states
    report = root / "report"
    table = (report / "report.md").read_text()
    assert "grpo" in table and "hargo" in table  # one row per run
    html = (report / "report.html").read_text()
    assert "grpo" in html and "hargo" in html and list(report.glob("*.png"))
    assert html.count("data:image/png;base64,") == len(list(report.glob("*.png")))
    for run in manifest.runs:
        run_dir = Path(run.dir)
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text()
                   .splitlines()]
        assert [r["step"] for r in records] == [1, 2]
        assert (run_dir / "finished.json").is_file() and (run_dir / "export").is_dir()
        evaluated = json.loads((run_dir / "eval" / "metrics.json").read_text())
        assert evaluated["model"] == str(run_dir / "export") and evaluated["split"] == "eval"
        assert evaluated["tasks"]["gemm"]["n"] >= 1  # benchmarked by the same worker array
        assert evaluated["tasks"]["gemm"]["scored"] == evaluated["tasks"]["gemm"]["rows"]
    # the GEMM completions went out through the shared handoff and came back from the bench
    steps = sorted(p.name for p in (root / "handoff" / "steps").iterdir())
    assert any(s.startswith("step-0000") for s in steps)
    assert any(s.startswith("step-0100") for s in steps)  # the second run's offset steps
    results = [json.loads(p.read_text()) for p in (root / "handoff" / "steps").glob(
        "*/results/*.json")]
    assert results and all(r["record"]["status"] for r in results)
    assert (root / "handoff" / "STOP").is_file()  # the stop job ended the workers

    shown = invoke("status", str(root))
    assert shown.exit_code == 0, shown.stderr
    assert "name-grpo" in shown.stdout and "name-hargo" in shown.stdout
    assert shown.stdout.count("2/2") == 2 and "4 COMPLETED" not in shown.stdout
    data = json.loads(invoke("status", str(root), "--json").stdout)
    assert [r["finished"] for r in data["runs"]] == [True, True]


@pytest.mark.slurm
def test_a_refused_submission_leaves_nothing_behind(slurm_cluster: dict[str, str],
                                                    tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Slurm's own message before anything is submitted: an unknown partition
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL,
                  "slurm.eval.partition=nowhere")
    assert done.exit_code == 2
    assert "sbatch refused eval.sh" in done.stderr and "invalid partition" in done.stderr.lower()
    assert not (tmp_path / "tiny" / "run.json").exists()

    # accepted by --test-only, then refused half way: what was submitted is cancelled
    submitted, calls = submitter._submit_array, []

    def refuse_the_second(executor: Any, entries: list[Any]) -> list[Any]:
        calls.append(entries)
        if len(calls) == 2:  # the eval job, after the training job went out
            raise RuntimeError("sbatch refused eval.sh: a refusal made by this test")
        return submitted(executor, entries)

    monkeypatch.setattr(submitter, "_submit_array", refuse_the_second)
    plan = sub.plan_submission(tiny(tmp_path / "second"))
    with pytest.raises(sub.SubmitError, match="a refusal made by this test; cancelled the "
                                              "jobs already submitted"):
        submitter.submit_plan(plan, log=lambda _: None)
    train_id = load_manifest(plan.root).job("train").job_id
    assert train_id
    wait_until(lambda: set(job_states([train_id]).values()) <= {"CANCELLED"}
               and job_states([train_id]), 60, f"job {train_id} CANCELLED")


@pytest.mark.slurm
def test_a_requeued_training_task_resumes_and_ends_like_an_uninterrupted_run(
        slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    steps = ["training.steps=6", "training.save_every=1"]
    for name in ("requeued", "straight"):
        done = invoke("submit", str(TINY), f"run.dir={tmp_path / name}", *SMALL, *steps)
        assert done.exit_code == 0, done.stderr
    requeued = load_manifest(tmp_path / "requeued" / "tiny")
    straight = load_manifest(tmp_path / "straight" / "tiny")
    metrics = tmp_path / "requeued" / "tiny" / "metrics.jsonl"
    wait_until(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 2, 300,
               "two steps of the run to requeue")
    train = requeued.job("train")  # one run: a plain job, not an array
    subprocess.run(["scontrol", "requeue", train.job_id], check=True, capture_output=True,
                   timeout=60)
    for manifest in (requeued, straight):
        failed = wait_for(manifest, poll_s=1.0, timeout_s=480, write=lambda _: None)
        assert failed == "", failed
    assert requeues(train.job_id) >= 1
    text = log_path(requeued, train, 0).read_text()  # both runs of the task, appended
    assert "DUE TO JOB REQUEUE" in text
    # the restart continued from a checkpoint: step 1 ran once, step 6 was reached once
    assert text.count("step 1/6 ") == 1 and text.count("step 6/6 ") == 1, text[-3000:]
    got = [json.loads(line) for line in metrics.read_text().splitlines()]
    want = [json.loads(line) for line in
            (tmp_path / "straight" / "tiny" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2, 3, 4, 5, 6]
    for key in ("reward", "loss", "kl", "grad_norm", "learning_rate"):
        assert got[-1][key] == pytest.approx(want[-1][key], rel=1e-5, abs=1e-7), key
    assert status(requeued).runs[0].finished


@pytest.mark.slurm
def test_a_training_task_at_its_time_limit_checkpoints_requeues_and_ends_like_a_straight_run(
        slurm_cluster: dict[str, str], tmp_path: Path, summary_line: Any) -> None:
    """A 2-minute limit with signal_lead_s 60: submitit's signal comes about a minute in,
    `Resumable.checkpoint` stops the trainer (a checkpoint at its next phase boundary) and
    submitit requeues the task, which continues with --resume, as often as it takes (sacct
    counts the requeues); the metrics are those of the same run submitted without a limit."""
    from hargo_hpc.train import metrics as m

    # enough steps for about 80 s of training at the probe's speed (one thread, as each task
    # below gets): more than the minute an allocation trains before the signal. A machine that
    # slows down after the probe needs more allocations, not a different outcome: the requeue
    # budget and the deadline are sized for 20 times slower
    probe = subprocess.run([PY, "-m", "hargo_hpc", "train", str(TINY), f"run.dir={tmp_path}",
                            "run.name=probe", "training.steps=6", "training.save_every=0"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert probe.returncode == 0, probe.stderr[-2000:]
    seconds = sorted(r["timing_s/step"] for r in m.read_records(
        tmp_path / "probe" / "metrics.jsonl")[1:])[2]
    steps = max(40, round(80 / seconds))
    common = [*SMALL, f"training.steps={steps}", "training.save_every=0",
              "slurm.train.cpus_per_task=1", "slurm.train.max_requeues=40"]
    started = time.monotonic()
    for name, limit in (("limited", ["slurm.train.time=00:02:00",
                                     "slurm.train.signal_lead_s=60"]), ("straight", [])):
        done = invoke("submit", str(TINY), f"run.dir={tmp_path / name}", *common, *limit)
        assert done.exit_code == 0, done.stderr
    limited, straight = (load_manifest(tmp_path / name / "tiny")
                         for name in ("limited", "straight"))
    for manifest in (limited, straight):
        failed = wait_for(manifest, poll_s=2.0, timeout_s=2400, write=lambda _: None)
        log = log_path(manifest, manifest.job("train"), 0)
        assert failed == "", failed + "\n" + (log.read_text()[-4000:] if log.is_file() else "")
    train = limited.job("train")
    count = requeues(train.job_id)
    summary_line(f"time limit 2 min, {steps} steps ({seconds:.2f} s each): {count} requeue(s), "
                 f"{time.monotonic() - started:.0f} s")
    assert count >= 1
    text = log_path(limited, train, 0).read_text()  # every run of the task, appended
    assert text.count("stopped for requeue after") == count, text[-3000:]
    assert "checkpoint written" in text
    got, want = (m.read_records(tmp_path / name / "tiny" / "metrics.jsonl")
                 for name in ("limited", "straight"))
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(1, steps + 1))
    assert [m.deterministic(r) for r in got] == [m.deterministic(r) for r in want]


def test_the_local_executor_honours_the_edges_and_runs_the_sft_first(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(
        [PY, "-m", "hargo_hpc", "submit", str(TINY), f"run.dir={tmp_path}", *SMALL,
         "training.steps=1", "sft.steps=2", "--executor", "local"],
        capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stderr.splitlines()
    assert [line.split(":")[0] for line in said if line.startswith("started")] == [
        "started sft", "started train", "started eval", "started report"], said
    # afterok: training started only once the SFT had ended, from its export
    assert said.index("sft: 1 task(s) done") < said.index("started train: 1 local process(es)")
    root = tmp_path / "tiny"
    assert load_config(root / "config.toml").model.path == str(root / "sft" / "export")
    assert (root / "sft" / "finished.json").is_file() and (root / "finished.json").is_file()


def test_the_local_walk_starts_a_job_only_when_its_edges_hold() -> None:
    """`submitter._edges` over one snapshot of the started jobs' states: after = started;
    afterok = every task succeeded, never once one failed; afterany = every task ended, also
    when the job never ran."""
    def job(*after: tuple[str, str]) -> sub.PlannedJob:
        return sub.PlannedJob("j", "base.sh.j2", JobResources(), [["true"]], list(after))

    edges = submitter._edges
    assert edges(job(("after", "a")), {}, {}) == "wait"
    assert edges(job(("after", "a")), {"a": "running"}, {}) == "go"
    assert edges(job(("afterok", "a")), {"a": "running"}, {}) == "wait"
    assert edges(job(("afterok", "a")), {"a": "ok"}, {}) == "go"
    assert edges(job(("afterok", "a")), {"a": "failed"}, {}) == "a failed"
    assert edges(job(("afterany", "a")), {"a": "failed"}, {}) == "go"
    assert edges(job(("afterany", "a")), {}, {"a": "b failed"}) == "go"
    assert edges(job(("afterok", "a")), {}, {"a": "b failed"}) == "a did not run"
    assert edges(job(("after", "a")), {}, {"a": "b failed"}) == "a did not run"
    assert edges(job(("afterany", "a"), ("afterany", "b")), {"a": "ok"}, {}) == "wait"
    # aftercorr (task by task on Slurm) waits here for the whole job, as afterok
    assert edges(job(("aftercorr", "a")), {"a": "running"}, {}) == "wait"
    assert edges(job(("aftercorr", "a")), {"a": "ok"}, {}) == "go"
    assert edges(job(("aftercorr", "a")), {"a": "failed"}, {}) == "a failed"


def test_each_edge_in_sbatchs_form() -> None:
    dependency = submitter._dependency
    assert dependency("after", ["7"], 4) == "after:7_0"  # its first task started
    assert dependency("after", ["7"], 1) == "after:7"
    assert dependency("afterok", ["7", "9"], 5) == "afterok:7:9"  # every part
    assert dependency("afterany", ["7"], 1) == "afterany:7"
    # aftercorr pairs the parts of two jobs of as many tasks; a plain job (one task) waits
    # afterok on its own part
    assert dependency("aftercorr", ["7", "9"], 4, part=0, count=3) == "aftercorr:7"
    assert dependency("aftercorr", ["7", "9"], 4, part=1, count=1) == "afterok:9"


def test_the_local_executor_runs_the_same_jobs_as_processes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(
        [PY, "-m", "hargo_hpc", "submit", str(TINY), f"run.dir={tmp_path}", *SMALL,
         *GEMM_SWEEP[:1], "handoff.workers=1", "handoff.worker_max_idle_s=120",
         "--executor", "local"],
        capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    root = tmp_path / "tiny"
    manifest = load_manifest(root)
    assert manifest.executor == "local"
    started = [line.split(":")[0] for line in done.stderr.splitlines()
               if line.startswith("started")]
    # the plan's edges: train after bench started; eval aftercorr (here: afterok), report
    # afterok; stop afterany
    assert started == ["started bench", "started train", "started eval", "started report",
                       "started stop"], done.stderr
    evaluated = json.loads((root / "eval" / "metrics.json").read_text())
    assert evaluated["tasks"]["gemm"]["scored"] == evaluated["tasks"]["gemm"]["rows"] >= 1
    assert (root / "handoff" / "STOP").is_file()
    results = list((root / "handoff" / "steps").glob("*/results/*.json"))
    assert results  # the GEMM completions were benchmarked by the local worker


def test_config_validate_counts_the_sweep(tmp_path: Path) -> None:
    done = invoke("config", "validate", str(REPO / "jobs" / "sweep.toml"))
    assert done.exit_code == 0 and "20 sweep runs" in done.stdout
    with pytest.raises(ConfigError, match="no values"):
        sub.plan_submission(validate_config({"sweep": {"run.seed": []}}))


def test_make_dry_run_renders_every_shipped_job() -> None:
    venv = Path(sys.executable).parent.parent
    done = subprocess.run(["make", "-s", "-C", str(REPO), "dry-run", f"VENV={venv}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("ok: ")] \
        == [f"jobs/{p.name}" for p in JOBS]


@pytest.mark.slurm
def test_wait_names_the_failed_task_and_the_chain_ends(slurm_cluster: dict[str, str],
                                                       tmp_path: Path) -> None:
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL,
                  f"model.path={tmp_path / 'no-such-model'}", "--wait")
    assert done.exit_code == 1
    last = done.stderr.strip().splitlines()[-1]
    log = tmp_path / "tiny" / "submitit" / "train"
    assert last.startswith("job train (") and "task 0: FAILED; log " in last, last
    assert str(log) in last and "no-such-model" in Path(last.split("; log ")[1]).read_text()
    # eval waited afterok on a failed training: Slurm ended it instead of leaving it pending
    manifest = load_manifest(tmp_path / "tiny")
    states = job_states([manifest.job("eval").job_id])
    assert states and all(s not in ("PENDING", "RUNNING") for s in states.values()), states


@pytest.mark.slurm
def test_a_failed_training_ends_its_own_evaluation_and_no_other(slurm_cluster: dict[str, str],
                                                                 tmp_path: Path) -> None:
    """aftercorr: evaluation i waits for training i alone; the run whose training failed has
    its evaluation ended by Slurm, the other run is evaluated all the same."""
    missing = tmp_path / "no-such-model"
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL, "training.steps=1",
                  f'sweep={{"model.path"=["tiny", "{missing}"]}}', "--wait")
    assert done.exit_code == 1 and "task 1: FAILED" in done.stderr, done.stderr[-2000:]
    manifest = load_manifest(tmp_path / "tiny")
    good, bad = (Path(run.dir) for run in manifest.runs)
    assert (good / "eval" / "metrics.json").is_file() and not (bad / "eval").exists()
    evaluation = manifest.job("eval").job_id
    states = job_states([evaluation])
    assert states[f"{evaluation}_0"] == "COMPLETED", states
    assert states[f"{evaluation}_1"] not in ("PENDING", "RUNNING", "COMPLETED"), states


@pytest.mark.slurm
def test_cancel_leaves_nothing_running_and_resume_finishes_the_runs(
        slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    marker = f"run.dir={tmp_path}"  # in every job's command line: finds their processes
    args = [str(TINY), marker, *SMALL, *GEMM_SWEEP, "training.steps=4", "training.save_every=1"]
    assert invoke("submit", *args).exit_code == 0
    root = tmp_path / "tiny"
    manifest = load_manifest(root)
    metrics = root / "name-grpo" / "metrics.jsonl"
    wait_until(lambda: metrics.is_file() and metrics.read_text().count("\n") >= 1, 300,
               "a first training step")
    done = invoke("cancel", str(root))
    assert done.exit_code == 0, done.stderr
    assert (root / "handoff" / "STOP").is_file()

    def ended() -> bool:
        states = job_states(manifest.job_ids())
        return bool(states) and all(s in ("CANCELLED", "COMPLETED") for s in states.values())

    wait_until(ended, 120, "every job of the submission CANCELLED (or done)")
    assert "CANCELLED" in job_states([manifest.job("train").job_id]).values()
    wait_until(lambda: subprocess.run(["pgrep", "-f", str(tmp_path)],
                                      capture_output=True).returncode == 1,
               60, "no process of the submission left")

    refused = invoke("submit", *args)  # the directory holds a submission
    assert refused.exit_code == 2 and "--resume" in refused.stderr
    other = invoke("submit", *args, "training.lr=1e-3", "--resume")
    assert other.exit_code == 2 and "config hashes differ" in other.stderr
    again = invoke("submit", *args, "--resume", "--wait")
    assert again.exit_code == 0, again.stderr
    for label in ("name-grpo", "name-hargo"):
        records = [json.loads(line) for line in
                   (root / label / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [1, 2, 3, 4], label
        assert (root / label / "finished.json").is_file()


def test_a_site_template_missing_a_variable_is_one_line(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    templates = REPO / "hargo_hpc" / "slurm" / "templates"
    for path in templates.glob("*.j2"):
        (site / path.name).write_text(path.read_text())
    (site / "train.sh.j2").write_text("#!/bin/bash\n{{ site_partition_account }}\n")
    monkeypatch.setenv("HARGO_TEMPLATE_DIR", str(site))
    done = invoke("submit", str(TINY), f"run.dir={tmp_path / 'runs'}", "--dry-run")
    assert done.exit_code == 2
    assert "'site_partition_account' is undefined" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_split_array_covers_every_task_once() -> None:
    assert sub.split_array(7, 3) == [(0, 3), (3, 3), (6, 1)]
    assert sub.split_array(3, 3) == [(0, 3)] and sub.split_array(1, 1001) == [(0, 1)]


@pytest.mark.slurm
def test_an_array_larger_than_max_array_size_goes_out_in_parts(
        slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submitter, "max_array_size", lambda: 2)  # as if MaxArraySize were 2
    done = invoke("submit", str(TINY), f"run.dir={tmp_path}", *SMALL, "training.steps=1",
                  'sweep={"run.seed"=[0, 1, 2]}', "--wait")
    assert done.exit_code == 0, done.stderr
    manifest = load_manifest(tmp_path / "tiny")
    train, evaluation = manifest.job("train"), manifest.job("eval")
    assert [(first, count) for _, first, count in train.parts] == [(0, 2), (2, 1)]
    # its first part (2 tasks) pairs with training's first, task by task
    assert evaluation.dependency == f"aftercorr:{train.ids()[0]}"
    assert manifest.job("report").dependency == "afterok:" + ":".join(evaluation.ids())
    # task 2 (the second part, a plain job of one task) trained the third run
    for seed in range(3):
        run_dir = tmp_path / "tiny" / f"seed-{seed}"
        assert load_config(run_dir / "config.toml").run.seed == seed
        assert (run_dir / "finished.json").is_file() and (run_dir / "eval").is_dir()
    shown = status(manifest)
    assert [run.state for run in shown.runs] == ["COMPLETED"] * 3
    log = log_path(manifest, train, 2)  # the second part's own id
    assert log.name == f"{train.parts[1][0]}_0_log.out" and log.is_file()
    assert log_path(manifest, train, 1).name == f"{train.parts[0][0]}_1_0_log.out"


@pytest.mark.slurm
def test_the_sft_warm_start_is_its_own_job_and_training_starts_from_its_export(
        slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    args = [str(TINY), f"run.dir={tmp_path}", *SMALL, "training.steps=1",
            "sft.steps=2"]
    done = invoke("submit", *args, "--wait")
    assert done.exit_code == 0, done.stderr
    root = tmp_path / "tiny"
    manifest = load_manifest(root)
    assert [j.name for j in manifest.jobs] == ["sft", "train", "eval", "report"]
    assert manifest.job("train").dependency == f"afterok:{manifest.job('sft').job_id}"
    trained = load_config(root / "config.toml")  # what the training task ran
    assert trained.model.path == str(root / "sft" / "export")
    assert trained.sft.steps == 0  # the warm start is not run twice
    assert load_config(root / "config.sft.toml").sft.steps == 2
    sft = [json.loads(line) for line in (root / "sft" / "metrics.jsonl").read_text()
           .splitlines()]
    assert [r["step"] for r in sft] == [1, 2]
    assert (root / "finished.json").is_file()
    # resubmitted: the finished SFT ends at once (--resume), the finished run too
    again = invoke("submit", *args, "--resume", "--wait")
    assert again.exit_code == 0, again.stderr
    log = log_path(load_manifest(root), load_manifest(root).job("sft"), 0)
    assert "SFT finished already; nothing to do" in log.read_text()


def test_methods_swept_from_one_warm_start_share_one_sft_task(tmp_path: Path) -> None:
    """A sweep over the method only: one SFT task in <root>/sft/, every run trains from its
    export (the method table's runs start from the same checkpoint); a swept learning rate
    changes the SFT, so each run then has its own."""
    plan = sub.plan_submission(tiny(tmp_path, *GEMM_SWEEP, "sft.steps=3"))
    root = tmp_path / "tiny"
    sft = plan.job("sft")
    assert sft.commands == [[PY, "-m", "hargo_hpc", "sft", str(root / "config.sft.toml")]]
    assert {r.config.model.path for r in plan.runs} == {str(root / "sft" / "export")}
    assert all(r.config.sft.steps == 0 for r in plan.runs)
    shared = plan.runs[0].sft_config
    assert shared is not None and shared.run_dir() == root and shared.model.path == "tiny"
    assert shared.sft.steps == 3
    sub.write_run_configs(plan)
    assert load_config(root / "config.sft.toml").run_dir() == root
    apart = sub.plan_submission(tiny(tmp_path / "lr", "sft.steps=3",
                                     'sweep={"training.lr"=[1e-4,1e-3]}'))
    assert apart.job("sft").tasks == 2
    assert [r.config.model.path for r in apart.runs] == [
        str(r.dir / "sft" / "export") for r in apart.runs]


def test_methods_swept_with_seeds_share_one_sft_task_per_seed(tmp_path: Path) -> None:
    """Methods x seeds: the seed changes the SFT (its data order), the method does not, so one
    SFT task per seed, in <root>/sft-seed-<s>/, and every method of a seed trains from it."""
    plan = sub.plan_submission(tiny(tmp_path, "sft.steps=3", 'sweep={"algorithm.name"='
                                    '["grpo","hargo","rloo"],"run.seed"=[0,1]}'))
    root = tmp_path / "tiny"
    assert plan.job("sft").commands == [
        [PY, "-m", "hargo_hpc", "sft", str(root / f"sft-seed-{s}" / "config.sft.toml")]
        for s in (0, 1)]
    for run in plan.runs:
        seed = run.overrides["run.seed"]
        assert run.config.model.path == str(root / f"sft-seed-{seed}" / "sft" / "export")
    sft_runs = [r.sft_config for r in plan.runs if r.sft_config is not None]
    assert [(c.run.seed, c.run_dir()) for c in sft_runs] == [
        (0, root / "sft-seed-0"), (1, root / "sft-seed-1")]
    sub.write_run_configs(plan)
    assert load_config(root / "sft-seed-1" / "config.sft.toml").run.seed == 1


@pytest.mark.parametrize(("overrides", "message"), [
    (["slurm.train.nodes=3"],  # 4 prompts over 3 ranks
     "jobs/tiny.toml: with slurm.train's 3 rank(s) (3 node(s) x 1 task(s)): "
     "rollout.prompts_per_step (4) is not divisible by the 3 ranks"),
    (["slurm.train.nodes=2", "slurm.train.ntasks_per_node=2", "slurm.train.gpus_per_node=2",
      "training.micro_batch_size=8"],  # 16 rows, 4 a rank: not a whole micro-batch of 8
     "jobs/tiny.toml: with slurm.train's 4 rank(s) (2 node(s) x 2 task(s)): rollout."
     "prompts_per_step x rollout.num_generations = 16 rows (4 per rank) is not divisible "
     "by training.micro_batch_size (8)"),
    (["slurm.train.gpus_per_node=2"],
     "jobs/tiny.toml: slurm.train.gpus_per_node (2) must equal slurm.train.ntasks_per_node "
     "(1): each rank trains on one GPU of its node"),
    (['sweep={"rollout.prompts_per_step"=[4,5]}', "slurm.train.nodes=2",
      "slurm.train.gpus_per_node=0", "training.micro_batch_size=4"],
     "jobs/tiny.toml (sweep point prompts_per_step-5): with slurm.train's 2 rank(s)"),
])
def test_the_ranks_are_checked_against_the_batch_and_the_gpus_before_anything_queues(
        tmp_path: Path, overrides: list[str], message: str) -> None:
    config = tiny(tmp_path, *overrides)
    with pytest.raises(ConfigError) as err:
        sub.plan_submission(config, "jobs/tiny.toml")
    assert str(err.value).startswith(message)
    assert not (tmp_path / "tiny").exists()
    fits = tiny(tmp_path, "slurm.train.nodes=2", "slurm.train.ntasks_per_node=2",
                "slurm.train.gpus_per_node=2", "training.micro_batch_size=4")
    assert sub.plan_submission(fits).job("train").resources.nodes == 2
