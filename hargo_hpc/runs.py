"""The layout of one run directory: the one place its file names are spelled. Every reader and
writer (the trainer, `hargo sft`, evaluation, SQD, `hargo submit` / `watch`, `hargo report`, the
scripts) asks a `RunLayout` for its paths. Light: no torch, no config (slurm/ and report/ use
it on a login node; `config` itself does). What each path holds: docs/training.md, "The run
directory".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hargo_hpc.sqd import RESULTS as SQD_RESULTS
from hargo_hpc.sqd import STATE as SQD_STATE


@dataclass(frozen=True)
class RunLayout:
    """The paths of the run directory `root` (module docstring)."""

    root: Path

    CONFIG: ClassVar[str] = "config.toml"
    METRICS: ClassVar[str] = "metrics.jsonl"
    ROLLOUTS: ClassVar[str] = "rollouts"
    CHECKPOINTS: ClassVar[str] = "checkpoints"
    TENSORBOARD: ClassVar[str] = "tensorboard"
    EXPORT: ClassVar[str] = "export"
    FINISHED: ClassVar[str] = "finished.json"
    SQD: ClassVar[str] = "sqd"
    HANDOFF: ClassVar[str] = "handoff"
    EVAL: ClassVar[str] = "eval"
    EVAL_METRICS: ClassVar[str] = "metrics.json"  # in the eval/ directory (any `hargo eval` out)
    SFT: ClassVar[str] = "sft"
    BASELINE_ANSWERS: ClassVar[str] = "baseline-answers"

    @property
    def config(self) -> Path:
        return self.root / self.CONFIG

    @property
    def metrics(self) -> Path:
        return self.root / self.METRICS

    def rollouts(self, step: int) -> Path:
        return self.root / self.ROLLOUTS / f"step_{step:06d}.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / self.CHECKPOINTS

    @property
    def tensorboard(self) -> Path:
        return self.root / self.TENSORBOARD

    @property
    def export(self) -> Path:
        return self.root / self.EXPORT

    @property
    def finished(self) -> Path:
        return self.root / self.FINISHED

    @property
    def sqd(self) -> Path:
        return self.root / self.SQD

    @property
    def sqd_results(self) -> Path:
        return self.sqd / SQD_RESULTS

    @property
    def sqd_state(self) -> Path:
        return self.sqd / SQD_STATE

    @property
    def handoff(self) -> Path:
        """The default handoff directory (handoff.dir empty)."""
        return self.root / self.HANDOFF

    @property
    def eval(self) -> Path:
        return self.root / self.EVAL

    @property
    def eval_metrics(self) -> Path:
        return self.eval / self.EVAL_METRICS

    @property
    def baseline_answers(self) -> Path:
        return self.root / self.BASELINE_ANSWERS

    @property
    def sft(self) -> RunLayout:
        """The SFT run's own directory, of the same layout."""
        return RunLayout(self.root / self.SFT)
