"""Rewards of a step: text tasks in process (batched per task, back in order), GEMM through a
real handoff directory from a real `hargo worker` process running the real bench, local
workers that die (a one-line error, no hang) and that are stopped (no process left).

Everything here is the project's own code: the shipped task samples, the shipped GEMM corpus,
`hargo worker` started by `LocalWorkers` with the trainer's Python.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.status import live_workers
from hargo_hpc.tasks.base import Example
from hargo_hpc.tasks.corpus import load_corpus
from hargo_hpc.tasks.data import load_examples
from hargo_hpc.tasks.gemm import Gemm
from hargo_hpc.tasks.registry import get_task
from hargo_hpc.tasks.settings import RewardSettings
from hargo_hpc.train.rollout.local_workers import LocalWorkers, WorkerDied
from hargo_hpc.train.rollout.rewards import RewardError, RewardRouter, request_id

# the reward settings the expectations below are computed with (by hand)
REWARDS = RewardSettings(data_race_parse="lenient", unparsable_reward=-0.5, qa_metric="f1",
                         brevity_chars=40, brevity_weight=0.2)  # fmt: skip
SIG = "void gemm(int M, int N, int K, const double *A, const double *B, double *C)"
SYNTAX_ERROR = f"```c\n{SIG} {{\n    int x = ;\n}}\n```"
PROSE = "I would rather not write any code today."


def by_id(examples: Sequence[Example]) -> dict[str, Example]:
    return {example.id: example for example in examples}


# ---------------------------------------------------------------- text tasks


def test_text_tasks_are_batched_per_task_and_put_back_in_order(monkeypatch) -> None:
    race, qa = get_task("data_race_c", REWARDS), get_task("mlperf_qa", REWARDS)
    races, answers = by_id(load_examples(race, "")), by_id(load_examples(qa, ""))
    yes = [e.id for e in races.values() if e.label == "yes"][:2]
    no = next(e.id for e in races.values() if e.label == "no")
    assert [answers[f"mlperf_qa:{i}"].output for i in range(3)] == [
        "PyTorch", "Example Lab South", "Fictional Cloud Co"]
    batch = [
        (races[yes[0]], "Yes, there is a data race on `sum`."),  # correct: 1
        (answers["mlperf_qa:0"], "PyTorch"),  # F1 1, short: 1
        (races[no], "yes"),  # wrong: 0
        # 2 of 3 tokens both ways: F1 2/3; 1 of 2 bigrams: 1/2; their mean 7/12
        (answers["mlperf_qa:1"], "Example Lab North"),
        (races[yes[1]], "I cannot tell."),  # no yes/no word: unparsable -0.5
        # 7 tokens after 'the' goes, 3 of them the reference's 3: P 3/7, R 1, F1 0.6; 2 of its
        # 6 bigrams the reference's 2: F1 0.5; mean 0.55; 46 characters, 6 over the limit of
        # 40: brevity 1 - 0.2 * 6/40 = 0.97 (the questions share no token with the references)
        (answers["mlperf_qa:2"], "The system was submitted by Fictional Cloud Co"),
    ]
    expected = [1.0, 1.0, 0.0, 7 / 12, -0.5, 0.55 * 0.97]
    calls: list[tuple[str, list[str]]] = []
    for task in (race, qa):
        original = task.reward

        def spy(examples, completions, original=original, name=task.name):
            calls.append((name, [e.id for e in examples]))
            return original(examples, completions)

        monkeypatch.setattr(task, "reward", spy)
    router = RewardRouter({"data_race_c": race, "mlperf_qa": qa}, handoff_dir=None,
                          log=pytest.fail, progress=False)  # fmt: skip
    result = router.score(7, [e for e, _ in batch], [c for _, c in batch])
    assert result.rewards == pytest.approx(expected, abs=1e-12)
    assert result.scored == [True] * 6 and result.records == [None] * 6
    assert result.wait_s == 0.0 and result.unscored == 0 and result.statuses() == {}
    assert sorted(calls) == [  # each task once, with its share in batch order
        ("data_race_c", [yes[0], no, yes[1]]),
        ("mlperf_qa", ["mlperf_qa:0", "mlperf_qa:1", "mlperf_qa:2"]),
    ]


def test_bad_batches_are_one_line_errors(tmp_path: Path) -> None:
    race = get_task("data_race_c", REWARDS)
    example = load_examples(race, "", max_items=1)[0]
    router = RewardRouter({"data_race_c": race}, handoff_dir=None, progress=False)
    with pytest.raises(ValueError, match=r"2 completions for 1 examples"):
        router.score(0, [example], ["yes", "no"])
    stray = Example(task="plp_qa", id="plp_qa:0", instruction="q", input="", output="a")
    with pytest.raises(ValueError, match=r"plp_qa:0: task 'plp_qa' is not one of the router's "
                       r"tasks \(data_race_c\)"):  # fmt: skip
        router.score(0, [stray], ["a"])
    gemm = Gemm()
    problem = gemm.from_record({"name": "dgemm-64", "M": 64, "N": 64, "K": 64}, 0)
    remote = RewardRouter({"gemm": gemm}, handoff_dir=None, progress=False)
    with pytest.raises(ValueError, match="gemm is rewarded through the handoff, but the reward "
                       "router has no handoff directory"):  # fmt: skip
        remote.score(0, [problem], [PROSE])


def test_a_step_that_holds_another_batch_is_refused(tmp_path: Path) -> None:
    """A resumed run whose completions differ from the stored batch's must not get the stored
    records as its rewards (no worker needed: the refusal comes before any wait)."""
    gemm = Gemm()
    problem = gemm.from_record({"name": "dgemm-64", "M": 64, "N": 64, "K": 64}, 0)
    router = RewardRouter({"gemm": gemm}, handoff_dir=tmp_path / "handoff", progress=False,
                          poll_timeout_s=0.5)  # fmt: skip
    first = router.score(0, [problem], [PROSE])  # nobody benchmarks it: the timeout's record
    assert first.scored == [False] and first.records[0]["status"] == "infra_error"
    assert first.records[0]["handoff"]["timed_out"]
    with pytest.raises(RewardError, match=r"already holds a different batch for this step "
                       r"\(request r00000 differs\)"):  # fmt: skip
        router.score(0, [problem], [PROSE + " Really."])


# ---------------------------------------------------------------- GEMM through a real worker


def small_bench(tmp_path: Path) -> BenchSettings:
    # at 64³ OpenBLAS's per-call overhead leaves it near an honest i-k-j kernel (best call
    # 4.1-4.7 GFLOPS against 5.0-5.5: 2 of 40 runs flagged at the default margin), so no
    # margin test here, as in tests/bench/conftest.py; the production sizes are >= 128
    return BenchSettings(size=64, check_size=37, repetitions=2, timed_budget_ms=0, warmup=0,
                         threads=1, reference_margin=100.0,
                         cache_dir=str(tmp_path / "bench-cache"))  # fmt: skip


def fast_handoff(**changes: object) -> HandoffSettings:
    return HandoffSettings(**{"lease_s": 10.0, "poll_interval_s": 0.05, "step_timeout_s": 120.0,
                              **changes})  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_gemm_step_through_a_real_worker_and_the_real_bench(tmp_path: Path) -> None:
    gemm = Gemm()
    problem = gemm.from_record({"name": "dgemm-64", "M": 64, "N": 64, "K": 64}, 0)
    # The bench refuses a request whose problem it cannot run as `infra_error` ("bad request":
    # the trainer's fault, not the policy's). The task never builds such a problem from its
    # data (it validates the sizes), so this one example is written by hand.
    refused = Example(task="gemm", id="gemm:refused", instruction=problem.instruction,
                      input="", output="",
                      meta={"problem": {"name": "dgemm-0", "M": 0, "N": 64, "K": 64}})
    kernel = next(k for k in load_corpus() if k.name == "plain_ikj")
    completions = [kernel.completion, SYNTAX_ERROR, kernel.completion]
    lines: list[str] = []
    workers = LocalWorkers(tmp_path / "handoff", 1, bench=small_bench(tmp_path),
                           handoff=fast_handoff(), log=lines.append)  # fmt: skip
    router = RewardRouter({"gemm": gemm}, handoff_dir=tmp_path / "handoff", log=lines.append,
                          progress=False, handoff_settings=fast_handoff(),
                          liveness=workers.check)  # fmt: skip
    with workers:
        pids = workers.pids
        result = router.score(3, [problem, problem, refused], completions, stage=0,
                              forbidden=[[], None, None])  # fmt: skip
    assert len(pids) == 1 and not psutil.pid_exists(pids[0])
    # a restarted trainer (a new router, no worker left) scores the same batch again: the
    # stored records come back, nothing is run again
    restarted = RewardRouter({"gemm": gemm}, handoff_dir=tmp_path / "handoff", log=lines.append,
                             progress=False, handoff_settings=fast_handoff(),
                             poll_timeout_s=30)  # fmt: skip
    again = restarted.score(3, [problem, problem, refused], completions, stage=0,
                            forbidden=[[], None, None])  # fmt: skip
    ok, broken, infra = result.records
    assert ok["status"] == "ok" and result.rewards[0] > 0 and result.rewards[0] == ok["reward"]
    assert ok["size"] == [64, 64, 64] and ok["check_size"] == [37, 37, 37]
    assert broken["status"] == "compile_error" and result.rewards[1] == -40.0
    assert infra["status"] == "infra_error" and infra["reason"].startswith("bad request: ")
    assert result.rewards[2] == 0.0 and result.scored == [True, True, False]
    assert result.unscored == 1
    assert result.statuses() == {"ok": 1, "compile_error": 1, "infra_error": 1}
    assert [r["request_id"] for r in result.records] == [request_id(i) for i in range(3)]
    assert [r["handoff"]["step"] for r in result.records] == [3, 3, 3]
    assert not any(r["handoff"]["timed_out"] for r in result.records)
    assert 0 < result.wait_s < 120
    assert len(lines) == 3 and "started 1 local bench worker" in lines[0]
    assert lines[1].startswith("step 3: 1 of 3 bench results not scored (infra_error)")
    assert lines[2] == lines[1]  # the restarted router's
    assert again.wait_s < 10  # not the 30 s timeout: every result was there
    assert again.rewards == result.rewards and again.scored == result.scored
    assert [r["handoff"]["written_at"] for r in again.records] == [
        r["handoff"]["written_at"] for r in result.records]


# ---------------------------------------------------------------- workers that die


@pytest.mark.timeout(60)
def test_a_worker_that_dies_at_start_is_a_one_line_error(tmp_path: Path) -> None:
    gemm = Gemm()
    problem = gemm.from_record({"name": "dgemm-64", "M": 64, "N": 64, "K": 64}, 0)
    missing = tmp_path / "missing.toml"
    workers = LocalWorkers(tmp_path / "handoff", 1, args=["--config", str(missing)],
                           handoff=fast_handoff())  # fmt: skip
    router = RewardRouter({"gemm": gemm}, handoff_dir=tmp_path / "handoff", poll_timeout_s=40,
                          handoff_settings=fast_handoff(), log=lambda _: None, progress=False,
                          liveness=workers.check)  # fmt: skip
    started = time.monotonic()
    with workers, pytest.raises(WorkerDied) as caught:
        router.score(0, [problem], [PROSE])
    message = str(caught.value)
    assert time.monotonic() - started < 20  # the error, not the 40 s step timeout
    assert "\n" not in message
    assert message.startswith("local bench worker 0 (pid ")
    assert "with status 2: error: " in message and f"{missing}: no such experiment file" in message
    assert str(tmp_path / "handoff" / "logs" / "worker-0.log") in message


@pytest.mark.timeout(60)
def test_a_worker_that_exits_mid_step_ends_the_wait(tmp_path: Path) -> None:
    """`--max-requests 1`: the worker answers one of the two requests and leaves; the wait for
    the other ends with the error at once, not at the step timeout."""
    gemm = Gemm()
    problem = gemm.from_record({"name": "dgemm-64", "M": 64, "N": 64, "K": 64}, 0)
    workers = LocalWorkers(tmp_path / "handoff", 1, args=["--max-requests", "1"],
                           bench=small_bench(tmp_path), handoff=fast_handoff())  # fmt: skip
    router = RewardRouter({"gemm": gemm}, handoff_dir=tmp_path / "handoff", poll_timeout_s=40,
                          handoff_settings=fast_handoff(), log=lambda _: None, progress=False,
                          liveness=workers.check)  # fmt: skip
    started = time.monotonic()
    with workers, pytest.raises(WorkerDied) as caught:
        router.score(5, [problem, problem], [PROSE, PROSE])
    message = str(caught.value)
    assert time.monotonic() - started < 20
    assert "\n" not in message
    assert "exited while step 5 waited for 1 of 2 bench results with status 0" in message
    assert "worker stopped: max requests" in message


# ---------------------------------------------------------------- nothing left behind


def worker_group_members(pgids: Sequence[int]) -> list[int]:
    """Pids of live processes in any of these process groups (zombies too)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in pgids:
                found.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


