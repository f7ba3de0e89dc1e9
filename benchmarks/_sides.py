"""Two sides of a comparison run interleaved and printed alike: each side's median and range
and the ratio of the medians. Shared by the benchmarks that compare a change with what it
replaced (or one backend with another) in the same run."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def interleaved(sides: Sequence[str], repeats: int, run: Callable[[str], T]) -> dict[str, list[T]]:
    """`run(side)` `repeats` times a side, the sides taking turns (a, b, a, b, ...), so a
    drift of the machine falls on both."""
    found: dict[str, list[T]] = {side: [] for side in sides}
    for _ in range(repeats):
        for side in sides:
            found[side].append(run(side))
    return found


def report(found: dict[str, list[float]], label: str = "", unit: str = "MiB",
           sign: str = "+") -> None:
    """One line a side (median and range), then the last side's median over the first's (not
    where the first's is 0: a phase only one side has)."""
    for side, values in found.items():
        print(f"  {label}{side:<6} {sign}{_figure(statistics.median(values))} {unit} "
              f"(range {_figure(min(values))}-{_figure(max(values))})")
    sides = list(found)
    first, last = sides[0], sides[-1]
    base = statistics.median(found[first])
    if abs(base) < 1e-6:
        print(f"  {label}{last} / {first}: not defined ({first}'s median is 0)")
        return
    print(f"  {label}{last} / {first}: {statistics.median(found[last]) / base:.2f}x")


def _figure(value: float) -> str:
    """Whole numbers from 10 on, two significant digits below (a phase of 0.3 s is not 0)."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"
