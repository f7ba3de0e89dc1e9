#!/usr/bin/env python3
"""How well the static technique detector agrees with what the corpus kernels' authors declared.

SQD permits and forbids techniques by what `bench.techniques.detect_techniques` finds in a
kernel, so docs/sqd.md should say how often that heuristic matches a human reading of the code.
The 46 GEMM kernels of `hargo_hpc/tasks/gemm_corpus/` each declare their techniques by hand in
their first line (`tasks.corpus.CorpusKernel.techniques`); this script counts, per technique,
true and false positives and negatives of the detector against those declarations, and the
kernels whose detected set is exactly the declared one.

Every false positive and false negative needs a reason written by a person who read the kernel
(`REASONS`, keyed by (technique, kernel name)): a number alone does not tell a reader what kind
of code fools the detector.  A mismatch without a reason, or a reason for a pair that is no
longer a mismatch, makes the script exit 1 naming the kernel, so the prose in the docs cannot
drift from the code.

Note that tests/tasks/test_corpus.py requires declared == detected for every kernel, so on this
corpus the table is expected to show no mismatch at all: it documents agreement on code written
with the detector in view, not the detector's accuracy on arbitrary code.

Usage: scripts/technique_confusion.py   (prints the Markdown for docs/sqd.md)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hargo_hpc.bench.techniques import TECHNIQUES, detect_techniques
from hargo_hpc.tasks.corpus import CorpusKernel, load_corpus

OUTCOMES = ("tp", "fp", "fn", "tn")
KERNEL_DIR = "hargo_hpc/tasks/gemm_corpus"

# (technique, kernel name) -> why the detector fires without a declaration (false positive) or
# stays silent despite one (false negative), written after reading the kernel.  Empty because
# no kernel of the corpus is a mismatch today (see the module docstring).
REASONS: dict[tuple[str, str], str] = {}


class UnexplainedMismatch(ValueError):
    """A false positive or negative without a written reason, or a reason left for a pair that
    is no longer a mismatch."""


def outcomes(kernels: Sequence[CorpusKernel] | None = None) -> dict[str, dict[str, list[str]]]:
    """Per technique, the names of the kernels in each of tp / fp / fn / tn (corpus order).

    One detector run per kernel serves every technique, so the counts, the mismatch lists and
    the exact-set agreement all come from the same detection."""
    kernels = load_corpus() if kernels is None else kernels
    out: dict[str, dict[str, list[str]]] = {t: {o: [] for o in OUTCOMES} for t in TECHNIQUES}
    for kernel in kernels:
        detected = set(detect_techniques(kernel.code))
        for technique in TECHNIQUES:
            declared, found = technique in kernel.techniques, technique in detected
            key = ("t" if declared == found else "f") + ("p" if found else "n")
            out[technique][key].append(kernel.name)
    return out


def confusion() -> dict[str, dict[str, int]]:
    """Per technique, the counts tp / fp / fn / tn of the detector against the declarations."""
    return {t: {o: len(names) for o, names in row.items()} for t, row in outcomes().items()}


def mismatches() -> dict[str, dict[str, list[str]]]:
    """Per technique, the kernels behind its false positives ("fp") and negatives ("fn")."""
    return {t: {o: row[o] for o in ("fp", "fn")} for t, row in outcomes().items()}


def exact_agreement(kernels: Sequence[CorpusKernel] | None = None) -> tuple[int, int]:
    """(kernels whose detected set equals the declared set, kernels): per-technique scores can
    all be high while many kernels still get one technique wrong, which is what SQD feels."""
    kernels = load_corpus() if kernels is None else kernels
    same = sum(set(detect_techniques(k.code)) == set(k.techniques) for k in kernels)
    return same, len(kernels)


def reason_errors(
    found: dict[str, dict[str, list[str]]], reasons: dict[tuple[str, str], str]
) -> list[str]:
    """What is wrong between the mismatches in `found` (as `outcomes` gives them) and the
    written `reasons`: one message per mismatch without a reason and per stale reason."""
    wanted = {
        (technique, name): kind
        for technique, row in found.items()
        for kind in ("fp", "fn")
        for name in row.get(kind, [])
    }
    errors = [
        f"{'false positive' if kind == 'fp' else 'false negative'} of {technique!r} in "
        f"{KERNEL_DIR}/{name}.c has no reason in REASONS"
        for (technique, name), kind in wanted.items()
        if not reasons.get((technique, name), "").strip()
    ]
    errors += [
        f"REASONS has an entry for {technique!r} in {KERNEL_DIR}/{name}.c, which is no longer a "
        "false positive or negative"
        for technique, name in reasons
        if (technique, name) not in wanted
    ]
    return errors


def ratio(num: int, den: int) -> str:
    """`num / den` to two decimals, or n/a where nothing was declared or detected (0 / 0 is
    neither perfect nor zero)."""
    return f"{num / den:.2f}" if den else "n/a"


def markdown() -> str:
    """The confusion table, the exact-set agreement and one line per mismatch with its reason;
    raises UnexplainedMismatch (naming the kernels) when `REASONS` does not fit the mismatches."""
    found = outcomes()
    errors = reason_errors(found, REASONS)
    if errors:
        raise UnexplainedMismatch("\n".join(errors))
    lines = [
        "| technique | declared | detected | true pos. | false pos. | false neg. | precision "
        "| recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for technique in TECHNIQUES:
        tp, fp, fn = (len(found[technique][o]) for o in ("tp", "fp", "fn"))
        lines.append(
            f"| {technique} | {tp + fn} | {tp + fp} | {tp} | {fp} | {fn} | {ratio(tp, tp + fp)} "
            f"| {ratio(tp, tp + fn)} |"
        )
    same, total = exact_agreement()
    lines += [
        "",
        f"Exact-set agreement: {same} of {total} kernels ({100 * same / total:.0f}%) have a "
        "detected set equal to the declared set.",
        "",
    ]
    explained = [
        f"- false {'positive' if kind == 'fp' else 'negative'}, `{technique}`: "
        f"`{KERNEL_DIR}/{name}.c`: {REASONS[(technique, name)]}"
        for technique in TECHNIQUES
        for kind in ("fp", "fn")
        for name in found[technique][kind]
    ]
    lines += explained or ["No false positive or false negative on the corpus."]
    return "\n".join(lines)


def main() -> int:
    """Print the Markdown; exit status 1 (with the kernels named on stderr) when a mismatch
    has no reason or a reason no mismatch."""
    try:
        text = markdown()
    except UnexplainedMismatch as exc:
        print(f"technique_confusion: {exc}", file=sys.stderr)
        return 1
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
