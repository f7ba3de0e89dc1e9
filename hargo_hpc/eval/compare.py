"""Every metric of a task with its interval, and the paired difference of two systems.

An evaluation answers `n` examples of a task, each `samples` times (one greedy answer, or
several sampled kernels of one GEMM problem): rows u·samples … u·samples + samples − 1 belong
to example u. The unit of resampling is the example (all of its samples go together: a
problem's kernels are not independent draws of the metric), so a metric is given as a function
of an array of example indices (`UnitMetrics`), returning the task's whole metrics dict on the
rows of those examples. Each resample's dict is computed once and shared by every key
(`Memo`); the keys are the metrics that are fractions or means (floats), not the counts.

    intervals   each key: its value on all n examples and the BCa bootstrap 95 %
                interval (`intervals.bootstrap`, seeded)
    paired      each key: after − before on the same resampled examples
                (`intervals.paired_difference`): what the examples share cancels

Pure: numpy and scipy (through `intervals`); the tasks' metrics are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hargo_hpc.eval.intervals import Interval, bootstrap, paired_difference

UnitMetrics = Callable[[np.ndarray], Mapping[str, Any]]


def interval_keys(values: Mapping[str, Any], points: Sequence[str] = ()) -> list[str]:
    """The keys of `values` that get an interval: float values (shares, means, F1), in order;
    counts (ints), None, booleans, nested objects and `points` (maxima: `Task.points`) do
    not."""
    return [k for k, v in values.items()
            if isinstance(v, float) and not isinstance(v, bool) and k not in points]


def unit_rows(idx: Iterable[int], samples: int) -> list[int]:
    """The row indices of examples `idx` (each `samples` consecutive rows), in that order."""
    return [int(u) * samples + j for u in idx for j in range(samples)]


class Memo:
    """`metrics_of` cached by the exact index array (resamples repeat across keys)."""

    def __init__(self, metrics_of: UnitMetrics) -> None:
        self.metrics_of = metrics_of
        self.cache: dict[bytes, Mapping[str, Any]] = {}

    def __call__(self, idx: np.ndarray) -> Mapping[str, Any]:
        key = np.asarray(idx, dtype=np.int64).tobytes()
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self.metrics_of(np.asarray(idx, dtype=np.int64))
        return found

    def value(self, key: str) -> Callable[[np.ndarray], float]:
        return lambda idx: _number(self(idx).get(key))


def _number(value: Any) -> float:
    """A metric's value as a float; NaN for None (no value on that resample)."""
    if value is None or isinstance(value, bool):
        return math.nan
    return float(value)


def intervals(metrics_of: UnitMetrics, n: int, keys: Sequence[str], *,
              seed: int = 0) -> dict[str, Interval]:
    """Each key's value on all `n` examples and its 95 % interval (module docstring)."""
    memo = Memo(metrics_of)
    return {key: bootstrap(memo.value(key), n, seed=seed) for key in keys}


def paired(before_of: UnitMetrics, after_of: UnitMetrics, n: int, keys: Sequence[str], *,
           seed: int = 0) -> dict[str, Interval]:
    """Each key's after − before on the same `n` examples, paired (module docstring)."""
    before, after = Memo(before_of), Memo(after_of)
    return {key: paired_difference(before.value(key), after.value(key), n, seed=seed)
            for key in keys}


def as_json(found: Mapping[str, Interval]) -> dict[str, dict[str, Any]]:
    return {key: interval.to_json() for key, interval in found.items()}
