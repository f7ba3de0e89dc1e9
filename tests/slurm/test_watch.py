"""`hargo status / cancel / logs` (hargo_hpc.slurm.watch): sacct parsing and back-off, the
status table from hand-built manifests, log selection and following, and real jobs on the
local Slurm cluster (status of running and pending tasks, cancel, logs of a finished job)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from waiting import wait_until

from hargo_hpc.cli.watch import cancel, logs, status
from hargo_hpc.config import JobResources
from hargo_hpc.files import write_atomic
from hargo_hpc.handoff import Trainer, schema
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.slurm import render_script, watch
from hargo_hpc.slurm.jobs import SlurmError, sbatch, write_script
from hargo_hpc.slurm.manifest import JobEntry, Manifest, ManifestError, RunEntry, load_manifest

SACCT_TEXT = """\
123_0|RUNNING
123_1|COMPLETED
123_[2-4%2]|PENDING
124|PENDING
125_3|CANCELLED by 0
125_[5,7-8]|CANCELLED by 0

a line without a separator
126|
"""


def squeue() -> str:
    """The cluster's queue, shown when a wait fails (the local cluster is shared by every
    test session)."""
    return "squeue:\n" + subprocess.run(["squeue"], capture_output=True, text=True,
                                        timeout=30).stdout


# ---------------------------------------------------------------- parsing


def test_parse_sacct_expands_pending_ranges_and_trims_states() -> None:
    assert watch.parse_sacct(SACCT_TEXT) == {
        "123_0": "RUNNING", "123_1": "COMPLETED",
        "123_2": "PENDING", "123_3": "PENDING", "123_4": "PENDING",
        "124": "PENDING",
        "125_3": "CANCELLED", "125_5": "CANCELLED", "125_7": "CANCELLED", "125_8": "CANCELLED",
        "126": "UNKNOWN",
    }


def test_parse_sacct_keeps_the_last_row_of_an_id() -> None:
    assert watch.parse_sacct("7_0|PENDING\n7_0|RUNNING\n") == {"7_0": "RUNNING"}


def test_parse_sacct_prefers_a_task_row_to_a_range_naming_it() -> None:
    rows = "9_0|RUNNING\n9_[0-2]|PENDING\n"
    assert watch.parse_sacct(rows) == {"9_0": "RUNNING", "9_1": "PENDING", "9_2": "PENDING"}


@pytest.mark.parametrize(("spec", "indices"), [
    ("0-3", [0, 1, 2, 3]), ("[2-5%2]", [2, 3, 4, 5]), ("1,3,7-9", [1, 3, 7, 8, 9]),
    ("0-12:4", [0, 4, 8, 12]), ("5", [5]),
])
def test_expand_array(spec: str, indices: list[int]) -> None:
    assert watch.expand_array(spec) == indices


@pytest.mark.parametrize("spec", ["", "a-b", "1-", "[1-x]", "1-3:z", "5-3", "0-4:0", "1:2"])
def test_expand_array_refuses_what_is_not_a_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="not an array spec"):
        watch.expand_array(spec)


# ---------------------------------------------------------------- sacct / squeue doubles


def slurm_doubles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, sacct_failures: int,
                  sacct_rows: str, squeue_rows: str = "") -> Path:
    """Put test doubles named `sacct` and `squeue` first on PATH (in `test-double-bin/`).

    The sacct double fails (exit 1, "slurmdbd busy") its first `sacct_failures` calls, then
    prints `sacct_rows`; each double appends its argv to `<name>.calls`. Returns the dir."""
    bin_dir = tmp_path / "test-double-bin"
    bin_dir.mkdir()
    for name, failures, rows in (("sacct", sacct_failures, sacct_rows),
                                 ("squeue", 0, squeue_rows)):
        (bin_dir / f"{name}.rows").write_text(rows)
        script = bin_dir / name
        script.write_text(f"""#!/bin/bash
