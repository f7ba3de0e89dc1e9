"""Regression tests of the 2026-11-30 review: fault injection (monkeypatched os functions)."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from waiting import wait_until

from hargo_hpc.cli.handoff import worker as worker_command
from hargo_hpc.handoff import HandoffError, HandoffSettings, Trainer, Worker, atomic, retention
from hargo_hpc.handoff import trainer as trainer_module
from hargo_hpc.handoff.claims import ClaimIndex, LeaseObserver, scan_claims
from hargo_hpc.handoff.exits import Exit, ExitReason
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.steps import StepState

from .conftest import make_requests, running_workers
from .doubles import CountingWorkloadDouble, noop_workload_double

ESTALE = OSError(errno.ESTALE, "Stale file handle")


def _finished_step(root: Path, settings: HandoffSettings, n: int = 10, step: int = 1) -> dict:
    """A closed step with `n` ok results (run by in-process workers)."""
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(step, make_requests(n))
    with running_workers(root, noop_workload_double, settings, count=1):
        records = trainer.collect(step)
    assert Layout(root).closed(step).exists()
    return records


def _failing_once(real: Callable[..., Any], match: Callable[[str], bool], err: OSError
                  ) -> Callable[..., Any]:
    fired: list[int] = []

    def flaky(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
        if not fired and match(str(path)):
            fired.append(1)
            raise err
        return real(path, *args, **kwargs)

    return flaky


def _sees_closed(worker: Worker, step: int) -> bool:
    """Whether `worker`'s step catalogue holds `step` as closed (read, not listed again)."""
    entry = worker.catalogue._entries.get(step)
    return entry is not None and entry.state is StepState.CLOSED


def _start(worker: Worker) -> tuple[threading.Thread, dict[str, Exit]]:
    out: dict[str, Exit] = {}
    thread = threading.Thread(target=lambda: out.__setitem__("reason", worker.run()), daemon=True)
    thread.start()
    return thread, out


# ---------------------------------------------------------------- 1. compaction


