"""The experiment file as one validated object: its sections composed, `section.key=value`
overrides, sweeps, and the resolved copy written into a run directory.

Every field has a default or a clear "missing" error; unknown keys are errors, each a
`ConfigError` of one line naming the file, the field, the bad value and what is allowed. The
resolved config is enough to re-run the experiment.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, NamedTuple

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from hargo_hpc.algorithms.hargo_params import HargoParams
from hargo_hpc.algorithms.names import AGG_MODES, KL_ESTIMATORS, RATIO_LEVELS
from hargo_hpc.algorithms.presets import PRESETS
from hargo_hpc.algorithms.registry import EstimatorName, PolicyLossName
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.config.evaluation import EvalSettings
from hargo_hpc.config.training import (
    LoggingSection,
    ModelSection,
    RolloutSection,
    SftSection,
    TrainingSection,
)
from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.runs import RunLayout
from hargo_hpc.sqd import SqdSettings
from hargo_hpc.tasks.names import PROMPT_FORMATS
from hargo_hpc.tasks.registry import check_name as check_task_name
from hargo_hpc.tasks.registry import define_generic
from hargo_hpc.tasks.settings import RewardSettings

ALGORITHM_NAMES = tuple(PRESETS)  # the method presets are the algorithms' to declare
RESOLVED_NAME = RunLayout.CONFIG


class ConfigError(HargoError, ValueError):
    """A bad experiment file or override; the message is one line meant for the user."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunSection(_Section):
    name: str = Field("experiment", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    dir: str = "runs"
    seed: int = 0


class TaskSpec(_Section):
    name: str = Field(
        min_length=1, description="a registered task (tasks/registry.py), 'module:Class' (a "
        "Task of your own), or a generic task's name (kind = 'generic')")
    kind: Literal["task", "generic"] = Field(
        "task", description="'generic': a task from `path` and `reward` alone (tasks/generic.py)")
    prompt_field: str = Field("prompt", min_length=1,
                              description="generic: the record field holding the prompt")
    reference_field: str = Field("answer", min_length=1,
                                 description="generic: the record field holding the reference")
    reward: str = Field("", description="generic: 'module:function' scoring completions as "
                        "TRL's reward functions do (prompts, completions, references)")
    path: str = Field(
        "", description="a directory of the published files, one file, the hub id "
        "HPC-GPT/HPC, or '' = the task's shipped sample",
    )
    weight: float | None = Field(
        None, ge=0, description="share in the mixture; unset = proportional to its size"
    )
    max_items: int | None = Field(None, gt=0)
    eval_fraction: float | None = Field(
        None, ge=0, lt=1, description="this task's share held out for evaluation; unset = "
        "data.eval_fraction",
    )
    eval_examples: int | None = Field(
        None, ge=0, description="at most this many held-out examples are evaluated (0 = all); "
        "unset = the task's default (Task.eval_examples: 200 yes/no, 100 QA, every GEMM problem)",
    )
    eval_samples: int | None = Field(
        None, ge=1, description="completions per held-out prompt (> 1: sampled at the rollout "
        "temperature); unset = the task's default (Task.eval_samples: 1 greedy, GEMM 4)",
    )
    max_new_tokens: int | None = Field(
        None, gt=0, description="this task's generation limit in training and evaluation; unset "
        "= the task's default (Task.max_new_tokens), at most rollout.max_new_tokens",
    )
    stop: list[str] | None = Field(
        None, description="this task's stop strings, besides rollout.stop; unset = the task's "
        "default (Task.stop)",
    )

    @model_validator(mode="after")
    def _a_task_that_exists(self) -> TaskSpec:
        if self.kind == "task":
            if self.reward:
                raise ValueError(f"task {self.name!r}: reward is for kind = 'generic' tasks")
            check_task_name(self.name)
            return self
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"generic task {self.name!r}: a name of letters, digits, _ . -")
        if not self.path or not self.reward:
            raise ValueError(f"generic task {self.name!r} needs path (its data) and reward "
                             "('module:function')")
        define_generic(self.name, prompt_field=self.prompt_field,
                       reference_field=self.reference_field, reward=self.reward,
                       max_new_tokens=self.max_new_tokens)
        return self


