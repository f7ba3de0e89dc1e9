"""Staged Quality-Diversity (SQD) for GEMM code: per problem, stages that vary which
optimisation techniques the prompt permits (`SqdSettings.stages`), the rule that moves a
problem to its next stage (`step_problem`), and an archive of the best kernel for each kind of
solution, which feeds the reward (`Sqd.bonuses`). SQD decides; it never runs code (the bench
judges, and its records come back here). `Sqd.state_dict` holds it all for the trainer's
checkpoint; `save` writes `<run dir>/sqd/`. The choices and their reasons: docs/sqd.md.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hargo_hpc.bench.techniques import TECHNIQUES, normalise_forbidden
from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic

STATE, BACKUP, RESULTS = "state.json", "state.json.bak", "results.jsonl"
FORMAT = 1


class SqdError(HargoError, ValueError):
    """A bad schedule or a state file that cannot be read (one line)."""


class StageSpec(BaseModel):
    """One stage: the techniques its prompts forbid and (optionally) require."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    forbid: list[str] = Field(default_factory=list)
    require: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_and_consistent(self) -> StageSpec:
        try:
            self.forbid = normalise_forbidden(self.forbid)
            self.require = normalise_forbidden(self.require)
        except ValueError as err:
            raise ValueError(f"stage {self.name!r}: {err}") from None
        both = sorted(set(self.forbid) & set(self.require))
        if both:
            raise ValueError(f"stage {self.name!r}: {', '.join(both)} both required and "
                             "forbidden")
        return self

    @property
    def permitted(self) -> list[str]:
        return [t for t in TECHNIQUES if t not in self.forbid]

    @property
    def open(self) -> bool:
        """Nothing forbidden or required: its prompt is the plain prompt."""
        return not self.forbid and not self.require


def default_stages() -> list[StageSpec]:
    """open (the plain prompt), then without explicit vectors, then without tiles: the same
    problem asked three ways (no `no_openmp` stage: docs/sqd.md, "Stages", says why)."""
    return [StageSpec(name="open"), StageSpec(name="no_simd", forbid=["simd"]),
            StageSpec(name="no_blocking", forbid=["blocking"])]


