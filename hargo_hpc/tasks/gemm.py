"""The GEMM code task: the model writes a C DGEMM kernel, the bench compiles, verifies and times
it on a CPU node, and the bench's record is the reward.

Problems come from a JSON list of ``{"name", "M", "N", "K", "description"}`` (the shipped
`samples/gemm_problems.json`: the paper's 256³ and four other shapes). Each problem is one
`Example` whose prompt states the kernel contract the bench enforces (`bench/validate.py`,
docs/bench.md), the problem's sizes and, for an SQD stage, the permitted and forbidden
techniques (`prompt_for`; `staged`, `problem_key`: the SQD stage is per problem). The reward is
remote: `request` builds the handoff request (`bench.contract.BenchRequest`),
`reward_from_record` reads the bench's record back (`bench.reward.record_reward`), `metrics`
summarises records. Its SFT pairs come from the kernel corpus (`sft_corpus`).

Light: only the bench's text-level modules (contract, extract, reward, techniques, validate,
status) are imported.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from hargo_hpc.bench.contract import BenchRequest
from hargo_hpc.bench.extract import extract_code
from hargo_hpc.bench.reward import record_reward
from hargo_hpc.bench.status import STATUSES, UNSCORED
from hargo_hpc.bench.techniques import TECHNIQUES, normalise_forbidden
from hargo_hpc.bench.validate import SIGNATURE
from hargo_hpc.tasks.base import DataError, Example, Task

MAX_SIZE = 1 << 14  # the bench's bound on each dimension (bench.result.Problem.from_dict)
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
FIELDS = ("name", "M", "N", "K", "description")
REQUIRED = ("name", "M", "N", "K")
FAST_P = (0.25, 0.5, 1.0)  # fast_p thresholds: speed as a multiple of the in-run reference
# what each technique name means, in the prompt (names: bench.techniques.TECHNIQUES)
TECHNIQUE_TEXT = {
    "openmp": "OpenMP threads",
    "simd": "SIMD: intrinsics, #pragma omp simd or vector types",
    "blocking": "cache or register blocking",
    "unrolling": "loop unrolling",
}
CONTRACT = (
    "Write a C function that computes the double-precision matrix product C = A * B.\n"
    f"Signature: {SIGNATURE}\n"
    "- A is M x K, B is K x N, C is M x N, all row-major: A[i*K + k], B[k*N + j], C[i*N + j].\n"
    "- Overwrite every element of C (its contents on entry are garbage); do not modify A or B.\n"
    "- It must be correct for any M, N, K >= 1: it is also checked at other sizes.\n"
    "- Plain C, built with gcc -O3 -march=native -fopenmp. No main, no BLAS or other "
    "libraries; only standard headers such as <stdlib.h>, <string.h>, <math.h>, <omp.h>, "
    "<immintrin.h>."
)


def _techniques_text(names: Sequence[str]) -> str:
    return ", ".join(f"{t} ({TECHNIQUE_TEXT[t]})" for t in names) if names else "none"


def render_prompt(
    problem: Mapping[str, Any],
    permitted: Sequence[str] | None = None,
    forbidden: Sequence[str] | None = None,
) -> str:
    """The prompt of one problem ({name, M, N, K}), with an SQD stage's technique rules.

    `permitted` / `forbidden`: technique names or aliases (`bench.techniques.ALIASES`); None
    leaves the line out, an empty permitted list says "none". ValueError for an unknown name or
    one both permitted and forbidden.
    """
    allowed = normalise_forbidden(list(permitted)) if permitted is not None else None
    banned = normalise_forbidden(list(forbidden)) if forbidden is not None else None
    both = sorted(set(allowed or ()) & set(banned or ()))
    if both:
        raise ValueError(f"technique(s) both permitted and forbidden: {', '.join(both)}")
    m, n, k = problem["M"], problem["N"], problem["K"]
    lines = [CONTRACT, "", f"Problem {problem['name']}: M = {m}, N = {n}, K = {k}.",
             "The reward is the measured speed in GFLOPS: make it fast."]  # fmt: skip
    if allowed is not None:
        lines.append(f"Permitted techniques: {_techniques_text(allowed)}.")
    if banned:
        lines.append(f"Forbidden techniques: {_techniques_text(banned)}; code that uses them "
                     "is rejected.")  # fmt: skip
    lines.append("Reply with the complete code in one ```c code block.")
    return "\n".join(lines)


def _number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _size(record: Mapping[str, Any], key: str, where: str) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise DataError(f"{where}: {key} must be an integer from 1 to {MAX_SIZE}, got {value!r}")
    return value


def parse_problem(record: Any, index: int, source: str = "gemm problems") -> dict[str, Any]:
    """The problem of one record ({name, M, N, K, description?}), validated; DataError (one
    line naming `source` and the record index) for anything else."""
    where = f"{source}: record {index}"
    if not isinstance(record, Mapping):
        raise DataError(f"{where}: expected an object with {', '.join(REQUIRED)}, "
                        f"got {type(record).__name__}")  # fmt: skip
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise DataError(f"{where}: missing {', '.join(missing)}")
    unknown = sorted(str(key) for key in record if key not in FIELDS)
    if unknown:
        raise DataError(f"{where}: unknown field(s) {', '.join(unknown)} "
                        f"(a problem has {', '.join(FIELDS)})")  # fmt: skip
    name = record["name"]
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise DataError(f"{where}: name must be 1-64 of [A-Za-z0-9_.-], got {name!r}")
    description = record.get("description", "")
    if not isinstance(description, str):
        raise DataError(f"{where}: description must be a string, got {description!r}")
    sizes = {key: _size(record, key, where) for key in ("M", "N", "K")}
    return {"name": name, **sizes, "description": description}


def sample_path() -> Path:
    """The shipped problem file (hargo_hpc/tasks/samples/gemm_problems.json)."""
    return Path(str(resources.files("hargo_hpc.tasks").joinpath("samples", Gemm.sample)))


class Gemm(Task):
    """DGEMM code generation, rewarded by the bench (remote)."""

    name = "gemm"
    sample = "gemm_problems.json"
    remote = True
    staged = True
    sft_corpus = "hargo_hpc.tasks.corpus:sft_examples"
    headline = ("ok_share", "reward_mean", "fast_0.5", "log2_ratio_mean", "gflops_max")
    points = ("gflops_max", "ratio_max")
    lower_better = ("forbidden_share",)  # a stage's forbidden technique, used anyway
    form = ("compiled_share", "ok_share")  # a kernel that compiles (and passes)
    eval_samples = 4  # sampled kernels per held-out problem (a greedy one says little)

    @classmethod
    def load_problems(cls, path: str | Path | None = None) -> list[Example]:
        """The examples of a problem file (None: the shipped sample): a JSON list of
        {"name", "M", "N", "K", "description"}, names unique. DataError (one line naming the
        file, and the record index where there is one) for a file that cannot be read, is not
        JSON, is not a non-empty list, or holds a bad record."""
        path = Path(path) if path is not None else sample_path()
        try:
            records = json.loads(path.read_bytes())
        except OSError as err:
            raise DataError(f"{path}: cannot read: {err.strerror or err}") from None
        except (UnicodeDecodeError, ValueError) as err:
            raise DataError(f"{path}: not valid JSON: {str(err).splitlines()[0]}") from None
        if not isinstance(records, list) or not records:
            raise DataError(f"{path}: expected a non-empty JSON list of problems")
        task, examples, seen = cls(), [], {}
        for index, record in enumerate(records):
            problem = parse_problem(record, index, str(path))
            if problem["name"] in seen:
                raise DataError(f"{path}: record {index}: duplicate name {problem['name']!r} "
                                f"(also record {seen[problem['name']]})")  # fmt: skip
            seen[problem["name"]] = index
            examples.append(task._example(problem))
        return examples

    def from_record(self, record: Mapping[str, Any], index: int) -> Example:
        """The example of one problem record (validated here: DataError for a bad one)."""
        return self._example(parse_problem(record, index))

    def _example(self, problem: dict[str, Any]) -> Example:
        bench_problem = {key: problem[key] for key in ("name", "M", "N", "K")}
        return Example(
            task=self.name, id=f"gemm:{problem['name']}", instruction=render_prompt(problem),
            input="", output="",
            meta={"problem": bench_problem, "description": problem["description"]},
        )  # fmt: skip

    def prompt_for(
        self,
        example: Example,
        permitted: Sequence[str] | None = None,
        forbidden: Sequence[str] | None = None,
    ) -> str:
        """The user text of `example` at an SQD stage that permits and forbids these techniques
        (`render_prompt`); with neither, the same as `user_text`."""
        return render_prompt(example.meta["problem"], permitted, forbidden)

    def problem_key(self, example: Example) -> str:
        """The problem's name: SQD keeps one stage per problem."""
        return str(example.meta["problem"]["name"])

    def extract(self, completion: str) -> str:
        """The code the bench would compile (`bench.extract.extract_code`); '' when none."""
        found = extract_code(completion) if isinstance(completion, str) else None
        return found.code if found is not None else ""

    def request(self, example: Example, completion: str, *, stage: int | None = None,
                forbidden: Sequence[str] | None = None) -> dict[str, Any]:
        """The payload of the `gemm` request: a `bench.contract.BenchRequest` but its id (the
        bench's `gemm_workload` adds it back): the raw completion, the example's problem
        ({name, M, N, K}: `bench.result.Problem.from_dict`), the SQD stage and its forbidden
        techniques (canonical names; ValueError for an unknown one), where given."""
        return BenchRequest(
            id="", completion=completion, problem=dict(example.meta["problem"]), stage=stage,
            forbidden=normalise_forbidden(list(forbidden)) if forbidden is not None else None,
        ).model_dump(exclude={"id"}, exclude_none=True)

    def reward_from_record(self, record: Mapping[str, Any]) -> float | None:
        """The record's reward as `bench.reward.record_reward` decides it: its `reward`; None
        when it is not a reward (infra_error: the handoff delivers it with `scored: false`;
        `scored` false; no finite number)."""
        return record_reward(record)

    def metrics(
        self, examples: Sequence[Example], predictions: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Metrics over bench result records (not text: GEMM's predictions are the records the
        bench returned for the completions, one per example, in order).

        n: records; scored: records that are not infra_error; ok_share = ok / scored (None when
        nothing was scored); compiled_share = (scored − format_violation − compile_error) /
        scored, the kernels that got past extraction, validation and the compiler (the form a
        warm start must teach); gflops_mean, gflops_max: mean and max of the median GFLOPS
        (`gflops.median`) of ok runs that are not `suspicious`; ratio_mean: mean of their
        `ratio` (the speed over the in-run reference, median of per-pair ratios: bench.reward);
        fast_p for p in `FAST_P` (KernelBench's fast_p, per kernel): the share of the scored
        kernels that are ok, not suspicious, and at least p times the reference's speed
        (ratio >= p); log2_ratio_mean: the mean of log2(ratio) over the ok, not suspicious
        kernels (the geometric-mean speed against the reference, in doublings: -1 is half its
        speed); the maxima are points (`points`: no interval);
        reward_mean: mean reward of the scored records; suspicious: ok runs flagged so;
        statuses: count of every status in bench.status.STATUSES (zeros included); techniques /
        techniques_ok: count of records (all / ok) whose `techniques` list each technique.
        Under an SQD stage (records whose request forbade techniques, `forbidden`), also
        forbidden_share: the scored kernels that use a forbidden technique, whatever their
        status; on_stage_share: the scored kernels that are ok, not suspicious and not off
        their stage (`off_stage`). DataError for a record that is not an object with a known
        status.
        """
        if len(examples) != len(predictions):
            raise DataError(f"gemm metrics: {len(predictions)} records for "
                            f"{len(examples)} examples")  # fmt: skip
        statuses = dict.fromkeys(STATUSES, 0)
        techniques = dict.fromkeys(TECHNIQUES, 0)
        techniques_ok = dict.fromkeys(TECHNIQUES, 0)
        gflops, ratios, rewards, suspicious = [], [], [], 0
        staged = uses_forbidden = on_stage = 0
        for index, record in enumerate(predictions):
            status = record.get("status") if isinstance(record, Mapping) else None
            if status not in statuses:
                raise DataError(f"gemm metrics: record {index}: expected a bench record with a "
                                f"status in {', '.join(STATUSES)}, got {status!r}")  # fmt: skip
            statuses[status] += 1
            listed = record.get("techniques")
            used = set(listed) if isinstance(listed, list | tuple) else set()
            for t in TECHNIQUES:
                techniques[t] += t in used
                techniques_ok[t] += status == "ok" and t in used
            reward = self.reward_from_record(record)
            if reward is not None:
                rewards.append(reward)
            forbidden = record.get("forbidden")
            if isinstance(forbidden, list | tuple) and forbidden:
                staged += 1
                uses_forbidden += status not in UNSCORED and bool(used & set(forbidden))
            if status != "ok":
                continue
            if record.get("suspicious"):
                suspicious += 1
                continue
            on_stage += not record.get("off_stage")
            speeds = record.get("gflops")
            median = speeds.get("median") if isinstance(speeds, Mapping) else None
            if _number(median):
                gflops.append(float(median))
            if _number(record.get("ratio")) and record["ratio"] > 0:
                ratios.append(float(record["ratio"]))
        scored = len(predictions) - sum(statuses[s] for s in UNSCORED)
        stage = {"forbidden_share": uses_forbidden / scored if scored else None,
                 "on_stage_share": on_stage / scored if scored else None} if staged else {}
        return {
            "n": len(predictions),
            "scored": scored,
            "ok_share": statuses["ok"] / scored if scored else None,
            "compiled_share": (scored - statuses["format_violation"]
                               - statuses["compile_error"]) / scored if scored else None,
            "gflops_mean": sum(gflops) / len(gflops) if gflops else None,
            "gflops_max": max(gflops) if gflops else None,
            "ratio_mean": sum(ratios) / len(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            **{f"fast_{p:g}": sum(1 for q in ratios if q >= p) / scored if scored else None
               for p in FAST_P},
            "log2_ratio_mean": (sum(math.log2(q) for q in ratios) / len(ratios)
                                if ratios else None),
            "reward_mean": sum(rewards) / len(rewards) if rewards else None,
            "suspicious": suspicious,
            "statuses": statuses,
            "techniques": techniques,
            "techniques_ok": techniques_ok,
            **stage,
        }
