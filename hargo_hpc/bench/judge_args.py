"""The judge's command line, in one place: `JudgeArgs` names judge.c's 19 positional arguments in
the order of its usage line (`judge CANDIDATE REFERENCE M N K M2 N2 K2 WARMUP REPS MAX_REPS
BUDGET_MS SEED UID GID THREADS UNTIMED_MS CALL_MS OUTPUT`); `to_argv` writes them.
tests/bench/test_verdict.py checks the field order against judge.c's usage and its argv[] reads.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class JudgeArgs:
    """What one judge run is asked to do (docs/bench.md, judge.c's header)."""

    candidate: str  # the kernel's binary (untrusted)
    reference: str  # the trusted reference's binary, "-" for none
    m: int
    n: int
    k: int
    m2: int  # the second, element-wise checked size
    n2: int
    k2: int
    warmup: int  # untimed calls of each binary before the timed pairs
    reps: int  # fewest timed pairs
    max_reps: int  # most timed pairs (more follow until budget_ms)
    budget_ms: int  # the candidate's timed calls' total that ends the pairs
    seed: int  # 0: every call's inputs from getrandom
    uid: int  # the candidate's uid and gid, -1: keep the judge's
    gid: int
    threads: int  # k: the threads the kernel may use and the reference runs on
    untimed_ms: int  # each warm-up and check call's limit
    call_ms: int  # each timed call's limit
    output: int  # bytes the children may write to stdout and stderr

    def to_argv(self, judge: str | Path) -> list[str]:
        """`judge` followed by every field, in order, as judge.c's main() reads them."""
        return [str(judge), *map(str, astuple(self))]

    @classmethod
    def from_argv(cls, argv: list[str]) -> JudgeArgs:
        """The inverse of `to_argv` (for tests and logs)."""
        values = argv[1:]
        if len(values) != len(fields(cls)):
            raise ValueError(f"the judge takes {len(fields(cls))} arguments, not {len(values)}")
        kinds = [f.type for f in fields(cls)]
        return cls(*(v if t == "str" else int(v) for t, v in zip(kinds, values, strict=True)))

    @property
    def pair_bounds(self) -> tuple[int, int]:
        """(fewest, most) timed pairs a well-formed record holds."""
        return self.reps, self.max_reps