# TEST DOUBLE of {name} for tests/slurm/test_watch.py
echo "$*" >> {bin_dir}/{name}.calls
n=$(wc -l < {bin_dir}/{name}.calls)
if [ "$n" -le {failures} ]; then echo "slurmdbd busy (test double)" >&2; exit 1; fi
cat {bin_dir}/{name}.rows
""")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def calls(bin_dir: Path, name: str) -> list[str]:
    path = bin_dir / f"{name}.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_job_states_retries_a_failing_sacct_with_doubling_delays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = slurm_doubles(tmp_path, monkeypatch, sacct_failures=2,
                            sacct_rows="123_0|RUNNING\n123_[1-2]|PENDING\n124|COMPLETED\n")
    delays: list[float] = []
    monkeypatch.setattr(watch, "_sleep", delays.append)
    states = watch.job_states(["123", "124", "123"], attempts=5, first_delay_s=0.5)
    assert states == {"123_0": "RUNNING", "123_1": "PENDING", "123_2": "PENDING",
                      "124": "COMPLETED"}
    assert calls(bin_dir, "sacct") == ["-j 123,124 -X -n -P -o JobID,State"] * 3
    assert delays == [0.5, 1.0]
    assert calls(bin_dir, "squeue") == ["-h -r -j 124 -o %i|%T"]  # 124: no row per task


def test_job_states_gives_up_after_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = slurm_doubles(tmp_path, monkeypatch, sacct_failures=99, sacct_rows="")
    delays: list[float] = []
    monkeypatch.setattr(watch, "_sleep", delays.append)
    with pytest.raises(SlurmError, match=r"slurmdbd busy.*gave up after 3 attempts"):
        watch.job_states(["5"], attempts=3, first_delay_s=0.25)
    assert len(calls(bin_dir, "sacct")) == 3
    assert delays == [0.25, 0.5]


def test_jobs_sacct_does_not_list_yet_are_asked_of_squeue_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = slurm_doubles(tmp_path, monkeypatch, sacct_failures=0,
                            sacct_rows="123_0|RUNNING\n",
                            squeue_rows="124_[0-1]|PENDING\n")
    states = watch.job_states(["123", "124", "125"], first_delay_s=0)
    assert states == {"123_0": "RUNNING", "124_0": "PENDING", "124_1": "PENDING",
                      "125": "UNKNOWN"}
    assert calls(bin_dir, "squeue") == ["-h -r -j 124,125 -o %i|%T"]


def test_an_array_sacct_lists_as_one_record_is_taken_from_squeue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmdbd lagging: `9|PENDING` while the controller runs both tasks."""
    bin_dir = slurm_doubles(tmp_path, monkeypatch, sacct_failures=0,
                            sacct_rows="9|PENDING\n8_0|COMPLETED\n",
                            squeue_rows="9_0|RUNNING\n9_1|RUNNING\n")
    states = watch.job_states(["8", "9"])
    job = JobEntry("train", "train.sh", "0-1", 2, job_id="9")
    assert [watch.task_state(job, i, states) for i in (0, 1)] == ["RUNNING", "RUNNING"]
    assert calls(bin_dir, "squeue") == ["-h -r -j 9 -o %i|%T"]  # 8 is listed per task


def test_a_missing_sacct_fails_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    def no_waiting(delay: float) -> None:
        raise AssertionError(f"retried a missing command (sleep {delay})")

    monkeypatch.setattr(watch, "_sleep", no_waiting)
    with pytest.raises(SlurmError, match="sacct not found"):
        watch.job_states(["1"])
    assert watch.job_states([]) == {}  # nothing asked: no call at all


# ---------------------------------------------------------------- status from files