class Budget(NamedTuple):
    """How long one task's completions may be, and what else ends them."""

    max_new_tokens: int
    stop: tuple[str, ...]


def generation_budget(spec: TaskSpec, rollout: RolloutSection) -> Budget:
    """The generation budget of task `spec`: its `max_new_tokens` when set, else the task's
    default (`Task.max_new_tokens`) capped at `rollout.max_new_tokens`, else that limit; its
    stop strings are `rollout.stop` followed by the spec's (or the task's default `Task.stop`).
    A yes/no answer needs a few tokens, a kernel hundreds (issue Q item 2)."""
    from hargo_hpc.tasks.registry import task_class

    task = task_class(spec.name)
    if spec.max_new_tokens is not None:
        tokens = spec.max_new_tokens
    elif task.max_new_tokens is not None:
        tokens = min(task.max_new_tokens, rollout.max_new_tokens)
    else:
        tokens = rollout.max_new_tokens
    own = tuple(spec.stop) if spec.stop is not None else task.stop
    stop = tuple(dict.fromkeys((*rollout.stop, *own)))
    return Budget(tokens, stop)


def token_budgets(config: ExperimentConfig) -> dict[str, int]:
    """Each task's `generation_budget` in tokens, by name: where its completions stop, and
    where its SFT targets are cut (a target longer than a sampled completion may be teaches
    nothing the rollout can use)."""
    return {spec.name: generation_budget(spec, config.rollout).max_new_tokens
            for spec in config.data.tasks}


class DataSection(_Section):
    tasks: list[TaskSpec] = Field(default_factory=lambda: [TaskSpec(name="data_race_c")])
    eval_fraction: float = Field(0.1, ge=0, lt=1)
    split_seed: int | None = Field(
        None, description="the seed of the train/eval split; unset = run.seed (a seed sweep "
        "that should share its held-out examples, and so one baseline evaluation, sets it)",
    )
    prompt_format: Literal[PROMPT_FORMATS] = Field(  # type: ignore[valid-type]
        "auto", description="alpaca (HPC-GPT's), chat (the tokenizer's template), auto = chat "
        "when the tokenizer has one",
    )

    @model_validator(mode="after")
    def _some_task(self) -> DataSection:
        if not self.tasks:
            raise ValueError("at least one task is required")
        return self

    def eval_fractions(self) -> dict[str, float]:
        """Each task's held-out share: its own `eval_fraction`, else `data.eval_fraction`."""
        return {spec.name: self.eval_fraction if spec.eval_fraction is None
                else spec.eval_fraction for spec in self.tasks}

    def spec(self, name: str) -> TaskSpec:
        """The entry of task `name` (KeyError when the experiment has none)."""
        for spec in self.tasks:
            if spec.name == name:
                return spec
        raise KeyError(name)


class AlgorithmSection(_Section):
    """`name` picks a method preset; every other field left unset keeps the preset's value."""

    name: Literal[ALGORITHM_NAMES] = "grpo"  # type: ignore[valid-type]
    estimator: EstimatorName | None = None
    loss: PolicyLossName | None = Field(
        None, description="the policy loss (ppo, pg, or a registered or 'module:function' one "
        "of your own); methods whose loss is dpo or sft keep theirs")
    agg: Literal[AGG_MODES] | None = None  # type: ignore[valid-type]
    ratio_level: Literal[RATIO_LEVELS] | None = None  # type: ignore[valid-type]
    clip_low: float | None = Field(None, ge=0)
    clip_high: float | None = Field(None, ge=0)
    dual_clip: float | None = Field(None, gt=1)
    kl_coef: float | None = Field(None, ge=0)
    kl_estimator: Literal[KL_ESTIMATORS] | None = None  # type: ignore[valid-type]
    dynamic_sampling: bool | None = None
    refill_rounds: int | None = Field(
        None, ge=1, description="dynamic sampling: generation rounds a step may take to fill "
        "its batch with prompts_per_step informative groups (DAPO's refill; 1 = filter only; "
        "text tasks only)")
    overlong_buffer: int | None = Field(None, ge=0)
    overlong_penalty: float | None = Field(None, ge=0)
    dpo_beta: float = Field(0.1, gt=0)
    hargo: HargoParams = Field(default_factory=HargoParams)