@pytest.mark.timeout(60)
def test_no_process_is_left_after_exit_even_when_the_body_raises(tmp_path: Path) -> None:
    workers = LocalWorkers(tmp_path / "handoff", 2, handoff=fast_handoff())
    with pytest.raises(KeyError, match="the body failed"), workers:
        pids = workers.pids
        assert len(pids) == 2 and workers.alive() == 2
        assert {p.pid for p in psutil.Process().children()} >= set(pids)
        assert all(os.getpgid(pid) == pid for pid in pids)  # each in its own process group
        raise KeyError("the body failed")
    assert not [pid for pid in pids if psutil.pid_exists(pid)]
    assert not set(pids) & {p.pid for p in psutil.Process().children(recursive=True)}
    assert worker_group_members(pids) == []
    assert (tmp_path / "handoff" / "STOP").is_file()  # stopped by the sentinel
    workers.stop()  # a second stop is a no-op


@pytest.mark.timeout(60)
def test_local_workers_refuse_a_handoff_that_live_workers_serve(tmp_path: Path) -> None:
    """Someone else's live workers (a submission's bench array, evaluated by hand) on the
    handoff: starting local ones is refused, and their stop sentinel is never written."""
    handoff = tmp_path / "handoff"
    with LocalWorkers(handoff, 1, handoff=fast_handoff()) as array:
        wait_until(lambda: live_workers(handoff), 30, "the first worker's heartbeat")
        second = LocalWorkers(handoff, 1, handoff=fast_handoff())
        with pytest.raises(HandoffError, match=r"served by 1 live worker\(s\) already .*"
                           r"--local-workers 0") as refused:
            second.start()
        assert "\n" not in str(refused.value) and second.pids == []
        assert not (handoff / "STOP").exists() and array.alive() == 1
    assert (handoff / "STOP").is_file()  # the first one's own stop, at its end