def test_interrupted_compaction_rerun_keeps_every_result(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _finished_step(root, fast)
    real = retention._remove_tree

    def killed(path: Path) -> None:
        if path.name == "results":
            for name in sorted(os.listdir(path))[:5]:
                os.unlink(path / name)
            raise KeyboardInterrupt("killed mid-rmtree")
        real(path)

    monkeypatch.setattr(retention, "_remove_tree", killed)
    with pytest.raises(KeyboardInterrupt):
        retention.compact(root, 1, fsync=False)
    monkeypatch.setattr(retention, "_remove_tree", real)
    # A trainer restarted now (half of results/ gone, compacted.json there) gets every record.
    middle = Trainer(root, fast, progress=False).collect(1, timeout=0.3)
    assert {r: v["status"] for r, v in middle.items()} == {r: "ok" for r in first}
    assert not any(v["handoff"]["timed_out"] for v in middle.values())
    again = retention.compact(root, 1, fsync=False)
    assert again.results == 10
    assert not Layout(root).results(1).exists() and not Layout(root).claims(1).exists()
    restarted = Trainer(root, fast, progress=False).collect(1, timeout=0.3)
    assert {r: v["status"] for r, v in restarted.items()} == {r: "ok" for r in first}


def test_two_compactors_at_once_keep_every_result(root: Path, fast: HandoffSettings) -> None:
    _finished_step(root, fast, n=40)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            retention.compact(root, 1, fsync=False)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert retention.compact(root, 1, fsync=False).results == 40
    assert len(Trainer(root, fast, progress=False).collect(1, timeout=0.3)) == 40


def test_corrupt_compacted_file_is_never_overwritten(root: Path, fast: HandoffSettings) -> None:
    _finished_step(root, fast, n=3)
    Layout(root).compacted(1).write_text("{not json")
    with pytest.raises(HandoffError, match="refusing to rebuild"):
        retention.compact(root, 1, fsync=False)
    assert Layout(root).compacted(1).read_text() == "{not json"


def test_compact_and_prune_sweep_leftovers(root: Path, fast: HandoffSettings) -> None:
    _finished_step(root, fast, n=2)
    layout = Layout(root)
    old, young = layout.step(1) / ".tmp-old", layout.step(1) / ".tmp-young"
    old.write_text("x")
    young.write_text("x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    retention.compact(root, 1, fsync=False)
    assert not old.exists() and young.exists(), "only old temp files are swept"
    leftover = layout.steps / ".pruning-7-abcdef"
    (leftover / "results").mkdir(parents=True)
    retention.prune(root, keep=5)
    assert not leftover.exists(), "a killed prune's leftover is removed"


# ---------------------------------------------------------------- 2. timeout records


def test_unsaved_timeout_is_not_yielded_and_is_retried(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(1))
    real, calls = trainer_module.create_exclusive, []

    def full(path: Path, obj: Any, **kwargs: Any) -> bool:
        calls.append(1)
        if len(calls) <= 3:
            raise HandoffError(f"cannot create a file in {path.parent}: no space left on device")
        return real(path, obj, **kwargs)

    monkeypatch.setattr(trainer_module, "create_exclusive", full)
    records = list(trainer.poll(1, timeout=0.05))
    assert len(records) == 1 and len(calls) == 4
    saved = json.loads(Layout(root).result(1, "r00000").read_text())
    assert records[0]["status"] == saved["record"]["status"] == "infra_error"
    again = Trainer(root, fast, progress=False).collect(1, timeout=0.05)
    assert again["r00000"]["error"] == records[0]["error"]


def test_timeout_that_can_never_be_saved_raises(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(1))

    def full(path: Path, obj: Any, **kwargs: Any) -> bool:
        raise HandoffError("no space left on device")

    monkeypatch.setattr(trainer_module, "create_exclusive", full)
    monkeypatch.setattr(trainer_module, "TIMEOUT_WRITE_GRACE_S", 0.1)
    yielded: list[dict] = []
    with pytest.raises(HandoffError, match="cannot record the timeout"):
        for record in trainer.poll(1, timeout=0.05):
            yielded.append(record)
    assert yielded == []


@pytest.mark.parametrize("winner", ["corrupt", "worker"])
def test_lost_timeout_link_delivers_what_won(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch, winner: str
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(1))
    real, calls = trainer_module.create_exclusive, []
    worker_result = {
        "kind": "result", "version": 2, "step": 1, "request_id": "r00000", "attempt": 1,
        "worker_id": "w", "written_at": 0.0,
        "record": {"request_id": "r00000", "status": "ok", "reward": 3.0},
    }

    def racing(path: Path, obj: Any, **kwargs: Any) -> bool:
        calls.append(1)
        if len(calls) == 1:  # someone else's file lands just before our link
            path.write_text("{corrupt" if winner == "corrupt" else json.dumps(worker_result))
            return False
        return real(path, obj, **kwargs)

    monkeypatch.setattr(trainer_module, "create_exclusive", racing)
    records = list(trainer.poll(1, timeout=0.05))
    assert len(records) == 1
    saved = json.loads(Layout(root).result(1, "r00000").read_text())
    assert records[0]["status"] == saved["record"]["status"]
    assert records[0]["status"] == ("ok" if winner == "worker" else "infra_error")
    again = Trainer(root, fast, progress=False).collect(1, timeout=0.05)
    assert again["r00000"]["status"] == records[0]["status"]


def test_link_retry_eexist_is_detected_as_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.link

    def retransmitted(source: Any, target: Any) -> None:
        real(source, target)  # the first LINK worked, its reply was lost
        raise FileExistsError(errno.EEXIST, "File exists")

    monkeypatch.setattr(os, "link", retransmitted)
    assert atomic.create_exclusive(tmp_path / "a.json", {"x": 1}, fsync=False)
    monkeypatch.setattr(os, "link", real)
    assert not atomic.create_exclusive(tmp_path / "a.json", {"x": 2}, fsync=False)
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert os.listdir(tmp_path) == ["a.json"]


# ---------------------------------------------------------------- 3. raw OSErrors


def test_estale_while_scanning_does_not_kill_the_worker(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(5))
    in_worker = lambda p: (  # noqa: E731
        p.endswith("claims") and threading.current_thread().name.startswith("hargo-worker"))
    monkeypatch.setattr(os, "listdir", _failing_once(os.listdir, in_worker, ESTALE))
    with running_workers(root, noop_workload_double, fast, count=1) as (worker,):
        records = trainer.collect(1, timeout=10)
    assert {r["status"] for r in records.values()} == {"ok"}
    assert worker.counts["errors"] >= 1 and worker.counts["results"] == 5


def test_estale_while_the_trainer_lists_results_is_retried(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's own listing fails once (its thread only: the worker lists results/ too,
    and under load it may list first, which took the one failure and left the trainer none)."""
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(3))
    in_trainer = lambda p: (  # noqa: E731
        p.endswith("results") and threading.current_thread() is threading.main_thread())
    monkeypatch.setattr(os, "listdir", _failing_once(os.listdir, in_trainer, ESTALE))
    with running_workers(root, noop_workload_double, fast, count=1):
        records = trainer.collect(1, timeout=10)
    assert {r["status"] for r in records.values()} == {"ok"}
    assert trainer.counts["poll_errors"] == 1


def test_listing_sites_raise_handoff_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "steps").mkdir()
    (tmp_path / "c.claim").write_text("")

    def eio(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "listdir", eio)
    monkeypatch.setattr(os, "scandir", eio)
    with pytest.raises(HandoffError, match="input/output error"):
        scan_claims(tmp_path)
    with pytest.raises(HandoffError):
        ClaimIndex().update(tmp_path)
    with pytest.raises(HandoffError):
        Layout(tmp_path).step_numbers()
    monkeypatch.setattr(os, "stat", eio)
    with pytest.raises(HandoffError, match="input/output error"):
        LeaseObserver(1.0).expired(tmp_path / "c.claim")


def test_stale_stop_sentinel_check_is_retried(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(root, noop_workload_double, settings=fast, handle_signals=False)
    monkeypatch.setattr(os, "stat", _failing_once(os.stat, lambda p: p.endswith("STOP"), ESTALE))
    assert worker._exit_reason(time.monotonic(), [threading.current_thread()]) is None
    assert worker.counts["errors"] == 1


def test_a_crashed_workload_thread_fails_the_worker(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(root, noop_workload_double, settings=fast, handle_signals=False,
                    max_idle_s=30)

    def bug() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(worker, "_take", bug)
    thread, out = _start(worker)
    thread.join(5)
    stopped = out["reason"]
    assert stopped.reason is ExitReason.CRASHED and stopped.failed
    assert str(stopped).startswith("failed: ") and "a bug" in str(stopped)
    assert not Exit.idle(3).failed and str(Exit.idle(3)) == "idle for 3 s"
    assert [r for r in ExitReason if r.failed] == [ExitReason.CRASHED, ExitReason.INFRA,
                                                   ExitReason.ERROR]


# ---------------------------------------------------------------- 4. one bad step


def test_an_unreadable_step_does_not_starve_later_steps(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    layout = Layout(root)
    layout.step(1).mkdir(parents=True)
    layout.requests(1).mkdir()  # reading it fails with EISDIR: an I/O error, not a schema one
    trainer.submit(2, make_requests(5))
    with running_workers(root, noop_workload_double, fast, count=1) as (worker,):
        records = trainer.collect(2, timeout=5)
    assert {r["status"] for r in records.values()} == {"ok"}
    assert worker.counts["errors"] >= 1


# ---------------------------------------------------------------- 5. renewal vs slow scans


def test_lease_renewal_is_not_blocked_by_a_slow_claim_scan(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(2))
    worker = Worker(root, noop_workload_double, settings=fast, handle_signals=False)
    held = worker._take()
    assert held is not None
    release = threading.Event()
    entered = threading.Event()

    def slow_next_claim() -> None:
        entered.set()
        release.wait(10)  # a READDIR stuck on the file server

    monkeypatch.setattr(worker.claimer, "next_claim", slow_next_claim)
    taker = threading.Thread(target=worker._take)
    taker.start()
    assert entered.wait(5)
    renewed_at = {}
    monkeypatch.setattr(worker, "renew", lambda path: renewed_at.setdefault(path, 1))
    renewer = threading.Thread(target=worker.leases.renew_held)
    renewer.start()
    renewer.join(1.0)
    stuck = renewer.is_alive()
    release.set()
    taker.join(5)
    renewer.join(5)
    assert not stuck and renewed_at == {held.path: 1}


# ---------------------------------------------------------------- 6. quarantine


def test_transient_read_error_never_quarantines_a_valid_result(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(1, make_requests(1))
    with running_workers(root, noop_workload_double, fast, count=1):
        wait_until(Layout(root).result(1, "r00000").exists, 10, "the result", poll=0.01)
    real, fired = trainer_module.read_json, []

    def eio(path: Path) -> dict:
        if not fired:
            fired.append(1)
            raise HandoffError(f"cannot read {path}: input/output error")
        return real(path)

    monkeypatch.setattr(trainer_module, "read_json", eio)
    record = trainer.collect(1, timeout=5)["r00000"]
    assert record["status"] == "ok" and record["handoff"]["attempt"] == 1
    assert trainer.counts["corrupt_results"] == 0 and trainer.counts["read_errors"] == 1
    assert [n for n in os.listdir(Layout(root).results(1)) if n.startswith(".corrupt")] == []


def test_quarantined_result_releases_its_attempt(root: Path) -> None:
    settings = HandoffSettings(lease_s=30, poll_interval_s=0.02, step_timeout_s=20,
                               max_attempts=1)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(1, make_requests(1))
    layout = Layout(root)
    layout.claim(1, "r00000", 1).write_text("")  # attempt 1 ran and wrote a broken result
    layout.result(1, "r00000").write_text('{"kind": "result", "version": 2, "attempt": 1}')
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, settings, count=1):
        record = trainer.collect(1, timeout=10)["r00000"]
    assert record["status"] == "ok", record  # not a failure: no lease wait, no give-up
    assert layout.claim(1, "r00000", 1, "released").exists()
    assert trainer.counts["corrupt_results"] == 1 and workload.calls == {"r00000": 1}


def test_a_worker_that_found_the_step_complete_sees_the_quarantine_at_once(root: Path) -> None:
    """The race the test above could lose under load: the worker scans first, finds a result
    (the broken one) for every request, and would not look again for COMPLETE_RECHECK_S (30 s);
    moving the result aside changes results/'s mtime, so it looks again at its next turn."""
    settings = HandoffSettings(lease_s=30, poll_interval_s=0.02, step_timeout_s=20,
                               max_attempts=1)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(1, make_requests(1))
    layout = Layout(root)
    layout.claim(1, "r00000", 1).write_text("")
    layout.result(1, "r00000").write_text('{"kind": "result", "version": 2, "attempt": 1}')
    with running_workers(root, CountingWorkloadDouble(), settings, count=1) as (worker,):
        wait_until(lambda: worker.counts["scans"] >= 1, 10,
                   "a scan of the worker (it has seen the step complete)", poll=0.01)
        started = time.monotonic()
        record = trainer.collect(1, timeout=10)["r00000"]
    assert record["status"] == "ok", record
    assert time.monotonic() - started < 5  # not the 30 s re-check


# ---------------------------------------------------------------- 7. claim content


def test_claim_whose_content_cannot_be_written_is_still_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def enospc(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", enospc)
    assert atomic.open_exclusive(tmp_path / "r.1.claim", {"worker_id": "w"})
    monkeypatch.undo()
    assert (tmp_path / "r.1.claim").exists()
    assert not atomic.open_exclusive(tmp_path / "r.1.claim", {"worker_id": "w"})


# ---------------------------------------------------------------- 8. pruned and resubmitted


def test_pruned_step_submitted_again_is_served(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    workload = CountingWorkloadDouble()
    with running_workers(root, workload, fast, count=1) as (worker,):
        trainer.submit(1, make_requests(3))
        trainer.collect(1)
        wait_until(lambda: _sees_closed(worker, 1), 10, "the worker saw step 1 closed",
                   poll=0.02)
        trainer.submit(2, make_requests(1, "b"))
        trainer.collect(2)
        assert retention.prune(root, keep=1) == ([1], [])
        trainer.submit(1, make_requests(3))  # same object: its caches must not answer
        records = trainer.collect(1, timeout=5)
    assert {r["status"] for r in records.values()} == {"ok"}
    assert all(n == 2 for rid, n in workload.calls.items() if rid.startswith("r"))


# ---------------------------------------------------------------- 9. short-lived workers


def test_idle_must_outlive_the_lease() -> None:
    with pytest.raises(ValidationError, match="must be longer than lease_s"):
        HandoffSettings(lease_s=60, worker_max_idle_s=30)
    result = CliRunner().invoke(worker_command, ["--handoff", ".", "--max-idle", "5",
                                                 "--workload", "os:getcwd"])
    assert result.exit_code == 2 and "must be longer than lease_s" in result.output


def test_short_lived_worker_stays_to_take_over_a_dead_claim(root: Path) -> None:
    settings = HandoffSettings(lease_s=0.5, poll_interval_s=0.02, step_timeout_s=20)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(1, make_requests(1))
    Layout(root).claim(1, "r00000", 1).write_text("")  # its holder died
    worker = Worker(root, noop_workload_double, settings=settings, handle_signals=False,
                    max_idle_s=0.2)
    thread, out = _start(worker)
    thread.join(10)
    assert out["reason"].reason is ExitReason.IDLE
    assert Layout(root).result(1, "r00000").exists(), "the dead claim was taken over"


# ---------------------------------------------------------------- 10. idle scans


def test_idle_worker_does_not_rescan_finished_steps(root: Path, fast: HandoffSettings) -> None:
    trainer = Trainer(root, fast, progress=False)
    for step in (1, 2):
        trainer.submit(step, make_requests(50, f"s{step}-"))
    with running_workers(root, noop_workload_double, fast, count=1):
        # every result is there; the trainer never closes the steps
        wait_until(lambda: sum(len(os.listdir(Layout(root).results(s))) for s in (1, 2))
                   == 100, 30, "the 100 results of steps 1 and 2", poll=0.01)
    worker = Worker(root, noop_workload_double, settings=fast, handle_signals=False,
                    max_idle_s=1.0)
    thread, _ = _start(worker)
    thread.join(10)
    assert worker.counts["scans"] <= 4, dict(worker.counts)  # one per step (was ~100)


def test_idle_scans_back_off_while_others_hold_every_claim(
    root: Path, fast: HandoffSettings
) -> None:
    settings = fast.model_copy(update={"lease_s": 30.0})
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(1, make_requests(1))
    Layout(root).claim(1, "r00000", 1).write_text("")  # held by someone else
    worker = Worker(root, noop_workload_double, settings=settings, handle_signals=False,
                    max_idle_s=1.0)
    stopper = threading.Timer(1.5, lambda: Trainer(root, settings, progress=False).stop())
    stopper.start()
    thread, out = _start(worker)
    thread.join(10)
    assert out["reason"].reason is ExitReason.STOP_SENTINEL
    assert str(out["reason"]) == "stop sentinel"
    assert worker.counts["scans"] <= 12, dict(worker.counts)  # every 0.02 s: ~75