def make_manifest(root: Path, *, executor: str = "slurm", runs: int = 2,
                  handoff: bool = True) -> Manifest:
    """A submission in `root` as `hargo submit` would record it: train (one task per run),
    bench (2 workers), eval not submitted yet."""
    logs_dir = root / "logs"
    entries = []
    for i in range(runs):
        run_dir = root / f"lr{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        config = run_dir / "config.toml"
        config.write_text("[run]\nname = 'w'\n\n[training]\nsteps = 10\nlr = 1e-6\n\n"
                          "[[data.tasks]]\nname = 'plp_qa'\n")
        entries.append(RunEntry(i, f"lr{i}", str(run_dir), str(config), "abc"))
    jobs = [
        JobEntry("train", str(root / "scripts/train.sh"), f"0-{runs - 1}", runs, job_id="123",
                 log=str(logs_dir / "w-train-%A_%a.out")),
        JobEntry("bench", str(root / "scripts/bench.sh"), "0-1", 2, job_id="124",
                 log=str(logs_dir / "%x-%A_%a.out")),
        JobEntry("eval", str(root / "scripts/eval.sh"), "0", 1, after=["train"],
                 dependency="afterok:123", log=str(logs_dir / "w-eval-%A_%a.out")),
    ]
    manifest = Manifest(
        name="w", root=str(root), executor=executor, submitted_at="2025-01-01T00:00:00",
        version="0", git_revision=None, config_hash="abc",
        handoff_dir=str(root / "handoff") if handoff else None, runs=entries, jobs=jobs,
    )
    manifest.save()
    return manifest


def write_metrics(run_dir: str, records: list[dict[str, object]], torn: str = "") -> None:
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (Path(run_dir) / "metrics.jsonl").write_text(lines + torn)


def live_worker(handoff_dir: Path) -> None:
    now = time.time()
    beat = schema.Heartbeat(worker_id="w0", nonce="n0", host="h", pid=1, started_at=now,
                            updated_at=now, state="running")
    write_atomic(handoff_dir / "workers" / "w0.n0.json", json.dumps(schema.dump(beat)))


