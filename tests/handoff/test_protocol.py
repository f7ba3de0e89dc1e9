"""The protocol end to end, with in-process workers and workload doubles."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_until

from hargo_hpc.handoff import HandoffError, HandoffSettings, Trainer, Worker
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.exits import ExitReason
from hargo_hpc.handoff.layout import Layout

from .conftest import make_requests, running_workers
from .doubles import CountingWorkloadDouble, FlakyWorkloadDouble, noop_workload_double


def test_every_request_gets_one_result(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    requests = trainer.submit(3, make_requests(300))
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, fast, count=3, threads=2):
        seen = [r["request_id"] for r in trainer.poll(3)]
    assert sorted(seen) == sorted(r["id"] for r in requests)
    assert all(n == 1 for n in workload.calls.values()) and len(workload.calls) == 300
    assert Layout(root).closed(3).exists(), "a complete step is closed"


def test_records_keep_the_bench_fields_and_say_where_they_came_from(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, [{"id": "a", "kind": "double",
                        "payload": {"completion": "abc", "problem": "gemm", "stage": 1}}])

    def rich_record(request: dict) -> dict:
        assert request == {"id": "a", "kind": "double",
                           "payload": {"completion": "abc", "problem": "gemm", "stage": 1}}
        return {"request_id": "a", "status": "ok", "reward": 3.5, "gflops": 12.0}

    with running_workers(root, rich_record, fast, count=1):
        record = trainer.collect(0)["a"]
    assert record["gflops"] == 12.0 and record["reward"] == 3.5 and record["scored"]
    assert record["handoff"]["attempt"] == 1 and not record["handoff"]["timed_out"]


@pytest.mark.parametrize("mode", ["raise", "infra_error"])
def test_infra_failures_are_retried_then_given_up(
    root: Path, fast: HandoffSettings, mode: str
) -> None:
    trainer = Trainer(root, fast, progress=False)  # max_attempts = 3
    trainer.submit(0, make_requests(4))
    recovers = FlakyWorkloadDouble(failures=2, mode=mode)
    with running_workers(root, recovers, fast, count=2):
        results = trainer.collect(0)
    assert all(r["status"] == "ok" and r["handoff"]["attempt"] == 3 for r in results.values())

    trainer.submit(1, make_requests(3))
    hopeless = FlakyWorkloadDouble(failures=99, mode=mode)
    with running_workers(root, hopeless, fast, count=2):
        results = trainer.collect(1)
    assert all(r["status"] == "infra_error" and not r["scored"] for r in results.values())
    assert all(n == 3 for n in hopeless.calls.values())
    expected = "failure 3 of 3" if mode == "raise" else "compiler not found"  # the bench's own
    assert expected in results["r00000"]["error"]


def test_bad_records_from_the_workload_count_as_infra_failures(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = Trainer(root, fast.model_copy(update={"max_attempts": 1}), progress=False)
    trainer.submit(0, make_requests(2))

    def wrong(request: dict) -> dict:
        return {"request_id": "someone-else", "status": "ok", "reward": 1}

    with running_workers(root, wrong, fast.model_copy(update={"max_attempts": 1}), count=1):
        results = trainer.collect(0)
    assert {r["status"] for r in results.values()} == {"infra_error"}
    assert "record of 'someone-else'" in results["r00000"]["error"]


def test_expired_attempts_count_and_give_up(root: Path, fast: HandoffSettings) -> None:
    """Workers killed on the same request every time: after max_attempts it is infra_error."""
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(1))
    layout = Layout(root)
    for attempt in (1, 2, 3):  # three dead holders, each taken over in turn
        layout.claim(0, "r00000", attempt).write_text("{}")
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, fast, count=1):
        record = trainer.collect(0)["r00000"]
    assert record["status"] == "infra_error" and "gave up after 3" in record["error"]
    assert workload.calls == {}


def test_late_result_of_a_slow_worker_is_ignored_and_counted(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(1))
    layout = Layout(root)
    slow = Worker(root, CountingWorkloadDouble(delay_s=2.0), settings=fast,
                  handle_signals=False, max_idle_s=30)
    slow.renew = lambda path: None  # type: ignore[method-assign]  # a stalled node
    thread = threading.Thread(target=slow.run, daemon=True)
    thread.start()
    wait_until(lambda: scan_claims(layout.claims(0)), 10, "the slow worker's claim", poll=0.02)
    with running_workers(root, noop_workload_double, fast, count=1) as (fast_worker,):
        record = trainer.collect(0)["r00000"]
        assert record["handoff"]["attempt"] == 2
        assert fast_worker.counts["reclaims"] == 1
        wait_until(lambda: slow.counts["duplicates"], 10,
                   "the slow worker's late result (it finishes after all)", poll=0.05)
    trainer.stop()
    thread.join(10)
    assert slow.counts["duplicates"] == 1
    dups = os.listdir(layout.duplicates(0))
    assert len(dups) == 1 and dups[0].startswith("r00000.")
    assert trainer.collect(0)["r00000"]["handoff"]["attempt"] == 2  # still the first result


def test_stragglers_time_out_as_infra_error_and_stay_so(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(3))
    layout = Layout(root)
    # r00001 is answered; nobody works on the others
    Worker(root, noop_workload_double, settings=fast).answers.write_result(
        _held(layout, "r00001"), {"request_id": "r00001", "status": "ok", "reward": 1.0})
    started = time.monotonic()
    results = trainer.collect(0, timeout=0.3)
    assert time.monotonic() - started < 3
    assert results["r00001"]["status"] == "ok"
    for rid in ("r00000", "r00002"):
        assert results[rid]["status"] == "infra_error" and not results[rid]["scored"]
        assert results[rid]["handoff"]["timed_out"]
        assert "straggler" in results[rid]["error"]
    again = Trainer(root, fast, progress=False).collect(0, timeout=0.1)
    assert {k: v["status"] for k, v in again.items()} == {k: v["status"]
                                                          for k, v in results.items()}
    # a worker that finishes a straggler later only makes a counted duplicate
    worker = Worker(root, noop_workload_double, settings=fast)
    worker.answers.write_result(_held(layout, "r00000"), {"request_id": "r00000",
                                                          "status": "ok", "reward": 1.0})
    assert worker.counts["duplicates"] == 1


def _held(layout: Layout, rid: str):
    from hargo_hpc.handoff.leases import Held

    return Held(0, rid, 1, layout.claim(0, rid, 1), {"id": rid}, 0)


def test_restarted_trainer_gets_the_same_results_without_rerunning(
    root: Path, fast: HandoffSettings
) -> None:
    first = Trainer(root, fast, progress=False)
    requests = first.submit(0, make_requests(40))
    workload = CountingWorkloadDouble(delay_s=0.01)
    with running_workers(root, workload, fast, count=2):
        partial = {}
        for record in first.poll(0):
            partial[record["request_id"]] = record
            if len(partial) == 15:
                break  # the trainer dies here
        second = Trainer(root, fast, progress=False)  # a new process would look the same
        assert second.submit(0, requests) == requests
        results = second.collect(0)
    assert len(results) == 40 and set(workload.calls.values()) == {1}
    for rid, record in partial.items():
        assert results[rid]["handoff"]["written_at"] == record["handoff"]["written_at"]
        assert results[rid]["reward"] == record["reward"]


def test_resubmitting_other_ids_is_refused(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(3))
    with pytest.raises(HandoffError, match="different batch"):
        trainer.submit(0, make_requests(4))
    with pytest.raises(ValueError, match="appears twice"):
        trainer.submit(1, make_requests(2) * 2)
    with pytest.raises(ValueError, match=r"request #0: kind"):
        trainer.submit(1, [{"id": "a"}])
    with pytest.raises(ValueError, match="not submitted"):
        list(trainer.poll(0, ["zzz"]))


def test_unknown_and_corrupt_results_are_skipped_counted_and_rerun(
    root: Path, fast: HandoffSettings, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(3))
    layout = Layout(root)
    layout.result(0, "r00000").write_text('{"kind": "result", "version": 2, "st')  # corrupt
    layout.result(0, "stranger").write_text(json.dumps({
        "kind": "result", "version": 2, "step": 0, "request_id": "stranger", "attempt": 1,
        "worker_id": "w", "written_at": 0.0,
        "record": {"request_id": "stranger", "status": "ok", "reward": 1.0}}))
    (layout.results(0) / ".tmp-abandoned").write_text('{"kind": "res')  # a killed writer
    (layout.claims(0) / ".tmp-abandoned").write_text("")
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, fast, count=1):
        results = trainer.collect(0)
    assert sorted(results) == ["r00000", "r00001", "r00002"]
    assert all(r["status"] == "ok" for r in results.values())
    assert trainer.counts["unknown_results"] == 1 and trainer.counts["corrupt_results"] == 1
    assert "unknown request 'stranger'" in caplog.text and "corrupt" in caplog.text
    assert workload.calls["r00000"] == 1  # rerun after being moved aside


def test_unsupported_request_version_is_skipped_without_crashing(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(2))
    trainer.submit(1, make_requests(2))
    layout = Layout(root)
    batch = json.loads(layout.requests(0).read_text())
    batch["version"] = 99
    layout.requests(0).write_text(json.dumps(batch))
    with running_workers(root, noop_workload_double, fast, count=1) as (worker,):
        assert all(r["status"] == "ok" for r in trainer.collect(1).values())
        stale = trainer.collect(0, timeout=0.3)
        assert worker.counts["skipped_steps"] == 1
    assert {r["status"] for r in stale.values()} == {"infra_error"}


def test_duplicate_worker_ids_are_safe(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(200))
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, fast, count=3, threads=2, worker_id="same-id"):
        results = trainer.collect(0)
        heartbeats = os.listdir(Layout(root).workers)
    assert len(results) == 200 and set(workload.calls.values()) == {1}
    assert len(heartbeats) == 3, "same id, distinct heartbeat files"


def test_worker_exits_when_idle_and_after_max_requests(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(5))
    worker = Worker(root, noop_workload_double, settings=fast, max_requests=2,
                    handle_signals=False)
    stopped = worker.run()
    assert stopped.reason is ExitReason.MAX_REQUESTS and str(stopped) == "max requests (2)"
    stopped = Worker(root, noop_workload_double, settings=fast, max_idle_s=0.3,
                     handle_signals=False).run()
    assert stopped.reason is ExitReason.IDLE and str(stopped) == "idle for 0.3 s"
    assert len(os.listdir(Layout(root).results(0))) == 5


def test_stop_sentinel_releases_claims(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(2))
    worker = Worker(root, CountingWorkloadDouble(delay_s=5), settings=fast, threads=2,
                    handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(lambda: len(scan_claims(Layout(root).claims(0))) == 2, 10,
               "the worker claimed both requests", poll=0.02)
    trainer.stop()
    thread.join(3)
    assert not thread.is_alive()
    claims = scan_claims(Layout(root).claims(0))
    assert {a.state(a.latest) for a in claims.values()} == {"released"}
    beat = json.loads(next(Layout(root).workers.iterdir()).read_text())
    assert beat["state"] == "exited" and beat["exit_reason"] == "stop sentinel"


def test_missing_directory_is_a_clear_error(tmp_path: Path, fast: HandoffSettings) -> None:
    with pytest.raises(HandoffError, match="does not exist"):
        Worker(tmp_path / "nope", noop_workload_double, settings=fast)
    with pytest.raises(HandoffError, match="does not exist"):
        Trainer(tmp_path / "nope", fast, create=False)
    with pytest.raises(HandoffError, match="never submitted"):
        Trainer(tmp_path / "new", fast).collect(5)


def test_full_disk_on_the_worker_loses_no_request(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result write that fails leaves the claim; it expires and the request is redone."""
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(3))
    from hargo_hpc.handoff import answers as answers_module

    real = answers_module.create_exclusive
    failures = {"left": 2}

    def flaky_disk(path: Path, obj: object, *, fsync: bool = True) -> bool:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise HandoffError(f"cannot create a file in {path.parent}: no space left on device")
        return real(path, obj, fsync=fsync)

    monkeypatch.setattr(answers_module, "create_exclusive", flaky_disk)
    with running_workers(root, noop_workload_double, fast, count=1) as (worker,):
        results = trainer.collect(0)
        assert worker.counts["errors"] == 2
    assert all(r["status"] == "ok" for r in results.values())


