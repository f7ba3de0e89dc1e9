"""Where a run's per-step metrics go besides metrics.jsonl (`logging.report_to`): TensorBoard,
Weights & Biases (offline by default: compute nodes have no network), MLflow (a file store in
the run directory by default), or a tracker of the user's own (`module:factory`). Rank 0 only;
each tracker gets the finite numbers of each step's record. docs/training.md, "Watching a run".
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Protocol

from hargo_hpc._lazy import load_target
from hargo_hpc.config import ExperimentConfig
from hargo_hpc.errors import HargoError
from hargo_hpc.runs import RunLayout


class TrackerError(HargoError, ValueError):
    """A tracker that cannot be made (one line naming it)."""


class Tracker(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


TrackerFactory = Callable[[ExperimentConfig, RunLayout], Tracker]
TRACKERS: dict[str, TrackerFactory] = {}


def register_tracker(name: str, factory: TrackerFactory) -> None:
    """Make `logging.report_to = [name]` call `factory(config, layout)` on rank 0."""
    TRACKERS[name] = factory


def make_trackers(config: ExperimentConfig, layout: RunLayout) -> list[Tracker]:
    """The trackers `logging.report_to` names; TrackerError (one line) for one that cannot be
    imported or made (the tracker's package missing, a bad `module:factory`)."""
    made = []
    for name in config.logging.report_to:
        factory = TRACKERS.get(name) or _imported(name)
        try:
            made.append(factory(config, layout))
        except ImportError as err:
            raise TrackerError(f"logging.report_to {name!r}: {err} (pip install {name})"
                               ) from None
    return made


def _imported(spec: str) -> TrackerFactory:
    try:
        factory = load_target(spec)
    except (ImportError, AttributeError) as err:
        raise TrackerError(f"logging.report_to {spec!r}: {err}") from None
    if not callable(factory):
        raise TrackerError(f"logging.report_to {spec!r}: {spec.partition(':')[2]} is not "
                           "callable")
    return factory


def where_to_look(config: ExperimentConfig, layout: RunLayout) -> list[str]:
    """One line per tracker saying where its metrics are (`hargo status`, the trainer's start)."""
    lines = []
    for name in config.logging.report_to:
        if name == "tensorboard":
            lines.append(f"tensorboard --logdir {layout.tensorboard}")
        elif name == "wandb":
            lines.append(f"wandb ({config.logging.wandb_mode}): {layout.root / 'wandb'}"
                         + (f"; from a login node: wandb sync {layout.root / 'wandb'}/"
                            "offline-run-*" if config.logging.wandb_mode == "offline" else ""))
        elif name == "mlflow":
            lines.append(f"mlflow ui --backend-store-uri {mlflow_uri(config, layout)}")
        else:
            lines.append(f"{name}: the user's own tracker")
    return lines


def run_id(config: ExperimentConfig, layout: RunLayout) -> str:
    """A stable id of this run (its directory), so a resumed run logs into the same one."""
    return hashlib.sha256(str(layout.root.resolve()).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- the built-in trackers


class TensorBoard:
    def __init__(self, config: ExperimentConfig, layout: RunLayout) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(layout.tensorboard))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandB:
    """One W&B run per run directory (resumed by its stable id), offline by default."""

    def __init__(self, config: ExperimentConfig, layout: RunLayout) -> None:
        import wandb

        self._run = wandb.init(
            project=config.logging.wandb_project, name=config.run.name,
            id=run_id(config, layout), resume="allow", dir=str(layout.root),
            mode=config.logging.wandb_mode, config=config.model_dump(mode="json"),
            settings=wandb.Settings(console="off", x_disable_stats=True))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


def mlflow_uri(config: ExperimentConfig, layout: RunLayout) -> str:
    return config.logging.mlflow_tracking_uri or (layout.root / "mlruns").absolute().as_uri()


class MLflow:
    """One MLflow run per run directory (its id kept in `mlflow_run_id`, so a resumed run
    continues it), in the tracking URI's experiment."""

    def __init__(self, config: ExperimentConfig, layout: RunLayout) -> None:
        if not config.logging.mlflow_tracking_uri:  # MLflow 3.x keeps its file store in
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # maintenance: opt in
        # no usage reports from compute nodes (often offline); set it to false to allow them
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=mlflow_uri(config, layout))
        experiment = self._client.get_experiment_by_name(config.logging.mlflow_experiment)
        experiment_id = (experiment.experiment_id if experiment is not None else
                         self._client.create_experiment(config.logging.mlflow_experiment))
        saved = layout.root / "mlflow_run_id"
        if saved.is_file():
            self._run_id = saved.read_text().strip()
            self._client.update_run(self._run_id, status="RUNNING")
        else:
            self._run_id = self._client.create_run(experiment_id,
                                                   run_name=config.run.name).info.run_id
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(self._run_id + "\n")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[
            Metric(key, value, now, step) for key, value in metrics.items()])

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


register_tracker("tensorboard", TensorBoard)
register_tracker("wandb", WandB)
register_tracker("mlflow", MLflow)