class JobResources(_Section):
    partition: str = "cpu"
    nodes: int = Field(1, ge=1)
    ntasks_per_node: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_task: int = Field(1, ge=1)
    mem: str = Field("4G", pattern=r"^\d+[KMGT]?$")
    time: str = Field(
        "01:00:00", pattern=r"^(\d+-)?\d+(:\d{1,2}){0,2}$",
        description="Slurm time limit: [D-]HH:MM:SS, MM:SS or MM",
    )
    array_parallelism: int = Field(0, ge=0, description="0 = no limit")
    signal_lead_s: int = Field(
        120, ge=30, description="seconds before the time limit that the job is signalled to "
        "checkpoint and requeue: at least the time to write a checkpoint plus the longest "
        "phase of a step (docs/slurm.md, 'Time limits')",
    )
    max_requeues: int = Field(
        3, ge=0, description="how often a training or SFT task requeues itself after its time "
        "limit (each time from its latest checkpoint)",
    )
    gpu_memory_gib: float | None = Field(
        None, gt=0, description="memory of one GPU of the partition (e.g. 79 for an 80 GB "
        "H100): `hargo submit` refuses a training job whose estimated peak exceeds it "
        "(`hargo config check` prints the estimate); unset = not checked")
    account: str = ""
    qos: str = ""
    constraint: str = ""
    extra: list[str] = Field(default_factory=list, description="more '#SBATCH' options")


# Each job kind's defaults where they differ from JobResources'; a file (or an override) that
# sets some keys of [slurm.train] keeps these for the others.
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "train": {"partition": "gpu", "gpus_per_node": 1, "cpus_per_task": 2},
    "bench": {"partition": "cpu"},
    "eval": {"partition": "gpu", "gpus_per_node": 1},
}


class SlurmSection(_Section):
    setup: list[str] = Field(default_factory=list, description="shell lines run before each job")
    python: str = Field(
        "", description="the Python the jobs run (the project and submitit installed); '' = "
        "the interpreter running `hargo submit` / `hargo render`",
    )
    train: JobResources = Field(default_factory=lambda: JobResources(**KIND_DEFAULTS["train"]))
    bench: JobResources = Field(default_factory=lambda: JobResources(**KIND_DEFAULTS["bench"]))
    eval: JobResources = Field(default_factory=lambda: JobResources(**KIND_DEFAULTS["eval"]))

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, **{kind: {**defaults, **data[kind]}
                               for kind, defaults in KIND_DEFAULTS.items()
                               if isinstance(data.get(kind), dict)}}
        return data


