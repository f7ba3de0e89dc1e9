"""The GEMM SFT corpus: correct DGEMM kernels written for this project, and the (prompt,
completion) pairs of the SFT warm start built from them.

The kernels live in `hargo_hpc/tasks/gemm_corpus/*.c` (not `corpus/`: a directory of this
module's name beside it confuses tools that walk the package). Each starts with a one-line
comment that describes it and ends ``Techniques: a, b.`` (names from
`bench.techniques.TECHNIQUES`, or ``none``); the techniques declared there are exactly what
`bench.techniques.detect_techniques` finds in the code (tests/tasks/test_corpus.py checks it,
and that every kernel is `ok` under the real bench at two shapes). A small instruct model
writes no compilable kernel without such a warm start.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from hargo_hpc.bench.techniques import TECHNIQUES
from hargo_hpc.tasks.base import Example, Stage
from hargo_hpc.tasks.gemm import Gemm

DECLARED = re.compile(r"Techniques: ([a-z, ]+)\. \*/$")


@dataclass(frozen=True)
class CorpusKernel:
    """One shipped kernel: its file stem, its source, the techniques its first line declares."""

    name: str
    code: str
    techniques: tuple[str, ...]

    @property
    def completion(self) -> str:
        """The answer a model should give: the kernel in one ```c fence."""
        return f"```c\n{self.code.rstrip()}\n```"


def declared_techniques(name: str, code: str) -> tuple[str, ...]:
    """The techniques named at the end of the first line (``Techniques: a, b.`` or ``none``),
    in the order of TECHNIQUES; ValueError naming the kernel when the line is missing or names
    an unknown technique."""
    first = code.split("\n", 1)[0]
    m = DECLARED.search(first)
    if not first.startswith("/*") or not m:
        raise ValueError(f"corpus kernel {name}: the first line must be a comment ending "
                         "'Techniques: <names or none>. */'")  # fmt: skip
    names = [t.strip() for t in m.group(1).split(",")]
    if names == ["none"]:
        return ()
    unknown = [t for t in names if t not in TECHNIQUES]
    if unknown:
        raise ValueError(f"corpus kernel {name}: unknown technique(s) {', '.join(unknown)}")
    return tuple(t for t in TECHNIQUES if t in names)


def load_corpus() -> list[CorpusKernel]:
    """Every kernel of hargo_hpc/tasks/gemm_corpus/, sorted by name."""
    folder = resources.files("hargo_hpc.tasks").joinpath("gemm_corpus")
    kernels = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".c"):
            name, code = entry.name[:-2], entry.read_text(encoding="utf-8")
            kernels.append(CorpusKernel(name, code, declared_techniques(name, code)))
    return kernels


def satisfied(stages: Sequence[Stage], kernel: CorpusKernel) -> list[Stage]:
    """The stages other than an open one whose rules `kernel` keeps: none of its techniques
    forbidden, every required one among them."""
    have = set(kernel.techniques)
    return [s for s in stages if not s.open and not have & set(s.forbid)
            and set(s.require) <= have]  # fmt: skip


def sft_examples(
    problems: Sequence[Example],
    kernels: Sequence[CorpusKernel] | None = None,
    *,
    staged: bool = False,
    stages: Sequence[Stage] | None = None,
) -> list[tuple[str, str]]:
    """(user text, completion) pairs: every kernel (default: the whole corpus) for every
    problem, problem by problem, kernels in corpus order.

    The user text is `Gemm.user_text` (not wrapped in a template: the trainer applies
    `prompts.build_prompt`); the completion is the kernel in one ```c fence. With `staged`, each
    prompt is the SQD form that permits exactly the kernel's techniques and forbids the others,
    so the answer obeys the stage it was asked for. With `stages` (an SQD schedule), each plain
    pair is followed by the same kernel under every stage it keeps (`satisfied`), its prompt
    rendered as the RL step renders it (`Gemm.prompt_for` with the stage's permitted and
    forbidden techniques); a kernel that keeps no stage's rules gets the plain pair only. (Under
    one stage each, picked by crc32, the warm start compiled 0.72 of its kernels under the plain
    prompt; under every stage it keeps, 0.94, as without stages: docs/results.md.)
    """
    task = Gemm()
    kernels = load_corpus() if kernels is None else list(kernels)
    pairs = []
    for example in problems:
        for kernel in kernels:
            if staged:
                permitted = list(kernel.techniques)
                forbidden = [t for t in TECHNIQUES if t not in kernel.techniques]
                text = task.prompt_for(example, permitted, forbidden)
            else:
                text = task.user_text(example)
            pairs.append((text, kernel.completion))
            for stage in satisfied(stages, kernel) if stages else []:
                pairs.append((task.prompt_for(example, stage.permitted, stage.forbid),
                              kernel.completion))
    return pairs