def columns(text: str) -> list[list[str]]:
    """The table's rows split on runs of two or more spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_status_table_shows_states_progress_and_the_handoff(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w")
    write_metrics(manifest.runs[0].dir, [{"step": 1, "reward": 0.25}, {"step": 2, "reward": 0.5}],
                  torn='{"step": 3, "rew')
    write_metrics(manifest.runs[1].dir, [{"step": 10, "reward": None}])
    (Path(manifest.runs[1].dir) / "finished.json").write_text('{"step": 10}\n')
    trainer = Trainer(manifest.handoff_dir, progress=False)
    trainer.submit(2, [{"id": f"r{i}", "kind": "gemm", "payload": {"completion": "x"}}
                       for i in range(3)])
    Layout(manifest.handoff_dir).claim(2, "r0", 1).write_text("{}")
    live_worker(Path(manifest.handoff_dir))
    states = watch.parse_sacct("123_0|RUNNING\n123_1|COMPLETED\n124_[0-1]|RUNNING\n")

    found = watch.status(manifest, states)
    text = watch.format_status(found)
    rows = columns(text)
    assert ["train", "123", "2", "1 COMPLETED, 1 RUNNING"] in rows, text
    assert ["bench", "124", "2", "2 RUNNING"] in rows, text
    assert ["eval", "-", "1", f"1 {watch.NOT_SUBMITTED}"] in rows, text
    assert ["0", "lr0", "RUNNING", "2/10", "0.5", "no"] in rows, text
    assert ["1", "lr1", "COMPLETED", "10/10", "-", "yes"] in rows, text
    assert (f"handoff {manifest.handoff_dir}: 1 open step, 3 pending benchmarks, "
            "1 live worker") in text
    for run in manifest.runs:  # where each run's trackers write (logging.report_to)
        assert f"run {run.index} metrics: tensorboard --logdir {run.dir}/tensorboard" in text
    assert not found.finished()
    as_dict = found.to_dict()
    assert as_dict["runs"][0]["reward"] == 0.5 and as_dict["handoff"]["pending"] == 3
    assert as_dict["jobs"][0]["counts"] == {"COMPLETED": 1, "RUNNING": 1}


def test_status_of_a_submission_nothing_has_started_of(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w")
    found = watch.status(manifest, {})
    assert [r.step for r in found.runs] == [None, None] and not any(r.finished for r in found.runs)
    text = watch.format_status(found)
    assert ["0", "lr0", "UNKNOWN", "-/10", "-", "no"] in columns(text), text
    assert f"handoff {manifest.handoff_dir}: not created yet" in text


def test_status_of_a_local_submission_reads_only_files(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", executor="local", handoff=False)
    write_metrics(manifest.runs[0].dir, [{"step": 4, "reward": 1.0}])
    found = watch.status(manifest)  # no sacct asked: PATH may not even have one
    assert found.jobs[0].tasks == {0: watch.LOCAL, 1: watch.LOCAL}
    text = watch.format_status(found)
    assert "sacct does not know" in text and "handoff" not in text
    assert ["0", "lr0", "LOCAL", "4/10", "1", "no"] in columns(text), text


def test_a_submission_is_finished_when_every_task_is(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", handoff=False)
    manifest.jobs.pop()  # eval, never submitted
    done = watch.parse_sacct("123_[0-1]|COMPLETED\n124_0|CANCELLED by 0\n124_1|FAILED\n")
    assert watch.status(manifest, done).finished()
    assert not watch.status(manifest, {**done, "124_1": "RUNNING"}).finished()


def test_configured_steps_reads_the_resolved_config(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    assert watch.configured_steps(str(config)) is None
    config.write_text("[training]\nsteps = 7\n")
    assert watch.configured_steps(str(config)) == 7
    config.write_text("[training\n")
    assert watch.configured_steps(str(config)) is None


# ---------------------------------------------------------------- logs


def test_log_files_fill_the_pattern_and_narrow_to_job_and_task(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w")
    logs_dir = tmp_path / "w" / "logs"
    assert watch.log_files(manifest) == [
        logs_dir / "w-train-123_0.out", logs_dir / "w-train-123_1.out",
        logs_dir / "w-bench-124_0.out", logs_dir / "w-bench-124_1.out",
    ]  # eval has no job id yet: no log
    assert watch.log_files(manifest, job="bench") == [logs_dir / "w-bench-124_0.out",
                                                      logs_dir / "w-bench-124_1.out"]
    assert watch.log_files(manifest, task=1) == [logs_dir / "w-train-123_1.out",
                                                 logs_dir / "w-bench-124_1.out"]
    assert watch.log_files(manifest, job="train", task=0) == [logs_dir / "w-train-123_0.out"]
    with pytest.raises(ManifestError, match=r"no job 'stop'.*jobs: train, bench, eval"):
        watch.log_files(manifest, job="stop")
    with pytest.raises(ManifestError, match="'eval' was not submitted"):
        watch.log_files(manifest, job="eval")
    with pytest.raises(ValueError, match=r"no task 2 in job train \(tasks: train 0-1\)"):
        watch.log_files(manifest, job="train", task=2)


def test_log_files_of_a_local_submission_use_each_task_s_own_id(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", executor="local")
    bench = manifest.job("bench")
    bench.job_id, bench.log = "4001,4002", str(tmp_path / "submitit/bench/%j_0_log.out")
    assert watch.log_files(manifest, job="bench") == [
        tmp_path / "submitit/bench/4001_0_log.out", tmp_path / "submitit/bench/4002_0_log.out"]


def test_show_logs_writes_headers_and_names_missing_logs(tmp_path: Path) -> None:
    there, absent = tmp_path / "a.out", tmp_path / "b.out"
    there.write_text("line 1\nno newline")
    out: list[str] = []
    assert watch.show_logs([there, absent], out.append) == 1
    assert "".join(out) == (f"==> {there} <==\nline 1\nno newline\n"
                            f"==> {absent} <== (not written yet: the task has not started)\n")


def test_follow_prints_what_is_appended_until_stopped(tmp_path: Path) -> None:
    first, second = tmp_path / "a.out", tmp_path / "b.out"
    first.write_text("a1\n")
    out: list[str] = []
    appends = iter([lambda: first.open("a").write("a2\n"),
                    lambda: second.write_text("b1\n"),
                    lambda: first.write_text("new\n")])  # truncated and rewritten

    def stop() -> bool:  # the writer's side, one step per poll; stop once all is shown
        step = next(appends, None)
        if step is not None:
            step()
            return False
        return "new\n" in "".join(out)

    assert watch.follow([first, second], out.append, stop=stop, sleep=lambda s: None) == "stopped"
    assert "".join(out) == (f"==> {first} <==\na1\na2\n\n==> {second} <==\nb1\n"
                            f"\n==> {first} <==\nnew\n")


def test_follow_asks_done_at_most_every_few_seconds_and_reads_once_more(tmp_path: Path) -> None:
    log = tmp_path / "a.out"
    log.write_text("")
    now = [0.0]
    asked: list[float] = []

    def done() -> bool:
        asked.append(now[0])
        log.open("a").write(f"t={now[0]:.0f}\n")  # written just as the job ends
        return now[0] >= 10

    def sleep(seconds: float) -> None:
        now[0] += seconds

    out: list[str] = []
    ended = watch.follow([log], out.append, done=done, poll_s=1.0, check_every_s=5.0,
                         clock=lambda: now[0], sleep=sleep)
    assert ended == "finished"
    assert asked == [0.0, 5.0, 10.0]
    assert "".join(out).endswith("t=0\nt=5\nt=10\n")


# ---------------------------------------------------------------- the commands


def test_status_command_json_and_table(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", executor="local")
    result = CliRunner().invoke(status, [manifest.root, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["jobs"][0]["tasks"] == {"0": "LOCAL", "1": "LOCAL"}
    result = CliRunner().invoke(status, [manifest.root])
    assert result.exit_code == 0 and result.output.startswith("submission w"), result.output


def test_commands_refuse_a_directory_without_a_manifest(tmp_path: Path) -> None:
    for command in (status, cancel, logs):
        result = CliRunner().invoke(command, [str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert result.stderr.count("\n") == 1 and "run.json: no such file" in result.stderr


def test_status_command_without_sacct_is_one_line(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = make_manifest(tmp_path / "w")
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(status, [manifest.root])
    assert result.exit_code == 2
    assert result.stderr == "error: sacct not found: is this a Slurm login node?\n"


def test_logs_command_errors_and_output(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", executor="local")
    runner = CliRunner()
    for args, message in ((["--job", "nope"], "no job 'nope'"),
                          (["--job", "bench", "--task", "7"], "no task 7 in job bench"),
                          (["--task", "-1"], "-1 is not in the range")):
        result = runner.invoke(logs, [manifest.root, *args])
        assert result.exit_code == 2 and message in result.stderr, (args, result.output)
    result = runner.invoke(logs, [manifest.root])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "no log file exists yet for 4 task(s)" in (
        result.stderr)
    log = watch.log_files(manifest, job="train", task=1)[0]
    log.parent.mkdir(parents=True)
    log.write_text("step 1\n")
    result = runner.invoke(logs, [manifest.root, "--job", "train"])
    assert result.exit_code == 0, result.output
    assert f"==> {log} <==\nstep 1\n" in result.output
    assert "w-train-123_0.out <== (not written yet" in result.output


def test_cancel_command_of_a_local_submission_writes_the_sentinel_only(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path / "w", executor="local")
    for _ in range(2):  # idempotent
        result = CliRunner().invoke(cancel, [manifest.root])
        assert result.exit_code == 0, result.output
        assert "no Slurm jobs to cancel" in result.output
    stop = json.loads((Path(manifest.handoff_dir) / "STOP").read_text())
    assert stop["kind"] == "stop" and stop["reason"] == watch.STOP_REASON


def test_cancel_writes_the_sentinel_before_one_scancel_of_every_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = make_manifest(tmp_path / "w")
    stop = Path(manifest.handoff_dir) / "STOP"
    bin_dir = tmp_path / "test-double-bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f"""#!/bin/bash