def test_plain_progress_when_not_a_tty(root: Path, fast: HandoffSettings) -> None:
    stream = io.StringIO()
    trainer = Trainer(root, fast, progress=True, stream=stream)
    trainer.submit(0, make_requests(20))
    with running_workers(root, noop_workload_double, fast, count=1):
        trainer.collect(0)
    lines = stream.getvalue().splitlines()
    assert lines[-1] == "handoff step 0: 20/20 done, 0 running, 0 queued, 0 failed"


def test_read_only_directory_does_not_crash_the_worker(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(2))
    from hargo_hpc.handoff import claimer as claimer_module

    def read_only(path: Path, obj: object) -> bool:
        raise HandoffError(f"cannot create {path}: read-only filesystem")

    monkeypatch.setattr(claimer_module, "open_exclusive", read_only)
    worker = Worker(root, noop_workload_double, settings=fast, max_idle_s=0.5,
                    handle_signals=False)
    stopped = worker.run()
    assert stopped.reason is ExitReason.IDLE and str(stopped) == "idle for 0.5 s"
    assert worker.counts["errors"] >= 1 and worker.counts["results"] == 0
    assert not os.listdir(Layout(root).results(0)), "nothing half-done was left behind"


def test_a_record_that_is_not_json_is_an_infra_failure(root: Path, fast: HandoffSettings) -> None:
    settings = fast.model_copy(update={"max_attempts": 1})
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, make_requests(1))

    def nan_reward(request: dict) -> dict:
        return {"request_id": request["id"], "status": "ok", "reward": float("nan")}

    with running_workers(root, nan_reward, settings, count=1):
        record = trainer.collect(0)["r00000"]
    assert record["status"] == "infra_error" and "not JSON" in record["error"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_progress_bar_on_a_terminal(root: Path, fast: HandoffSettings) -> None:
    stream = _Terminal()
    trainer = Trainer(root, fast, progress=True, stream=stream)
    trainer.submit(0, make_requests(10))
    with running_workers(root, noop_workload_double, fast, count=1):
        assert len(trainer.collect(0)) == 10
    assert "10/10 done, 0 running, 0 queued, 0 failed" in stream.getvalue()