DTYPE_OF_PRECISION = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class ExperimentConfig(_Section):
    run: RunSection = Field(default_factory=RunSection)
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    sft: SftSection = Field(default_factory=SftSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    rewards: RewardSettings = Field(default_factory=RewardSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    handoff: HandoffSettings = Field(default_factory=HandoffSettings)
    sqd: SqdSettings = Field(default_factory=SqdSettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    slurm: SlurmSection = Field(default_factory=SlurmSection)
    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="values per config key ('algorithm.name' = ['grpo', 'hargo']); hargo "
        "submit trains every combination (`expand_sweep`)",
    )

    @model_validator(mode="after")
    def _sharded_reference_needs_zero_3(self) -> ExperimentConfig:
        if self.model.reference_device == "sharded" and (
                self.training.zero_stage != 3 or self.training.deepspeed_config):
            raise ValueError("model.reference_device 'sharded' needs training.zero_stage 3 "
                             "(and no training.deepspeed_config file)")
        return self

    @model_validator(mode="after")
    def _precision_and_dtype_agree(self) -> ExperimentConfig:
        want = DTYPE_OF_PRECISION[self.training.precision]
        if not self.training.deepspeed_config and self.model.dtype != want:
            raise ValueError(
                f"training.precision {self.training.precision} needs model.dtype {want!r}, "
                f"not {self.model.dtype!r} (weights loaded in one precision and trained in "
                "another cost a second copy, or lose the master weights)")
        return self

    def split_seed(self) -> int:
        """The seed of the train/eval split: `data.split_seed`, else `run.seed`."""
        return self.run.seed if self.data.split_seed is None else self.data.split_seed

    def run_dir(self) -> Path:
        """The directory of this run: `<run.dir>/<run.name>`."""
        return Path(self.run.dir) / self.run.name

    def layout(self) -> RunLayout:
        """The run directory's paths (`runs.RunLayout`)."""
        return RunLayout(self.run_dir())

    def handoff_dir(self) -> Path:
        """Where trainer and bench workers meet: `handoff.dir`, or `<run dir>/handoff`."""
        return Path(self.handoff.dir) if self.handoff.dir else self.layout().handoff

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with unset optional fields (None) left out, as TOML needs; of
        `[algorithm.hargo]` only the keys the file set (they override the HARGO preset's
        params, `presets.hargo_overrides`, so a saved config resolves to the same method)."""
        out = self.model_dump(mode="json", exclude_none=True)
        out["algorithm"]["hargo"] = self.algorithm.hargo.model_dump(mode="json",
                                                                     exclude_unset=True)
        return out

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())


# ---------------------------------------------------------------- loading


def load_config(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> ExperimentConfig:
    """Read `path`, apply `section.key=value` overrides, validate; raise ConfigError."""
    source = str(path)
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{source}: no such experiment file")
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: malformed TOML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{source}: cannot read: {err}") from None
    for item in overrides:
        _apply_override(raw, item, source)
    return validate_config(raw, source)


# Keys an older job file may still use, and where they are now.
MOVED_KEYS = {"training.sft_steps": "sft.steps"}


def validate_config(raw: dict[str, Any], source: str = "<config>") -> ExperimentConfig:
    """Build an ExperimentConfig from plain data; raise ConfigError naming the first problem."""
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_one_line(err, source)) from None


def parse_value(text: str) -> Any:
    """An override value: a TOML value if it parses as one (1e-6, true, [1, 2]), else a string.
    A TOML date or time (`00:10:00`: a Slurm time limit) stays the string it was written as."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return text if isinstance(value, (datetime.date, datetime.time)) else value


def _apply_override(raw: dict[str, Any], item: str, source: str) -> None:
    """Set one `a.b.c=value` in the raw data; every key on the path must exist in the schema."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{source}: override {item!r} is not of the form section.key=value")
    parts = key.split(".")
    # `kind` is what the current node is in the schema: a section (a model class), a list of
    # sections ("list", with the item class), or a leaf.
    kind: Any = ExperimentConfig
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        here = ".".join(parts[:depth]) or "top level"
        if isinstance(kind, tuple):  # ("list", item model)
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"{source}: override {key}: {part!r} is not an index of {here} "
                    f"({len(node)} item(s) in the file)"
                )
            index, kind = int(part), kind[1]
            if last:
                node[index] = parse_value(text)
                return
            node = node[index]
            continue
        if kind == "leaf":
            raise ConfigError(f"{source}: override {key}: {here} has no sub-keys")
        fields = kind.model_fields
        if key in MOVED_KEYS:
            raise ConfigError(f"{source}: override {key}: {key!r} is now {MOVED_KEYS[key]!r}")
        if part not in fields:
            raise ConfigError(
                f"{source}: override {key}: unknown key {part!r} in {here} "
                f"(allowed: {', '.join(fields)})"
            )
        kind = _field_kind(fields[part].annotation)
        if last:
            node[part] = parse_value(text)
            return
        if isinstance(kind, tuple) and not isinstance(node.get(part), list):
            raise ConfigError(
                f"{source}: override {key}: {here}.{part} is not set in the file; "
                "items of a list can only be overridden where the file lists them"
            )
        node = node.setdefault(part, {} if not isinstance(kind, tuple) else [])
        if not isinstance(node, (dict, list)):
            raise ConfigError(f"{source}: override {key}: {part!r} has no sub-keys")


def _field_kind(annotation: Any) -> Any:
    """A field's kind for overrides: its section class, ("list", item class) or "leaf"."""
    model = _submodel(annotation)
    if model is not None:
        return model
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is list and args and _submodel(args[0]):
        return ("list", args[0])
    return "leaf"


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field (a section), or None for leaves, dicts and lists."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    field = ".".join(loc) or "top level"
    more = len(err.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if first["type"] == "extra_forbidden":
        if field in MOVED_KEYS:
            return f"{source}: {field!r} is now {MOVED_KEYS[field]!r}{suffix}"
        allowed = _allowed_keys(first["loc"][:-1])
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{source}: unknown key {field!r}{hint}{suffix}"
    if first["type"] == "missing":
        return f"{source}: {field}: missing (required){suffix}"
    value = first.get("input")
    if first["type"] == "value_error" and isinstance(value, dict):  # a rule across keys
        message = first["msg"].removeprefix("Value error, ")
        where = f"{field}: " if loc else ""
        return f"{source}: {where}{message}{suffix}"
    return f"{source}: {field}: bad value {value!r}: {first['msg']}{suffix}"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] | None = ExperimentConfig
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        model = _submodel(annotation) or next((a for a in args if _submodel(a)), None)
    return list(model.model_fields) if model else []


# ---------------------------------------------------------------- sweeps


class SweepPoint(NamedTuple):
    """One run of a sweep: its label, its config, and the swept keys' values as written."""

    label: str
    config: ExperimentConfig
    values: dict[str, Any]


def expand_sweep(config: ExperimentConfig, source: str = "<config>") -> list[SweepPoint]:
    """The runs of a `[sweep]`: one SweepPoint per point of the cartesian product of its
    value lists, in the order the keys and values are written (the last key varies fastest).

    Each point's config is `config` with the point's values set and no sweep; its label (e.g.
    `name-grpo_seed-1`: the last part of each key and its value) names its run directory
    inside the experiment's. No sweep: one point, label "", no values. ConfigError (one line)
    for a key that is not a config key, an empty list, or a value the field refuses.
    """
    if not config.sweep:
        return [SweepPoint("", config, {})]
    keys = list(config.sweep)
    for key in keys:
        if key == "sweep" or key.startswith("sweep."):
            raise ConfigError(f"{source}: sweep key {key!r}: a sweep cannot sweep itself")
        if not config.sweep[key]:
            raise ConfigError(f"{source}: sweep key {key!r}: no values")
    base = config.to_dict()
    base.pop("sweep", None)
    points: list[SweepPoint] = []
    for values in itertools.product(*(config.sweep[key] for key in keys)):
        raw = copy.deepcopy(base)
        for key, value in zip(keys, values, strict=True):
            _set_key(raw, key, value, f"{source}: sweep")
        label = sweep_label(dict(zip(keys, values, strict=True)))
        points.append(SweepPoint(label, validate_config(raw, f"{source} (sweep point {label})"),
                                 dict(zip(keys, values, strict=True))))
    labels = [point.label for point in points]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{source}: sweep: two points have the same label; give the values "
                          "distinct names")
    return points


def sweep_label(values: dict[str, Any]) -> str:
    """A sweep point's label: `<last part of each key>-<value>`, joined by `_`."""
    return "_".join(f"{key.rsplit('.', 1)[-1]}-{_slug(value)}" for key, value in values.items())


def _slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9.]+", ".", str(value)).strip(".")
    return text[:40] or "x"


def _set_key(raw: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set `key` (a dotted config key) to `value` in the raw data, as an override does."""
    _apply_override(raw, f"{key}={tomli_w.dumps({'v': value})[4:].strip()}", source)


# ---------------------------------------------------------------- saving


def save_resolved(config: ExperimentConfig, run_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write the resolved config as TOML into the run directory (atomically); return its path."""
    directory = Path(run_dir) if run_dir is not None else config.run_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / RESOLVED_NAME
    write_atomic(target, config.to_toml())
    return target
