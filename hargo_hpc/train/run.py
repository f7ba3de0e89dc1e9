"""What a run's parts share: what `train` builds once for
every step (`RunContext`, immutable) and what the steps change (`LoopState`, saved with each
checkpoint), its data, the stop signals, and the one-line `TrainError`.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hargo_hpc.algorithms.presets import ResolvedAlgorithm
from hargo_hpc.algorithms.weighting import Weighting
from hargo_hpc.config import ExperimentConfig, token_budgets
from hargo_hpc.errors import HargoError
from hargo_hpc.sqd import SqdError, StageSpec
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.tasks.split import MixtureSampler
from hargo_hpc.train import early_stop
from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.rollout.generate import GenerationBackend, SamplingParams
from hargo_hpc.train.sqd_run import SqdRun
from hargo_hpc.train.updates import UpdateContext

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from hargo_hpc.train.backend.engine import Engine
    from hargo_hpc.train.rollout.rewards import RewardRouter


Log = Callable[[str], object]


class TrainError(HargoError, ValueError):
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
    stopped_by: str | None = None  # what stopped an interrupted run (a signal, the deadline)


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What every step uses and no step changes, built once by `train` (keywords only).

    accum: micro-batches per optimizer step (per rank); opt_steps: optimizer steps per pass
    over a rollout batch; logprob_micro: rows per log-prob forward; needs_old: whether the
    update needs the sampling policy's log-probs (off-policy). router: rank 0's reward router
    (None on the other ranks). prompts: a memo of templated prompts (by example and stage).
    """

    config: ExperimentConfig
    algorithm: ResolvedAlgorithm
    engine: Engine
    tokenizer: PreTrainedTokenizerBase
    reference: torch.nn.Module | None
    backend: GenerationBackend
    router: RewardRouter | None
    tasks: dict[str, Task]
    prompt_format: str
    sampling: SamplingParams
    budgets: dict[str, SamplingParams] = field(default_factory=dict)
    accum: int
    opt_steps: int
    logprob_micro: int
    needs_old: bool
    prompts: dict[str, str] = field(default_factory=dict)

    def sampling_of(self, example: Example) -> SamplingParams:
        """How `example`'s completions are sampled: `sampling` within its task's generation
        budget (`config.generation_budget`: max_new_tokens and stop strings)."""
        return self.budgets.get(example.task, self.sampling)

    def user_text(self, example: Example) -> str:
        return self.tasks[example.task].user_text(example)

    def update_context(self) -> UpdateContext:
        return UpdateContext(
            self.engine, self.algorithm, self.config.training.num_iterations, self.opt_steps,
            self.accum, self.sampling.temperature, self.config.rollout.max_new_tokens,
            self.tokenizer, self.prompt_format, self.user_text, token_budgets(self.config))

    def prompt_of(self, example: Example, stage: StageSpec | None) -> str:
        """The templated prompt; a GEMM problem's at its SQD `stage` states its techniques (an
        open stage's is the plain prompt)."""
        key = example.id if stage is None or stage.open else f"{example.id}@{stage.name}"
        text = self.prompts.get(key)
        if text is None:
            user = self.tasks[example.task].stage_text(example, stage)
            text = self.prompts[key] = build_prompt(user, self.prompt_format, self.tokenizer)
        return text


@dataclass
class LoopState:
    """What the loop changes from step to step, all of it in a checkpoint except the clock.

    step: the last RL step done; sampler: the data position; weighting: the method's stateful
    weighting (HARGO's running contrast; None: unweighted); sqd: SQD's stages (None: off);
    last_step_end: perf_counter at the end of the previous step's record.
    """

    step: int
    sampler: MixtureSampler
    weighting: Weighting | None = None
    sqd: SqdRun | None = None
    last_step_end: float = 0.0

    def stage_of(self, example: Example) -> StageSpec | None:
        """The SQD stage of `example`'s problem now; None without SQD or for a text task."""
        return None if self.sqd is None else self.sqd.stage_of(example)

    def trainer_state(self, config_hash: str) -> ckpt.TrainerState:
        """The loop's part of a checkpoint at `step`."""
        return ckpt.TrainerState(
            step=self.step, config_hash=config_hash, sampler=self.sampler.state_dict(),
            hargo={} if self.weighting is None else self.weighting.state_dict(),
            handoff_step=self.step, sqd=None if self.sqd is None else self.sqd.state_dict(),
            extra={"sft_done": True})

    def restore(self, saved: ckpt.TrainerState, checkpoint: Path) -> None:
        """Continue from a checkpoint's trainer state; TrainError for an SQD state that does
        not fit this run."""
        self.step = saved.step
        self.sampler.load_state_dict(saved.sampler)
        if self.weighting is not None:
            self.weighting.load_state_dict(saved.hargo)
        if self.sqd is not None and saved.sqd:
            try:
                self.sqd.load_state_dict(saved.sqd, f"the SQD state of checkpoint {checkpoint}")
            except SqdError as err:
                raise TrainError(str(err)) from None


@dataclass
class Data:
    tasks: dict[str, Task]
    train: dict[str, list[Example]]  # by task, the training split


class StepInterrupted(HargoError):
    """A stop request ended the step's reward wait (`phases.collect_rewards`, every rank): the
    loop checkpoints the step in flight and returns."""


class StopSignals:
    """SIGUSR1, SIGUSR2 and SIGTERM (Slurm's time limit, submitit's signal, preemption) set
    `requested` instead of killing: the loop checkpoints at its next phase boundary and
    returns. Handlers restored on exit. A signal caught before (`early_stop`) counts."""

    SIGNALS = early_stop.SIGNALS

    def __init__(self) -> None:
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopSignals:
        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        self.requested = self.requested or early_stop.take()  # one that came while loading
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():  # early_stop's catching ends with the loop
            signal.signal(sig, signal.SIG_DFL if early_stop.is_catcher(old) else old)


def quiet(_: str) -> None:
    """The log of ranks other than 0."""


class DiscardWriter:
    """The metrics writer of ranks other than 0."""

    def write(self, record: dict[str, Any]) -> None:
        del record