# TEST DOUBLE of scancel for tests/slurm/test_watch.py: records argv and whether STOP exists
echo "$* stop=$(test -e {stop} && echo yes || echo no)" >> {bin_dir}/scancel.calls
""")
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert watch.cancel(manifest) == ["123", "124"]  # eval was never submitted
    assert calls(bin_dir, "scancel") == ["123 124 stop=yes"]
    assert json.loads(stop.read_text())["reason"] == watch.STOP_REASON


# ---------------------------------------------------------------- the real cluster


@dataclass
class Cleanup:
    """What a cluster test leaves to its teardown: jobs to scancel, then files whose
    existence ends the jobs' wait loops, should any process of theirs have survived."""

    job_ids: list[str] = field(default_factory=list)
    go_files: list[Path] = field(default_factory=list)


@pytest.fixture
def cleanup() -> Iterator[Cleanup]:
    todo = Cleanup()
    yield todo
    if todo.job_ids:
        subprocess.run(["scancel", *todo.job_ids], capture_output=True, timeout=60)
    for path in todo.go_files:
        path.touch()


def submit(tmp_path: Path, name: str, command: str, array: str, extra: list[str] | None = None
           ) -> str:
    # small and short, so that backfill starts them beside other jobs of the shared cluster;
    # the time-limit signal (its lead at the minimum) far from the waits below: a lead of 120 s
    # on a 2 min limit sent SIGUSR1 to the loops as they started, under load before the test
    # saw them RUNNING
    resources = JobResources(partition="cpu", cpus_per_task=1, mem="256M", time="00:05:00",
                             signal_lead_s=30, extra=extra or [])
    (tmp_path / "logs").mkdir(exist_ok=True)  # Slurm does not create the output's directory
    script = render_script("base.sh.j2", job_name=f"w-{name}", resources=resources,
                           command=command, log_dir=tmp_path / "logs", array=array)
    return sbatch(write_script(script, tmp_path / "scripts" / f"{name}.sh"))


