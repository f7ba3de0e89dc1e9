"""Two evaluations of the same examples compared line by line (`hargo eval compare`, the
report's "Against grpo" table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hargo_hpc.cli import main
from hargo_hpc.eval.evaluate import EvalError
from hargo_hpc.eval.paired_runs import compare_evaluations
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
    assert "## Against grpo" in text and "**+100.00 [+100.00, +100.00]**" in text
