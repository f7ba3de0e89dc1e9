"""Two evaluations of the same examples compared line by line (`hargo eval compare`, the
report's "Against grpo" table), and such changes pooled over training seeds (`seed_changes`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hargo_hpc.cli import main
from hargo_hpc.eval.evaluate import EvalError
from hargo_hpc.eval.paired_runs import Predictions, compare_evaluations, seed_changes
from hargo_hpc.report.differences import differences, differences_markdown
from hargo_hpc.report.table import load_runs

LABELS = ["yes", "no"] * 20  # 40 examples


def write_eval(root: Path, answers: list[str], *, ids: list[str] | None = None) -> Path:
    (root / "predictions").mkdir(parents=True)
    lines = [json.dumps({"id": (ids or [f"data_race_c:{i}" for i in range(40)])[i],
                         "sample": 0, "instruction": "q", "input": "", "output": label,
                         "prediction": answer})
             for i, (label, answer) in enumerate(zip(LABELS, answers, strict=True))]
    (root / "predictions" / "data_race_c.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_the_paired_change_of_accuracy_is_counted_by_hand(tmp_path: Path) -> None:
    """A answers 'no' to everything: accuracy 0.5, support 1. B gets 10 more right (the
    first 10 'yes' examples, i.e. examples 0, 2, …, 18): accuracy 30/40 = 0.75, +0.25."""
    a = write_eval(tmp_path / "a", ["no"] * 40)
    b_answers = ["no"] * 40
    for i in range(0, 20, 2):
        b_answers[i] = "yes"
    b = write_eval(tmp_path / "b", b_answers)
    found = compare_evaluations(a, b)["data_race_c"]
    assert found["accuracy"].value == pytest.approx(0.25) and found["accuracy"].excludes_zero()
    assert found["support_rate"].value == 0.0 and not found["support_rate"].excludes_zero()
    assert found["accuracy"].n == 40
    shown = CliRunner().invoke(main, ["eval", "compare", str(a), str(b)])
    assert shown.exit_code == 0, shown.output
    assert "accuracy         +0.2500" in shown.output and "(n=40) *" in shown.output


def test_other_examples_are_refused(tmp_path: Path) -> None:
    a = write_eval(tmp_path / "a", ["no"] * 40)
    b = write_eval(tmp_path / "b", ["no"] * 40, ids=[f"data_race_c:{i + 1}" for i in range(40)])
    with pytest.raises(EvalError, match="answer other examples"):
        compare_evaluations(a, b)
    done = CliRunner().invoke(main, ["eval", "compare", str(a), str(tmp_path / "none")])
    assert done.exit_code == 2 and "no task has predictions in both" in done.output


def test_the_report_compares_each_method_with_grpo_of_its_seed(tmp_path: Path) -> None:
    for method, answers in (("grpo", ["no"] * 40), ("hargo", ["yes", "no"] * 20)):
        run = tmp_path / method
        write_eval(run / "eval", answers)
        (run / "config.toml").write_text(f'[run]\nname = "{method}"\nseed = 0\n[algorithm]\n'
                                         f'name = "{method}"\n[[data.tasks]]\n'
                                         'name = "data_race_c"\n')
        (run / "eval" / "metrics.json").write_text(json.dumps({"format": 2, "tasks": {}}))
    reference, entries = differences(load_runs([tmp_path / "grpo", tmp_path / "hargo"]))
    assert reference == "grpo" and [e["method"] for e in entries] == ["hargo"]
    f1 = entries[0]["cells"]["race_c_f1"]  # grpo: no 'yes' at all, F1 0; hargo: all right
    assert f1[0] == pytest.approx(1.0)
    text = differences_markdown(reference, entries)
    assert "## Against grpo" in text and "**+100.00 [+100.00, +100.00] (n=40)**" in text


def race_answers(right: int) -> list[str]:
    """'no' to everything but the first `right` of the 20 'yes' examples (0, 2, …)."""
    answers = ["no"] * 40
    for i in range(0, 2 * right, 2):
        answers[i] = "yes"
    return answers


def write_run_eval(run: Path, answers: list[str], baseline: list[str]) -> Path:
    """A run directory's eval/: its answers and its baseline's (`.baseline.jsonl`)."""
    write_eval(run / "eval", answers)
    base = write_eval(run / "base", baseline) / "predictions" / "data_race_c.jsonl"
    base.rename(run / "eval" / "predictions" / "data_race_c.baseline.jsonl")
    return run


def test_seed_changes_pools_each_seeds_paired_change(tmp_path: Path) -> None:
    """Against the baseline ('no' throughout: accuracy 0.5), accuracy gains right/40 per
    seed: +0.25, +0.15 with 2 seeds (no pooled interval: the per-seed statement), and with
    a third seed (+0.2) the pooled mean +0.2 with an interval over seeds and examples."""
    runs = [write_run_eval(tmp_path / f"s{k}", race_answers(right), ["no"] * 40)
            for k, right in enumerate((10, 6, 8))]
    pairs = [(Predictions(run, baseline=True), Predictions(run)) for run in runs]
    two = seed_changes(pairs[:2])["data_race_c"]["accuracy"]
    assert [i.value for i in two.per_seed] == pytest.approx([0.25, 0.15])
    assert two.pooled is None and two.verdict() == "better in 2 of 2 seeds (too few to pool)"
    three = seed_changes(pairs)["data_race_c"]
    assert three["accuracy"].pooled is not None
    assert three["accuracy"].pooled.value == pytest.approx(0.2)
    assert 0 < three["accuracy"].pooled.low < 0.2 < three["accuracy"].pooled.high
    assert three["accuracy"].verdict() == "better"
    # each seed's change is the one `hargo eval compare` gives that pair, on the same examples
    alone = compare_evaluations(write_eval(tmp_path / "base", ["no"] * 40), runs[0])
    assert three["f1"].per_seed[0] == alone["data_race_c"]["f1"]
    assert three["support_rate"].per_seed[0].value == 0.0


def test_seed_changes_between_runs_and_its_refusals(tmp_path: Path) -> None:
    """A pair may hold two runs' answers (method − reference of one seed); a task that one
    pair lacks is not pooled; other examples are refused."""
    grpo = [write_eval(tmp_path / f"grpo{k}", race_answers(2)) for k in range(2)]
    hargo = [write_eval(tmp_path / f"hargo{k}", race_answers(r)) for k, r in enumerate((6, 4))]
    pairs = [(Predictions(a), Predictions(b)) for a, b in zip(grpo, hargo, strict=True)]
    found = seed_changes(pairs)["data_race_c"]["accuracy"]
    assert [i.value for i in found.per_seed] == pytest.approx([0.1, 0.05])
    with pytest.raises(EvalError, match="no task has predictions on both sides"):
        seed_changes([*pairs, (Predictions(grpo[0], baseline=True), Predictions(hargo[0]))])
    other = write_eval(tmp_path / "other", race_answers(2),
                       ids=[f"data_race_c:{i + 1}" for i in range(40)])
    with pytest.raises(EvalError, match="answer other examples"):
        seed_changes([pairs[0], (Predictions(other), Predictions(hargo[1]))])


def write_gemm(root: Path, ratios: list[float | None]) -> Path:
    """GEMM predictions: 4 problems × 2 kernels, each ok at the ratio given (None: a compile
    error)."""
    folder = root / "predictions"
    folder.mkdir(parents=True)
    lines = []
    for i, ratio in enumerate(ratios):
        record = ({"status": "compile_error", "reward": 0.0} if ratio is None else
                  {"status": "ok", "gflops": {"median": 10.0 * ratio}, "ratio": ratio,
                   "reward": ratio})
        lines.append(json.dumps({"id": f"gemm:{i // 2}", "sample": i % 2, "instruction": "k",
                                 "input": "", "output": "", "prediction": "code",
                                 "record": record}))
    (folder / "gemm.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_seed_changes_give_no_maximum_an_interval(tmp_path: Path) -> None:
    """GEMM's maxima (`Task.points`) are not pooled; fast_0.5 and the log2 speed ratio are:
    A has one kernel at 0.5× the reference, B two at 1× (fast_0.5: 1/8 → 2/8; log2 mean:
    −1 → 0)."""
    a = write_gemm(tmp_path / "a", [0.5, None, None, None, None, None, None, None])
    b = write_gemm(tmp_path / "b", [1.0, 1.0, None, None, None, None, None, None])
    found = seed_changes([(Predictions(a), Predictions(b))] * 2)["gemm"]
    assert not {"gflops_max", "ratio_max"} & set(found)
    assert found["fast_0.5"].per_seed[0].value == pytest.approx(0.125)
    assert found["log2_ratio_mean"].per_seed[0].value == pytest.approx(1.0)
    assert found["reward_mean"].per_seed[0].n == 4  # problems, not kernels