def cluster_manifest(root: Path, jobs: list[JobEntry], runs: int) -> Manifest:
    entries = []
    for i in range(runs):
        run_dir = root / f"run{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        entries.append(RunEntry(i, f"run{i}", str(run_dir), str(root / "config.toml"), "h"))
    manifest = Manifest(name="w", root=str(root), executor="slurm", submitted_at="now",
                        version="0", git_revision=None, config_hash="h",
                        handoff_dir=str(root / "handoff"), runs=entries, jobs=jobs)
    manifest.save()
    return manifest


def pgrep(marker: str) -> list[str]:
    done = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, timeout=30)
    return done.stdout.split()


def settled(manifest: Manifest) -> watch.SubmissionStatus | None:
    """The submission's status once every task is in a final state, else None."""
    found = watch.status(manifest)
    return found if found.finished() else None


@pytest.mark.slurm
def test_status_then_cancel_of_real_jobs(slurm_cluster: dict[str, str], tmp_path: Path,
                                         cleanup: Cleanup) -> None:
    marker = f"hargo-watch-{uuid.uuid4().hex[:12]}"  # in the command line of every loop
    go = tmp_path / "go"
    cleanup.go_files.append(go)
    (tmp_path / "config.toml").write_text("[training]\nsteps = 5\n")
    wait = f"bash -c 'while [ ! -e \"$1\" ]; do sleep 0.2; done; echo done' {marker} {go}"
    train = submit(tmp_path, "train", wait, "0-1")
    cleanup.job_ids.append(train)
    bench = submit(tmp_path, "bench", wait, "0-0", extra=[f"--dependency=afterok:{train}"])
    cleanup.job_ids.append(bench)
    log = str(tmp_path / "logs" / "%x-%A_%a.out")
    manifest = cluster_manifest(tmp_path, [
        JobEntry("train", "train.sh", "0-1", 2, job_id=train, log=log),
        JobEntry("bench", "bench.sh", "0-0", 1, after=["train"], dependency=f"afterok:{train}",
                 job_id=bench, log=log),
    ], runs=2)
    (tmp_path / "handoff").mkdir()
    write_metrics(manifest.runs[0].dir, [{"step": 1, "reward": 0.75}])
    wait_until(lambda: len(pgrep(marker)) >= 2, 90, "both train tasks running their loop",
               context=squeue)
    wait_until(lambda: watch.status(manifest).jobs[0].counts() == {"RUNNING": 2}, 30,
               "sacct reporting both train tasks RUNNING", context=squeue)
    result = CliRunner().invoke(status, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = columns(result.output)
    assert ["train", train, "2", "2 RUNNING"] in rows, result.output
    assert ["bench", bench, "1", "1 PENDING"] in rows, result.output
    assert ["0", "run0", "RUNNING", "1/5", "0.75", "no"] in rows, result.output
    assert ["1", "run1", "RUNNING", "-/5", "-", "no"] in rows, result.output

    result = CliRunner().invoke(cancel, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"scancel sent to 2 job(s): train {train}, bench {bench}" in result.output
    stop = json.loads((tmp_path / "handoff" / "STOP").read_text())
    assert stop["reason"] == watch.STOP_REASON
    final = wait_until(lambda: settled(manifest), 60,
                       "every task in a final state after cancel", context=squeue)
    assert [job.tasks for job in final.jobs] == [
        {0: "CANCELLED", 1: "CANCELLED"}, {0: "CANCELLED"}], final
    wait_until(lambda: not pgrep(marker), 30, f"no process of the jobs left ({marker})",
               context=squeue)
    for i in range(2):  # killed inside the loop: it never got to its echo
        out = tmp_path / "logs" / f"w-train-{train}_{i}.out"
        assert "done" not in (out.read_text() if out.exists() else "")
    again = CliRunner().invoke(cancel, [str(tmp_path)])  # a finished submission: fine
    assert again.exit_code == 0, again.output


@pytest.mark.slurm
def test_logs_of_a_finished_real_job(slurm_cluster: dict[str, str], tmp_path: Path,
                                     cleanup: Cleanup) -> None:
    marker = uuid.uuid4().hex
    job_id = submit(tmp_path, "train", f'echo "task $SLURM_ARRAY_TASK_ID {marker}"', "0-1")
    cleanup.job_ids.append(job_id)
    log = str(tmp_path / "logs" / "w-train-%A_%a.out")
    cluster_manifest(tmp_path, [JobEntry("train", "train.sh", "0-1", 2, job_id=job_id,
                                         log=log)], runs=2)
    wait_until(lambda: watch.tasks_finished(load_manifest(tmp_path)), 90,
               "the train job finished", context=squeue)
    runner = CliRunner()
    result = runner.invoke(logs, [str(tmp_path)])
    assert result.exit_code == 0, result.output
    for i in range(2):
        path = tmp_path / "logs" / f"w-train-{job_id}_{i}.out"
        assert f"==> {path} <==\ntask {i} {marker}\n" in result.output
    result = runner.invoke(logs, [str(tmp_path), "--task", "1", "-f"])  # ends: job finished
    assert result.exit_code == 0, result.output
    assert f"task 1 {marker}" in result.output and f"task 0 {marker}" not in result.output
    assert "every task of these logs has ended" in result.stderr


def _progress(steps: list[tuple[int | None, int | None]]) -> watch.SubmissionStatus:
    runs = [watch.RunProgress(index=i, label=f"name-m{i}", dir="", state="RUNNING",
                              step=step, steps=total) for i, (step, total) in enumerate(steps)]
    jobs = [watch.JobStatus("train", "7", {0: "RUNNING", 1: "PENDING", 2: "PENDING"})]
    return watch.SubmissionStatus("x", "/r", "slurm", jobs, runs,
                                  watch.HandoffProgress("/h", True, pending=3))


def test_progress_line_names_a_few_runs_one_by_one() -> None:
    line = watch.progress_line(_progress([(2, 10), (None, None)]))
    assert line == ("train 2 PENDING, 1 RUNNING; name-m0 step 2/10; name-m1 step 0/?; "
                    "3 pending benchmarks")


def test_progress_line_counts_a_sweep_by_step_highest_first() -> None:
    steps = [(10, 10)] * 2 + [(4, 10)] + [(0, 10)] * 25 + [(None, None)]
    line = watch.progress_line(_progress(steps), listed=4)
    assert line == ("train 2 PENDING, 1 RUNNING; 29 runs: 2 at 10/10, 1 at 4/10, 25 at 0/10, "
                    "1 at 0/?; 3 pending benchmarks")
