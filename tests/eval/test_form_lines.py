"""The start -> end lines of an evaluation against its baseline (`eval.evaluate.change_lines`,
what `make demo` prints) and the form lines of `hargo sft` (`eval.form_check.form_lines`)."""

from __future__ import annotations

from hargo_hpc.eval.evaluate import change_lines
from hargo_hpc.eval.form_check import form_lines

METRICS = {"tasks": {
    "data_race_c": {
        "n": 40, "f1": 0.5, "support_rate": 1.0, "accuracy": 0.55, "adjusted_f1": 0.5,
        "intervals": {"support_rate": {"low": 0.9, "high": 1.0}},
        "baseline": {"support_rate": 0.25, "f1": 0.4},
        "vs_baseline": {"support_rate": {"value": 0.75, "low": 0.6, "high": 0.9},
                        "f1": {"value": 0.1, "low": -0.05, "high": 0.25}},
    },
    "gemm": {"n": 4, "ok_share": 0.5, "compiled_share": 0.75},
}}


def test_each_metric_start_to_end_with_its_interval_and_change() -> None:
    lines = change_lines(METRICS, lambda name: ("f1", "support_rate") if name == "data_race_c"
                         else ("ok_share", "missing"))
    assert lines == [
        "data_race_c  f1  0.400 -> 0.500 (n=40), change +0.100 [-0.050, +0.250]",
        "data_race_c  support_rate  0.250 -> 1.000 [0.900, 1.000] (n=40), "
        "change +0.750 [+0.600, +0.900] *",
        "gemm  ok_share  — -> 0.500 (n=4)",  # no baseline: no start, no change
    ]


def test_the_form_lines_follow_each_tasks_form_metrics() -> None:
    assert [line.split()[1:3] for line in form_lines(METRICS)] == [
        ["data_race_c", "support_rate"], ["gemm", "compiled_share"], ["gemm", "ok_share"]]
    assert all(line.startswith("form  ") for line in form_lines(METRICS))
