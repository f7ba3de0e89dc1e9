"""95 % intervals for evaluation metrics, by the bootstrap over examples (pure; numpy, scipy).

Every metric the evaluation reports is a function of the examples it was computed on: HPC-GPT's
data-race F1 of (label, prediction) pairs, a mean token F1, a share of answers over 40
characters, WinRate's mean outcome. Its interval comes from resampling those examples:

    B resamples of n example indices drawn with replacement (seeded); the metric on each;
    the interval is the bias-corrected and accelerated (BCa) one of the B values (Efron 1987,
    "Better Bootstrap Confidence Intervals": the percentiles moved by the bootstrap
    distribution's median bias z0 and the jackknife's acceleration a; `scipy.stats.bootstrap`,
    method "BCa", B = `RESAMPLES`), which holds its coverage better than plain percentiles at
    small n (12 GEMM shapes) and for skewed metrics; where BCa is not defined (every
    jackknife value equal, so no acceleration), the (2.5 %, 97.5 %) percentiles of the B
    values

A **paired** comparison of two systems answered on the same examples resamples the same indices
for both and takes the difference on each resample, so what the examples share (an easy
question is easy for both) cancels: `paired_difference`. "Better" means that this interval
excludes 0 (`Interval.excludes_zero`), whatever the point values say.

A metric is given as a function of an index array (`Metric`), which may repeat indices; the
evaluation builds them from a task's own metrics over the examples at those indices
(`eval.evaluate`), so the definitions live in one place (the tasks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RESAMPLES = 1000
CONFIDENCE = 0.95
Metric = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class Interval:
    """A metric's value on all n examples and its bootstrap interval [low, high]."""

    value: float
    low: float
    high: float
    n: int

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or below 0 (a significant difference)."""
        return self.low > 0 or self.high < 0

    def text(self, spec: str = ".3f") -> str:
        """`0.575 [0.430, 0.710] (n=40)`."""
        return (f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}] "
                f"(n={self.n})")  # fmt: skip

    def change_text(self, spec: str = "+.3f") -> str:
        """A difference: `+0.025 [-0.175, +0.225]`, then ` *` when the interval excludes 0;
        the value alone when there is no interval (NaN bounds)."""
        if math.isnan(self.low) or math.isnan(self.high):
            return f"{self.value:{spec}}"
        mark = " *" if self.excludes_zero() else ""
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]{mark}"

    def to_json(self) -> dict[str, Any]:
        """Plain data; a bound that is not finite (no interval) is null."""
        return {"value": _finite_or_none(self.value), "low": _finite_or_none(self.low),
                "high": _finite_or_none(self.high), "n": self.n}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Interval:
        return cls(*(math.nan if data.get(k) is None else float(data[k])
                     for k in ("value", "low", "high")), int(data.get("n") or 0))


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def bootstrap(metric: Metric, n: int, *, seed: int = 0, resamples: int = RESAMPLES,
              confidence: float = CONFIDENCE) -> Interval:
    """The metric on all `n` examples and its BCa bootstrap interval, percentile where BCa
    is not defined (module docstring). Fewer than 2 examples give NaN bounds (nothing to
    resample); a metric that is the same on every resample gives a zero-width interval."""
    import warnings

    from scipy import stats

    everything = np.arange(n)
    value = float(metric(everything))
    if n < 2:
        return Interval(value, math.nan, math.nan, n)
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # a metric equal on every resample is a fine answer
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # BCa's 0/0 there: the fallback
            result = stats.bootstrap(
                (everything,), lambda idx: float(metric(idx.astype(int))), vectorized=False,
                n_resamples=resamples, confidence_level=confidence, method=method,
                random_state=np.random.default_rng(seed),
            )
        low, high = (float(bound) for bound in result.confidence_interval)
        if math.isfinite(low) and math.isfinite(high):
            break
    return Interval(value, low, high, n)


def paired_difference(before: Metric, after: Metric, n: int, *, seed: int = 0,
                      resamples: int = RESAMPLES) -> Interval:
    """after − before on the same `n` examples, each resample taking the same indices for
    both (module docstring)."""
    return bootstrap(lambda idx: after(idx) - before(idx), n, seed=seed, resamples=resamples)


def mean_metric(values: Sequence[float]) -> Metric:
    """The mean of per-example values, as a Metric."""
    array = np.asarray(values, dtype=float)
    return lambda idx: float(array[idx].mean()) if len(idx) else 0.0


OUTCOME_VALUE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def winrate_metric(outcomes: Sequence[str]) -> Metric:
    """WinRate = (wins + ties / 2) / n as the mean of per-pair values 1, ½, 0 (tasks.winrate);
    its interval against 0.5 is the paired comparison of the two systems."""
    return mean_metric([OUTCOME_VALUE[o] for o in outcomes])


# ---------------------------------------------------------------- across training seeds

MIN_POOLED_SEEDS = 3  # fewer training seeds: the claim is stated per seed, not pooled


@dataclass(frozen=True)
class SeedPooled:
    """A change measured once per training seed, and pooled over the seeds.

    `per_seed`: each seed's change with its interval over that seed's examples;
    `pooled`: the mean of the per-seed changes with the two-level bootstrap interval
    (`over_seeds`), None with fewer than `MIN_POOLED_SEEDS` seeds; `t`: the Student-t 95 %
    interval of the mean of the per-seed values (between-seed spread only; None below 2)."""

    per_seed: tuple[Interval, ...]
    pooled: Interval | None
    t: Interval | None

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    def verdict(self, direction: str = "higher") -> str:
        """"better" / "worse" when the pooled interval excludes 0, in the metric's good
        `direction` ("higher"; "lower" for a share of failures; "none" for a length, which
        says "up" / "down"), "no change shown" when it does not; with too few seeds to pool,
        "better in k of S seeds" style text from the per-seed intervals ("no change shown"
        when no seed's excludes 0)."""
        rise, fall = {"higher": ("better", "worse"), "lower": ("worse", "better"),
                      "none": ("up", "down")}[direction]
        if self.pooled is not None:
            if self.pooled.low > 0:
                return rise
            if self.pooled.high < 0:
                return fall
            return "no change shown"
        up = sum(1 for i in self.per_seed if i.low > 0)
        down = sum(1 for i in self.per_seed if i.high < 0)
        if not up and not down:
            return "no change shown"
        parts = [f"{rise} in {up}" if up else "", f"{fall} in {down}" if down else ""]
        return f"{' and '.join(p for p in parts if p)} of {self.seeds} seeds (too few to pool)"

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "per_seed": [i.to_json() for i in self.per_seed],
                "pooled": None if self.pooled is None else self.pooled.to_json(),
                "t": None if self.t is None else self.t.to_json(), "verdict": self.verdict()}


