"""A trainer in a Slurm job stops by itself, checkpointed, when what is left of its job is no
more than its derived lead (its last step and save, half again, at least the signal's lead),
exits 76, and a resume continues; the job's end from Slurm's variable or from squeue."""

from __future__ import annotations

import datetime
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.train import metrics as m
from hargo_hpc.train.deadline import (
    REASON,
    Deadline,
    derived_lead_s,
    job_end,
    lead_advice,
    parse_end,
)

from .test_loop import make_config, run


def test_the_lead_is_the_last_step_and_save_with_margin_never_below_the_signals() -> None:
    assert derived_lead_s(120, step_s=20, save_s=40) == 120  # 90 s would do: the signal's
    assert derived_lead_s(120, step_s=100, save_s=300) == 600
    deadline = Deadline(end=1000.0, floor_s=120)
    assert not deadline.reached(step_s=100, save_s=300, now=399.0)  # 601 s left
    assert deadline.reached(step_s=100, save_s=300, now=400.0)  # 600 s left
    # a lead the job's signal covers is the signal's: the trainer does not stop on its own
    assert not deadline.reached(step_s=20, save_s=40, now=990.0)


def test_the_jobs_end_from_slurms_variable_or_from_squeue() -> None:
    assert job_end({"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "1764946800"}) == 1764946800.0
    assert job_end({}) is None  # not in a Slurm job
    asked: list[list[str]] = []

    def squeue(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, "2026-12-05T15:04:12\n", "")

    end = job_end({"SLURM_JOB_ID": "7"}, run=squeue)
    assert asked == [["squeue", "-h", "-j", "7", "-o", "%e"]]
    assert end == datetime.datetime(2026, 12, 5, 15, 4, 12).timestamp()
    assert parse_end("N/A") is None and parse_end("Unknown") is None

    def gone(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id")

    assert job_end({"SLURM_JOB_ID": "7"}, run=gone) is None


def test_a_run_near_its_jobs_end_checkpoints_stops_and_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_config(tmp_path, "near", training={"steps": 3})
    _, whole = run(make_config(tmp_path, "whole", training={"steps": 3}))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # a job whose end is near
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(time.time()) + 20))
    # its saves outlast the signal's lead (the tiny model's take a second: the clock's verdict
    # stands in for a slow filesystem's)
    monkeypatch.setattr(Deadline, "reached", lambda self, step_s, save_s: True)
    stopped, first = run(cfg)
    assert [r["step"] for r in first] == [1]
    assert stopped.interrupted and stopped.stopped_by == REASON and stopped.step == 1
    assert stopped.checkpoint is not None and stopped.checkpoint.name == "step_000001"
    monkeypatch.delenv("SLURM_JOB_END_TIME")
    monkeypatch.delenv("SLURM_JOB_ID")  # the requeued job: a new allocation
    resumed, records = run(cfg, resume=True)
    assert not resumed.interrupted and resumed.step == 3
    assert [m.deterministic(r) for r in records] == [m.deterministic(r) for r in whole]


def test_a_lead_too_short_for_a_step_and_a_save_is_said_with_what_would_do() -> None:
    assert lead_advice(120.0, step_s=40.0, save_s=20.0) is None  # 90 s needed
    said = lead_advice(120.0, step_s=60.0, save_s=300.0)  # 540 s needed
    assert said is not None and "\n" not in said
    assert "a save took 300 s and a step 60 s" in said
    assert "slurm.train.signal_lead_s 120 s" in said
    assert "stops by itself 540 s before its job's end" in said and "at least 540" in said
    assert lead_advice(120.0, step_s=81.0, save_s=0.0).endswith("at least 130 leaves it to "
                                                                "the signal)")