class SqdSettings(BaseModel):
    """The `[sqd]` section (owned here; `hargo_hpc.config` composes it)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="off: the plain GFLOPS-reward experiment")
    stages: list[StageSpec] = Field(default_factory=default_stages, min_length=1)
    patience: int = Field(2, ge=1, description="steps without improvement before advancing")
    min_improvement: float = Field(
        0.05, ge=0, description="relative GFLOPS gain that counts as an improvement")
    max_steps: int = Field(2, ge=1, description="steps of a problem in one stage at most")
    after_last: Literal["hold", "cycle"] = "cycle"
    start: Literal["spread", "first"] = Field(
        "spread", description="spread: the i-th problem (in name order) starts at stage i mod "
        "the number of stages, so every batch mixes stages; first: every problem at stage 0")
    bonus: float = Field(
        10.0, ge=0, description="reward added to an on-stage ok kernel that fills an empty "
        "(problem, technique set) cell of the archive or beats its best GFLOPS by bonus_margin "
        "(0 = off)")
    bonus_margin: float = Field(0.05, ge=0, description="relative gain over a cell's best "
                                "GFLOPS that earns the bonus")
    novelty: float = Field(
        5.0, ge=0, description="count-based novelty: novelty / sqrt(1 + n) for an on-stage ok "
        "kernel, n the on-stage ok kernels its cell had before the step (0 = off)")

    @model_validator(mode="after")
    def _distinct_names(self) -> SqdSettings:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names repeat: {', '.join(names)}")
        return self


# ---------------------------------------------------------------- per-problem state


@dataclass
class ProblemState:
    """Where one problem is: its stage, the advancement counters, the stage history."""

    stage: int = 0
    seen: int = 0  # steps of this stage in which the problem was prompted
    mark: float = 0.0  # best GFLOPS at the stage's last significant improvement
    best: float = 0.0  # best GFLOPS in this stage
    stale: int = 0  # steps since the last significant improvement
    cycles: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # {step, stage, why}
    visits: dict[str, int] = field(default_factory=dict)  # steps prompted, by stage name


def step_problem(state: ProblemState, gflops: Sequence[float], step: int,
                 settings: SqdSettings) -> str:
    """Fold one step's ok GFLOPS of a problem into its state; returns why it moved to another
    stage, or "" when it stayed. With g the best of `gflops` and m the mark (the best GFLOPS
    at the stage's last significant improvement, 0 on entering it):

        improved  <=>  g >= m (1 + min_improvement)  and  g > 0     (then m := g, stale := 0)
        else, once m > 0, stale += 1
        advance   <=>  stale >= patience   or   steps seen in the stage >= max_steps

    A stage with no ok kernel yet (m = 0) does not plateau; only max_steps moves it on. After
    the last stage, `after_last` "cycle" goes back to the first, "hold" stays."""
    last = len(settings.stages) - 1
    if state.stage == last and settings.after_last == "hold":
        state.best = max([state.best, *gflops])
        return ""
    state.seen += 1
    g = max(gflops, default=0.0)
    state.best = max(state.best, g)
    if g > 0 and g >= state.mark * (1 + settings.min_improvement):
        state.mark, state.stale = g, 0
    elif state.mark > 0:  # a plateau of a best it has; a stage not solved yet has none
        state.stale += 1
    if state.stale >= settings.patience:
        why = f"no {settings.min_improvement:.0%} gain in {settings.patience} steps"
    elif state.seen >= settings.max_steps:
        why = f"{settings.max_steps} steps in the stage"
    else:
        return ""
    if state.stage == last:  # cycle
        state.stage, state.cycles = 0, state.cycles + 1
    else:
        state.stage += 1
    state.seen, state.mark, state.best, state.stale = 0, 0.0, 0.0, 0
    state.history.append({"step": step, "stage": state.stage, "why": why})
    return why


# ---------------------------------------------------------------- the archive


@dataclass
class ArchiveEntry:
    problem: str
    techniques: list[str]
    gflops: float
    ratio: float | None
    code: str
    step: int
    stage: str
    request_id: str


def archive_key(problem: str, techniques: Sequence[str]) -> str:
    """`problem|openmp+simd` (techniques in TECHNIQUES' order; `none` for none)."""
    ordered = [t for t in TECHNIQUES if t in techniques]
    return f"{problem}|{'+'.join(ordered) or 'none'}"


@dataclass
class Result:
    """One bench result of a GEMM completion, as SQD sees it."""

    problem: str
    code: str
    record: Mapping[str, Any]
    stage: str = ""  # the stage its prompt had ("" = the problem's stage when observed)

    @property
    def gflops(self) -> float:
        """The record's median GFLOPS (0.0 when it has none)."""
        return float((self.record.get("gflops") or {}).get("median") or 0.0)

    @property
    def cell(self) -> str:
        """Its archive key: the problem and the record's technique set (`archive_key`)."""
        return archive_key(self.problem, self.record.get("techniques") or ())


# ---------------------------------------------------------------- SQD


class Sqd:
    """Stages, advancement and the archive for a set of problems (module docstring)."""

    def __init__(self, settings: SqdSettings, problems: Sequence[str]) -> None:
        self.settings = settings
        count = len(settings.stages)
        spread = settings.start == "spread"
        self.problems = {name: ProblemState(stage=i % count if spread else 0)
                         for i, name in enumerate(sorted(problems))}  # fmt: skip
        self.archive: dict[str, ArchiveEntry] = {}
        self.counts: dict[str, int] = {}  # on-stage ok kernels seen per archive cell
        self.last_bonus = 0.0  # the mean bonus of the last step's results (metrics)

    def stage_of(self, problem: str) -> StageSpec:
        return self.settings.stages[self.problems[problem].stage]

    def required_miss(self, problem: str, record: Mapping[str, Any], stage: str = "") -> list[str]:
        """The techniques that `stage` (a stage name; "" = the problem's stage now) requires
        and an ok record's code lacks."""
        spec = (next(s for s in self.settings.stages if s.name == stage) if stage
                else self.stage_of(problem))
        found = set(record.get("techniques") or ())
        return [t for t in spec.require if t not in found]

    def on_stage(self, result: Result) -> bool:
        """An ok, not suspicious kernel that kept its prompt's stage (nothing forbidden used,
        every required technique in it): what counts for progress, the archive and bonuses."""
        record = result.record
        if record.get("status") != "ok" or record.get("suspicious") or record.get("off_stage"):
            return False
        return not self.required_miss(result.problem, record, result.stage)

    def bonuses(self, results: Sequence[Result]) -> list[float]:
        """The archive's part of each result's reward, against the archive and the counts as
        they stand before the step (the trainer adds it to the bench's reward):

            b = B · [cell empty  or  g >= best_cell · (1 + margin)]  +  N / sqrt(1 + n_cell)

        for an on-stage ok kernel (`on_stage`) with median GFLOPS g > 0, cell = (problem, its
        technique set), B = `bonus`, N = `novelty`, n_cell the on-stage ok kernels the cell had
        before; 0 for anything else, so no failure is ever paid. The first term is the
        MAP-Elites insertion rule (Mouret & Clune 2015, "Illuminating search spaces by mapping
        elites") as a reward; the second a count-based exploration bonus in 1/sqrt(n) (Strehl
        & Littman 2008, MBIE-EB). Bounded by B + N."""
        s = self.settings
        out = []
        for result in results:
            result.stage = result.stage or self.stage_of(result.problem).name
            g = result.gflops
            if not self.on_stage(result) or g <= 0:
                out.append(0.0)
                continue
            best = self.archive.get(result.cell)
            elite = best is None or g >= best.gflops * (1 + s.bonus_margin)
            out.append(s.bonus * elite
                       + s.novelty / math.sqrt(1 + self.counts.get(result.cell, 0)))
        self.last_bonus = sum(out) / len(out) if out else 0.0
        return out

    def observe(self, step: int, results: Sequence[Result]) -> list[str]:
        """Fold one step's results in: the archive, then each prompted problem's stage.
        Returns one line per stage change. A result whose prompt had another stage than the
        problem's now (generated before a stage change, rollout.max_staleness 1) goes to the
        archive but not into the new stage's plateau count."""
        by_problem: dict[str, list[float]] = {}
        visited: set[tuple[str, str]] = set()
        for result in results:
            now = self.stage_of(result.problem).name
            result.stage = result.stage or now
            visited.add((result.problem, result.stage))
            if result.stage == now:
                by_problem.setdefault(result.problem, [])
            if not self.on_stage(result):
                continue  # failed, suspicious, or ok but off its stage: no progress, no elite
            if result.stage == now:
                by_problem[result.problem].append(result.gflops)
            self._archive(step, result)
            self.counts[result.cell] = self.counts.get(result.cell, 0) + 1
        for problem, stage in visited:
            visits = self.problems[problem].visits
            visits[stage] = visits.get(stage, 0) + 1
        changes = []
        for problem, values in by_problem.items():
            before = self.stage_of(problem).name
            why = step_problem(self.problems[problem], values, step, self.settings)
            if why:
                changes.append(f"sqd: {problem}: {before} -> {self.stage_of(problem).name} "
                               f"({why})")
        return changes

    def _archive(self, step: int, result: Result) -> None:
        record, gflops = result.record, result.gflops
        techniques = list(record.get("techniques") or ())
        old = self.archive.get(result.cell)
        if old is None or gflops > old.gflops:
            ratio = record.get("ratio")
            self.archive[result.cell] = ArchiveEntry(
                result.problem, [t for t in TECHNIQUES if t in techniques], gflops,
                None if ratio is None else float(ratio), result.code, step,
                result.stage or self.stage_of(result.problem).name,
                str(record.get("request_id", "")))

    def metrics(self) -> dict[str, float]:
        """For the step's metrics line: the mean stage index, the archive's size."""
        stages = [p.stage for p in self.problems.values()]
        return {"sqd/stage_mean": sum(stages) / len(stages) if stages else 0.0,
                "sqd/archive_size": float(len(self.archive)),
                "sqd/bonus_mean": self.last_bonus}

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "stages": [s.name for s in self.settings.stages],
                "problems": {name: asdict(p) for name, p in self.problems.items()},
                "archive": {key: asdict(e) for key, e in self.archive.items()},
                "counts": dict(self.counts)}

    def load_state_dict(self, state: Mapping[str, Any], where: str = "SQD state") -> None:
        """Restore `state_dict`'s output; SqdError (one line) for another schedule or a state
        that does not parse."""
        names = [s.name for s in self.settings.stages]
        if state.get("format") != FORMAT or state.get("stages") != names:
            raise SqdError(f"{where}: written for stages {state.get('stages')}, this run has "
                           f"{names}")
        try:
            problems = {n: ProblemState(**p) for n, p in state["problems"].items()}
            archive = {k: ArchiveEntry(**e) for k, e in state["archive"].items()}
            counts = {str(k): int(v) for k, v in (state.get("counts") or {}).items()}
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise SqdError(f"{where}: not an SQD state ({err})") from None
        for name in self.problems:
            if name in problems:
                self.problems[name] = problems[name]
        self.archive, self.counts = archive, counts

    def save(self, directory: Path, step: int, results: Sequence[Result]) -> Path:
        """`state.json` (the previous one kept as `state.json.bak`) and the step's results
        appended to `results.jsonl` (one line each: step, problem, stage, status, GFLOPS,
        ratio, reward, techniques)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / STATE
        if path.exists():
            os.replace(path, directory / BACKUP)
        write_atomic(path, json.dumps(self.state_dict(), indent=1) + "\n")
        lines = []
        for result in results:
            r = result.record
            lines.append(json.dumps({
                "step": step, "problem": result.problem,
                "stage": result.stage or self.stage_of(result.problem).name,
                "status": r.get("status"),
                "gflops": (r.get("gflops") or {}).get("median"), "ratio": r.get("ratio"),
                "reward": r.get("reward"), "techniques": r.get("techniques") or []}))
        with open(directory / RESULTS, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
        return path


def load_state_file(path: Path) -> dict[str, Any]:
    """A saved state; SqdError naming the file and offering the backup when it is corrupt."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        backup = path.with_name(BACKUP)
        offer = f"; the previous version is {backup}" if backup.exists() else ""
        raise SqdError(f"{path}: cannot read the SQD state ({err}){offer}") from None