def over_seeds(changes: Sequence[tuple[Metric, int]], *, seed: int = 0,
               resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> SeedPooled:
    """Pool a change over training seeds: `changes` holds, per seed s, the change as a Metric
    of example indices d_s(idx) (a paired difference: after − before on the same examples)
    and its number of examples n_s.

    The unit of a claim about a method is the training run, so the pooled interval resamples
    the seeds first, then each drawn seed's examples (a two-level, or cluster, bootstrap):

        value     D = (1/S) Σ_s d_s(all n_s examples)
        resample  draw S seeds with replacement; for each draw, n_s of its examples with
                  replacement; D* = the mean of the drawn d_s(examples*)
        interval  the (2.5 %, 97.5 %) percentiles of B values of D* (B = `resamples`)

    Its width carries both the run-to-run variation and the examples' noise (Davison &
    Hinkley 1997, §3.8, on resampling in two stages). With few seeds the seed stage cannot
    see much of the run-to-run spread (S = 3 seeds have 10 distinct resamples): below
    `MIN_POOLED_SEEDS` no pooled interval is given. Beside it, `t` is the Student-t interval
    D ± t_{S−1, 0.975} · sd(d_s) / √S over the per-seed values, which counts the between-seed
    spread only, from the per-seed points."""
    from scipy import stats

    if not changes:
        raise ValueError("over_seeds needs at least one seed's change")
    per_seed = tuple(bootstrap(metric, n, seed=seed + k, resamples=resamples,
                               confidence=confidence)
                     for k, (metric, n) in enumerate(changes))
    points = np.array([i.value for i in per_seed])
    S = len(changes)
    t_interval = None
    if S >= 2:
        half = float(stats.t.ppf(0.5 + confidence / 2, S - 1) * points.std(ddof=1)
                     / math.sqrt(S))
        t_interval = Interval(float(points.mean()), float(points.mean()) - half,
                              float(points.mean()) + half, S)
    if S < MIN_POOLED_SEEDS:
        return SeedPooled(per_seed, None, t_interval)
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    for b in range(resamples):
        chosen = rng.integers(0, S, S)
        draws[b] = np.mean([changes[s][0](rng.integers(0, changes[s][1], changes[s][1]))
                            for s in chosen])
    tail = 100 * (1 - confidence) / 2
    low, high = np.nanpercentile(draws, [tail, 100 - tail])
    pooled = Interval(float(points.mean()), float(low), float(high), S)
    return SeedPooled(per_seed, pooled, t_interval)
