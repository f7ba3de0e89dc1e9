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
    """One line a side (median and range), then the last side's median over the first's."""
    for side, values in found.items():
        print(f"  {label}{side:<6} {sign}{statistics.median(values):.0f} {unit} "
              f"(range {min(values):.0f}-{max(values):.0f})")
    sides = list(found)
    first, last = sides[0], sides[-1]
    ratio = statistics.median(found[last]) / statistics.median(found[first])
    print(f"  {label}{last} / {first}: {ratio:.2f}x")