@pytest.mark.timeout(60)
def test_no_local_workers_says_what_the_requests_wait_for(tmp_path: Path) -> None:
    """0 local workers (an evaluation of a submission's run by hand): one line says the
    requests wait for a worker, unless live workers serve the handoff already."""
    handoff = tmp_path / "handoff"
    said: list[str] = []
    with LocalWorkers(handoff, 0, log=said.append) as none:
        assert none.pids == []
    assert said == [f"no bench worker serves {handoff} yet and none is started here (0 local "
                    "workers): its requests wait for one (a submission's bench array, or "
                    f"`hargo worker --handoff {handoff}`)"]
    with LocalWorkers(handoff, 1, handoff=fast_handoff()):
        wait_until(lambda: live_workers(handoff), 30, "the worker's heartbeat")
        said.clear()
        with LocalWorkers(handoff, 0, log=said.append):
            pass
        assert said == []


@pytest.mark.timeout(60)
def test_a_worker_that_ignores_the_sentinel_and_sigterm_is_killed(tmp_path: Path,
                                                                  caplog) -> None:  # fmt: skip
    """A stopped (SIGSTOP) worker sees neither the sentinel nor SIGTERM: SIGKILL ends it."""
    workers = LocalWorkers(tmp_path / "handoff", 1, stop_timeout_s=0.5, term_timeout_s=0.5)
    with caplog.at_level(logging.WARNING, logger="hargo_hpc.train.rollout.local_workers"), workers:
        (pid,) = workers.pids
        os.kill(pid, signal.SIGSTOP)
    assert not psutil.pid_exists(pid)
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "hargo_hpc.train.rollout.local_workers"]
    assert warnings == ["local workers: 1 still running; sending SIGTERM",
                        "local workers: 1 still running; sending SIGKILL"]
    assert worker_group_members([pid]) == []


STARTER = """\
import sys
from hargo_hpc.train.rollout.local_workers import LocalWorkers
workers = LocalWorkers(sys.argv[1], 1)
workers.start()
print(workers.pids[0], flush=True)
sys.stdin.read()  # until the test kills this process
"""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # not reaped by init
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(60)
def test_a_trainer_killed_with_sigkill_leaves_no_worker(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: the kernel sends the worker SIGTERM when its trainer dies."""
    trainer = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path / "handoff")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(trainer.stdout.readline())
        assert psutil.Process(pid).ppid() == trainer.pid
        beats = tmp_path / "handoff" / "workers"
        wait_until(lambda: any(beats.glob("*.json")), 30,
                   "the worker's first heartbeat", poll=0.02)
        assert not gone(pid)
    finally:
        trainer.kill()
        trainer.wait()
    wait_until(lambda: gone(pid), 30, "the worker gone with its trainer", poll=0.05)
    log = (tmp_path / "handoff" / "logs" / "worker-0.log").read_text()
    assert "worker stopped: signal SIGTERM" in log
