"""scripts/technique_confusion.py: its counts are the corpus's (recounted here without the
script), every mismatch has a written reason and no reason outlives its mismatch, docs/sqd.md
holds its current table, and it runs as a script."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hargo_hpc.bench.techniques import TECHNIQUES, detect_techniques
from hargo_hpc.tasks.corpus import load_corpus

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "technique_confusion.py"
DOCS = REPO / "docs" / "sqd.md"  # a module constant, so a manual check can point it elsewhere
BEGIN, END = "<!-- confusion:begin -->", "<!-- confusion:end -->"
CORPUS_SIZE = 46  # the kernels of hargo_hpc/tasks/gemm_corpus/ the docs' table was made from


def load_script() -> ModuleType:
    """The script as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("technique_confusion", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def script() -> ModuleType:
    """A fresh copy per test, so a test that changes REASONS changes no other test's."""
    return load_script()


def recount(technique: str) -> dict[str, int]:
    """tp / fp / fn / tn of `technique` over the corpus, from the declarations and the detector
    directly (not from the script)."""
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for kernel in load_corpus():
        declared = technique in kernel.techniques
        detected = technique in detect_techniques(kernel.code)
        if declared and detected:
            counts["tp"] += 1
        elif detected:
            counts["fp"] += 1
        elif declared:
            counts["fn"] += 1
        else:
            counts["tn"] += 1
    return counts


def test_counts_add_up_and_equal_an_independent_recount(script: ModuleType) -> None:
    table = script.confusion()
    assert list(table) == list(TECHNIQUES)
    for technique in TECHNIQUES:
        assert sum(table[technique].values()) == CORPUS_SIZE, technique
        assert table[technique] == recount(technique), technique


def test_mismatch_lists_are_the_kernels_behind_the_counts(script: ModuleType) -> None:
    table, lists = script.confusion(), script.mismatches()
    kernels = load_corpus()
    for technique in TECHNIQUES:
        fp = [k.name for k in kernels
              if technique in detect_techniques(k.code) and technique not in k.techniques]
        fn = [k.name for k in kernels
              if technique not in detect_techniques(k.code) and technique in k.techniques]
        assert lists[technique] == {"fp": fp, "fn": fn}, technique
        assert (table[technique]["fp"], table[technique]["fn"]) == (len(fp), len(fn))


def test_exact_agreement_counts_kernels_with_the_same_set(script: ModuleType) -> None:
    kernels = load_corpus()
    same = [k.name for k in kernels if tuple(detect_techniques(k.code)) == k.techniques]
    assert script.exact_agreement() == (len(same), CORPUS_SIZE)
    assert f"Exact-set agreement: {len(same)} of {CORPUS_SIZE} kernels" in script.markdown()


def test_an_unexplained_or_stale_mismatch_is_named(script: ModuleType) -> None:
    found = {t: {"tp": [], "fp": [], "fn": [], "tn": []} for t in TECHNIQUES}
    found["blocking"]["fp"] = ["fake_fp"]
    found["simd"]["fn"] = ["fake_fn"]
    reasons = {("blocking", "fake_fp"): "steps by BS", ("openmp", "gone"): "was a mismatch"}
    errors = script.reason_errors(found, reasons)
    assert len(errors) == 2
    assert "false negative of 'simd'" in errors[0] and "fake_fn.c" in errors[0]
    assert "'openmp'" in errors[1] and "gone.c" in errors[1]
    reasons[("simd", "fake_fn")] = "  "  # a blank reason explains nothing
    assert any("fake_fn.c" in e for e in script.reason_errors(found, reasons))
    reasons[("simd", "fake_fn")] = "no intrinsics, only -O3 auto-vectorisation"
    del reasons[("openmp", "gone")]
    assert script.reason_errors(found, reasons) == []


def test_the_script_exits_1_on_a_stale_reason(script: ModuleType,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    found = script.outcomes()
    technique, kernel = next(
        (t, name) for t in TECHNIQUES for name in found[t]["tp"] + found[t]["tn"]
    )  # a pair that is no mismatch, so no reason may be written for it
    script.REASONS[(technique, kernel)] = "written for a mismatch that does not exist"
    assert script.main() == 1
    assert f"{kernel}.c" in capsys.readouterr().err
    with pytest.raises(script.UnexplainedMismatch, match=kernel):
        script.markdown()


def test_markdown_has_a_row_per_technique(script: ModuleType) -> None:
    text = script.markdown()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| technique | declared | detected | true pos. | false pos. |")
    table = script.confusion()
    for technique, row in zip(TECHNIQUES, rows[1:], strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        c = table[technique]
        assert cells[:6] == [technique, str(c["tp"] + c["fn"]), str(c["tp"] + c["fp"]),
                             str(c["tp"]), str(c["fp"]), str(c["fn"])]


def docs_block(path: Path) -> str:
    """The text of `path` between the confusion markers (each on a line of its own), stripped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines.count(BEGIN) == 1 and lines.count(END) == 1, f"{path}: one {BEGIN} and {END}"
    start, end = lines.index(BEGIN), lines.index(END)
    assert start < end, f"{path}: {BEGIN} after {END}"
    return "\n".join(lines[start + 1:end]).strip()


def test_docs_hold_the_current_table(script: ModuleType) -> None:
    assert DOCS.is_file(), f"{DOCS} is missing: paste the script's output between the markers"
    assert docs_block(DOCS) == script.markdown().strip(), (
        f"{DOCS} is stale: paste `python scripts/technique_confusion.py` between {BEGIN} "
        f"and {END}"
    )


def test_runs_as_a_script(script: ModuleType) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == script.markdown().strip()
