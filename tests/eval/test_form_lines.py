"""The start -> end lines of an evaluation against its baseline (`eval.summary.change_lines`,
what `make demo` prints), their verdicts, the training-vs-held-out gap, and the form lines of
`hargo sft` (`eval.form_check.form_lines`)."""

from __future__ import annotations

from hargo_hpc.eval.form_check import form_lines
from hargo_hpc.eval.summary import change_lines, gap_lines, generalisation_gap, verdict_lines

METRICS = {"tasks": {
    "data_race_c": {
        "n": 40, "rows": 40, "distinct": 2, "f1": 0.5, "support_rate": 1.0, "accuracy": 0.55,
        "adjusted_f1": 0.5,
        "intervals": {"support_rate": {"low": 0.9, "high": 1.0},
                      "accuracy": {"low": 0.4, "high": 0.7}},
        "baseline": {"support_rate": 0.25, "f1": 0.4, "accuracy": 0.7, "distinct": 5},
        "vs_baseline": {"support_rate": {"value": 0.75, "low": 0.6, "high": 0.9},
                        "f1": {"value": 0.1, "low": -0.05, "high": 0.25},
                        "accuracy": {"value": -0.15, "low": -0.25, "high": -0.05}},
    },
    "gemm": {"n": 4, "rows": 32, "distinct": 20, "ok_share": 0.5, "compiled_share": 0.75,
             "gflops_max": 12.5, "intervals": {"gflops_max": {"low": 1.0, "high": 12.5}}},
}}


def test_each_metric_start_to_end_with_its_interval_change_sizes_and_verdict() -> None:
    lines = change_lines(METRICS, lambda name: ("f1", "support_rate", "accuracy")
                         if name == "data_race_c" else ("ok_share", "missing", "gflops_max"))
    assert lines == [
        "data_race_c  f1  0.400 -> 0.500  change +0.100 [-0.050, +0.250]  "
        "(n=40, distinct 5 -> 2)  no change shown",
        "data_race_c  support_rate  0.250 -> 1.000 [0.900, 1.000]  "
        "change +0.750 [+0.600, +0.900] *  (n=40, distinct 5 -> 2)  better",
        "data_race_c  accuracy  0.700 -> 0.550 [0.400, 0.700]  "
        "change -0.150 [-0.250, -0.050] *  (n=40, distinct 5 -> 2)  worse",
        "gemm  ok_share  — -> 0.500  (n=4 × 8, distinct 20)",  # no baseline: no change
        # a maximum is a point, whatever interval an older file stored for it
        "gemm  gflops_max  — -> 12.500  (a maximum: a point, no interval; n=4 × 8, distinct 20)",
    ]


def test_worse_is_named_first_and_direction_follows_the_metric() -> None:
    assert verdict_lines(METRICS, lambda name: ("f1", "support_rate", "accuracy")) == [
        "worse: data_race_c accuracy", "better: data_race_c support_rate",
        "no change shown: data_race_c f1"]
    shorter = {"tasks": {"mlperf_qa": {  # fewer long answers is better; a length has no side
        "vs_baseline": {"share_over_40": {"value": -0.2, "low": -0.3, "high": -0.1},
                        "mean_chars": {"value": -9.0, "low": -12.0, "high": -4.0}}}}}
    assert verdict_lines(shorter, lambda name: ("share_over_40", "mean_chars")) == [
        "better: mlperf_qa share_over_40", "down: mlperf_qa mean_chars"]
    forbidden = {"tasks": {"gemm": {  # more kernels with a stage's forbidden technique: worse
        "vs_baseline": {"forbidden_share": {"value": 0.07, "low": 0.02, "high": 0.12}}}}}
    assert verdict_lines(forbidden, lambda name: ("forbidden_share",)) == [
        "worse: gemm forbidden_share"]


def test_a_training_value_above_the_held_out_interval_is_flagged_memorised() -> None:
    held_out = {"tasks": {"data_race_c": {"n": 200, "accuracy": 0.84, "intervals": {
        "accuracy": {"low": 0.79, "high": 0.89}}}}}
    memorised = {"tasks": {"data_race_c": {"n": 200, "accuracy": 0.97}}}
    learnt = {"tasks": {"data_race_c": {"n": 200, "accuracy": 0.88}}}
    found = generalisation_gap(memorised, held_out, lambda name: ("accuracy",))
    assert [g["memorised"] for g in found] == [True]
    assert "MEMORISED" in gap_lines(found)[0] and "train 0.970 (n=200)" in gap_lines(found)[0]
    assert [g["memorised"] for g in generalisation_gap(learnt, held_out,
                                                       lambda name: ("accuracy",))] == [False]


def test_the_form_lines_follow_each_tasks_form_metrics() -> None:
    assert [line.split()[1:3] for line in form_lines(METRICS)] == [
        ["data_race_c", "support_rate"], ["gemm", "compiled_share"], ["gemm", "ok_share"]]
    assert all(line.startswith("form  ") for line in form_lines(METRICS))
