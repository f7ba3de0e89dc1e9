"""What a run's parts share: its directory layout (`RunPaths`), the objects built once by
`train` for every step (`Run`), its data, the stop signals, and the one-line `TrainError`.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.algorithms.presets import ResolvedAlgorithm
from hargo_hpc.config import ExperimentConfig
from hargo_hpc.sqd import Sqd, StageSpec
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.tasks.split import MixtureSampler
from hargo_hpc.train.rollout import HFGenerateBackend, SamplingParams
from hargo_hpc.train.updates import UpdateContext

EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped by a signal after a checkpoint; rerun with --resume
CHECKPOINTS, EXPORT, METRICS, ROLLOUTS = "checkpoints", "export", "metrics.jsonl", "rollouts"
FINISHED, SFT_DIR, TENSORBOARD, SQD_DIR = "finished.json", "sft", "tensorboard", "sqd"
SQD_TASKS = ("gemm",)  # the tasks whose prompts SQD stages

Log = Callable[[str], object]


class TrainError(ValueError):
    """A run that cannot start or continue; the message is one line for the user."""


@dataclass
class TrainResult:
    """Where a run's outputs are. `step`: the last RL step done; `interrupted`: stopped by a
    signal after a checkpoint (resume it); `already_finished`: a resume of a finished run."""

    run_dir: Path
    metrics: Path
    step: int
    checkpoint: Path | None
    export: Path | None
    interrupted: bool = False
    already_finished: bool = False


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def export(self) -> Path:
        return self.root / EXPORT

    @property
    def finished(self) -> Path:
        return self.root / FINISHED

    @property
    def sft(self) -> Path:
        return self.root / SFT_DIR

    def rollouts(self, step: int) -> Path:
        return self.root / ROLLOUTS / f"step_{step:06d}.jsonl"


@dataclass
class Run:
    """What the steps share, built once by `train`."""

    config: ExperimentConfig
    algorithm: ResolvedAlgorithm
    engine: Any
    tokenizer: Any
    reference: torch.nn.Module | None
    backend: HFGenerateBackend
    router: Any
    tasks: dict[str, Task]
    sampler: MixtureSampler
    prompt_format: str
    sampling: SamplingParams
    accum: int  # micro-batches per optimizer step (per rank)
    opt_steps: int  # optimizer steps per pass over a rollout batch
    logprob_micro: int
    needs_old: bool
    hargo_contrast: float | None = None
    hargo_label_means: dict[str, float] = field(default_factory=dict)  # the label control's
    prompts: dict[str, str] = field(default_factory=dict)
    sqd: Sqd | None = None  # SQD's stages for the GEMM prompts (sqd.enabled)
    sqd_dir: Path | None = None
    last_step_end: float = 0.0  # perf_counter at the end of the previous step's record

    def user_text(self, example: Example) -> str:
        return self.tasks[example.task].user_text(example)

    def update_context(self) -> UpdateContext:
        return UpdateContext(
            self.engine, self.algorithm, self.config.training.num_iterations, self.opt_steps,
            self.accum, self.sampling.temperature, self.config.rollout.max_new_tokens,
            self.tokenizer, self.prompt_format, self.user_text)

    def prompt_of(self, example: Example) -> str:
        """The templated prompt; a GEMM problem's states its SQD stage's techniques."""
        stage = self.stage_of(example)
        key = example.id if stage is None else f"{example.id}@{stage.name}"
        text = self.prompts.get(key)
        if text is None:
            user = (self.user_text(example) if stage is None else
                    self.tasks[example.task].prompt_for(example, stage.permitted, stage.forbid))
            text = self.prompts[key] = build_prompt(user, self.prompt_format, self.tokenizer)
        return text

    def stage_of(self, example: Example) -> StageSpec | None:
        """The SQD stage of `example`'s problem now; None without SQD or for a text task."""
        if self.sqd is None or example.task not in SQD_TASKS:
            return None
        return self.sqd.stage_of(example.meta["problem"]["name"])


@dataclass
class Data:
    tasks: dict[str, Task]
    train: dict[str, list[Example]]  # by task, the training split


class StopSignals:
    """SIGUSR1 and SIGTERM (Slurm's time limit, preemption) set `requested` instead of killing:
    the loop checkpoints at the end of the step and returns. Handlers restored on exit."""

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopSignals:
        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def quiet(_: str) -> None:
    """The log of ranks other than 0."""


class DiscardWriter:
    """The metrics writer of ranks other than 0."""

    def write(self, record: dict[str, Any]) -> None:
        del record
