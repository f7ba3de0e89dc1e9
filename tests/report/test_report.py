"""`hargo report`: the method table from hand-written run directories, its renderings, the
plots, the HTML page and the command's errors.

Three runs, every number chosen by hand: `hargo` seed 0 (four tasks with GEMM and SQD, HARGO's
weight shares, an evaluation with a WinRate), `grpo` seed 1 (three tasks, no GEMM, an
evaluation) and `grpo` seed 0 (three tasks, no evaluation, its directory named `run<0>&c` and
no `[run] name`, so the name must be escaped in HTML).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hargo_hpc.cli import main
from hargo_hpc.report import plots
from hargo_hpc.report.page import render_page
from hargo_hpc.report.table import (
    MISSING,
    ReportError,
    load_run,
    load_runs,
    method_table,
    to_dict,
    to_json,
    to_markdown,
)

HARGO = shutil.which("hargo") or str(Path(sys.executable).parent / "hargo")
THREE = ("data_race_c", "mlperf_qa", "plp_qa")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", autouse=True)
def matplotlib_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One MPLCONFIGDIR for the module (matplotlib's font cache is built once)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MPLCONFIGDIR", str(tmp_path_factory.mktemp("mpl")))
        yield


def config_toml(method: str, seed: int, tasks: tuple[str, ...], name: str | None) -> str:
    run = f'[run]\n{f"name = {name!r}" if name else ""}\nseed = {seed}\n'.replace("'", '"')
    tasks_toml = "".join(f'[[data.tasks]]\nname = "{t}"\n\n' for t in tasks)
    return f'{run}\n[algorithm]\nname = "{method}"\n\n{tasks_toml}'


def record(step: int, reward: float | None, tasks: tuple[str, ...],
           share: dict[str, float] | None = None, gflops: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"step": step, "reward": reward, "sqd/stage_mean": None}
    for i, task in enumerate(tasks):
        out[f"tasks/{task}/reward_mean"] = 0.1 * step + 0.01 * i
        out[f"tasks/{task}/completion_length"] = 20.0 + step + i
        out[f"tasks/{task}/contrast_share"] = 1.0 / (1 + step + i)
        out[f"tasks/{task}/weight_share"] = share[task] if share else None
        out[f"tasks/{task}/adv_share"] = 1 / len(tasks) if share else None
    if "gemm" in tasks:
        out["tasks/gemm/gflops_mean"] = gflops
        out["tasks/gemm/gflops_max"] = None if gflops is None else gflops * 1.5
    return out


def race(f1: float, adjusted: float) -> dict[str, Any]:
    return {"n": 20, "accuracy": 0.9, "precision": 0.9, "recall": 0.9, "f1": f1,
            "adjusted_f1": adjusted, "support_rate": 0.95}


def eval_json(method: str, seed: int, tasks: dict[str, Any], winrate: float | None) -> str:
    win = None if winrate is None else {
        "baseline": "runs/base/export", "judge": "auto",
        "overall": {"n": 40, "wins": 20, "losses": 10, "ties": 10, "win_rate": winrate},
        "tasks": {}}
    return json.dumps({"format": 1, "model": "export", "run_dir": None, "method": method,
                       "seed": seed, "split": "eval",
                       "decoding": {"do_sample": False, "max_new_tokens": 64},
                       "tasks": tasks, "winrate": win})


def write_run(root: Path, *, config: str | None = None, records: list[dict[str, Any]] | None = None,
              evaluation: str | None = None, sqd: list[dict[str, Any]] | None = None) -> Path:
    root.mkdir(parents=True)
    if config is not None:
        (root / "config.toml").write_text(config)
    if records is not None:
        (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records)
                                            + '{"step": 9, "rew')  # a torn last line
    if evaluation is not None:
        (root / "eval").mkdir()
        (root / "eval" / "metrics.json").write_text(evaluation)
    if sqd is not None:
        (root / "sqd").mkdir()
        (root / "sqd" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sqd))
        (root / "sqd" / "state.json").write_text(json.dumps(
            {"stages": ["scalar", "blocking", "simd", "all"], "problems": {}, "archive": {}}))
    return root


FOUR = (*THREE, "gemm")
SHARES = {"data_race_c": 0.4, "mlperf_qa": 0.3, "plp_qa": 0.2, "gemm": 0.1}


def sqd_result(step: int, stage: str, status: str, gflops: float | None) -> dict[str, Any]:
    return {"step": step, "problem": "dgemm-256", "stage": stage, "status": status,
            "gflops": gflops, "ratio": None if gflops is None else gflops / 30,
            "reward": 1.0, "techniques": []}


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    hargo = write_run(
        tmp_path / "runs" / "mix-hargo", config=config_toml("hargo", 0, FOUR, "mix-hargo"),
        records=[record(1, 0.25, FOUR, SHARES, 4.0), record(2, 0.4321, FOUR, SHARES, 6.0)],
        evaluation=eval_json("hargo", 0, {
            "data_race_c": race(0.913, 0.8674),
            "mlperf_qa": {"n": 20, "exact_match": 0.35, "f1": 0.51234, "mean_chars": 31.0,
                          "share_over_40": 0.1},
            "plp_qa": {"n": 20, "similarity": 0.71234, "mean_chars": 80.0},
            "gemm": {"n": 8, "scored": 8, "ok_share": 0.75, "gflops_mean": 8.0,
                     "gflops_max": 12.345, "ratio_mean": 0.3, "ratio_max": 0.4567,
                     "fast_0.5": 0.125, "log2_ratio_mean": -1.7371, "reward_mean": 20.0,
                     "statuses": {"ok": 6, "compile_error": 2}}},
            winrate=0.625),
        sqd=[sqd_result(1, "scalar", "ok", 3.0), sqd_result(1, "scalar", "compile_error", None),
             sqd_result(2, "blocking", "ok", 7.5), sqd_result(2, "blocking", "ok", 6.0)])
    grpo1 = write_run(
        tmp_path / "runs" / "mix-grpo-1", config=config_toml("grpo", 1, THREE, "mix-grpo-1"),
        records=[record(1, 0.1, THREE), record(2, 0.2, THREE), record(2, -0.5, THREE)],
        evaluation=eval_json("grpo", 1, {
            "data_race_c": race(0.8, None),  # type: ignore[arg-type]
            "mlperf_qa": {"n": 20, "exact_match": 0.2, "f1": 0.4, "mean_chars": 50.0,
                          "share_over_40": 0.55},
            "plp_qa": {"n": 20, "similarity": 0.6, "mean_chars": 90.0}}, winrate=None))
    grpo0 = write_run(tmp_path / "runs" / "run<0>&c", config=config_toml("grpo", 0, THREE, None),
                      records=[record(1, 0.05, THREE), record(2, 0.15, THREE)])
    return [hargo, grpo1, grpo0]


def test_table_rows_sorted_and_values_hand_computed(runs: list[Path]) -> None:
    table = method_table(load_run(p) for p in runs)
    assert [(r.method, r.seed, r.run) for r in table.rows] == [
        ("grpo", 0, "run<0>&c"), ("grpo", 1, "mix-grpo-1"), ("hargo", 0, "mix-hargo")]
    shown = {row.method + str(row.seed): {c.key: c.text(row.values[c.key]) for c in table.columns}
             for row in table.rows}
    assert shown["hargo0"] == {
        "winrate": "62.50", "race_c_f1": "91.30", "race_c_adj_f1": "86.74",
        "race_fortran_f1": MISSING, "race_fortran_adj_f1": MISSING, "mlperf_em": "35.00",
        "mlperf_f1": "51.23", "mlperf_over_40": "10.00", "plp_similarity": "0.712",
        "gemm_ok": "75.00", "gemm_fast_0.5": "12.50", "gemm_log2_ratio": "-1.74",
        "gemm_reward": "20.000", "gemm_best_gflops": "12.3", "gemm_best_ratio": "45.67",
        "last_reward": "0.432"}
    # grpo s1: no GEMM, a null adjusted F1, no WinRate; its step 2 was written twice: the last wins
    assert shown["grpo1"]["race_c_f1"] == "80.00"
    assert shown["grpo1"]["race_c_adj_f1"] == MISSING
    assert shown["grpo1"]["mlperf_over_40"] == "55.00"
    assert shown["grpo1"]["plp_similarity"] == "0.600"
    assert shown["grpo1"]["winrate"] == MISSING
    assert shown["grpo1"]["gemm_ok"] == MISSING
    assert shown["grpo1"]["last_reward"] == "-0.500"
    # grpo s0: training only
    assert {k for k, v in shown["grpo0"].items() if v != MISSING} == {"last_reward"}
    assert shown["grpo0"]["last_reward"] == "0.150"


def test_notes_name_the_missing_tasks_and_evaluations(runs: list[Path]) -> None:
    notes = method_table(load_runs(runs)).notes
    assert "gemm: not a task of grpo s0, grpo s1; its columns are empty there" in notes
    assert "no run has data_race_fortran: those columns are empty" in notes
    assert any(n.startswith("no eval/metrics.json") and "grpo s0" in n and "grpo s1" not in n
               for n in notes)
    assert "WinRate: against runs/base/export (judge auto); ties count half" in notes
    assert "no WinRate for grpo s1 (evaluated without a baseline)" in notes


def test_markdown_and_json_renderings(runs: list[Path]) -> None:
    table = method_table(load_runs(runs))
    markdown = to_markdown(table)
    lines = markdown.splitlines()
    assert lines[0].startswith("| method | seed | run | WinRate (%) | C F1 (%) |")
    assert lines[1].startswith("|---|---:|---|---:|")
    assert lines[4] == ("| hargo | 0 | mix-hargo | 62.50 | 91.30 | 86.74 | — | — | 35.00 | "
                        "51.23 | 10.00 | 0.712 | 75.00 | 12.50 | -1.74 | 20.000 | 12.3 | 45.67 | "
                        "0.432 |")
    assert "- gemm: not a task of grpo s0, grpo s1; its columns are empty there" in lines
    data = json.loads(to_json(table))
    assert data == to_dict(table)
    hargo = data["rows"][2]
    assert (hargo["method"], hargo["seed"], hargo["race_c_f1"], hargo["plp_similarity"],
            hargo["gemm_best_gflops"], hargo["race_fortran_f1"]) == ("hargo", 0, 91.3, 0.712,
                                                                    12.3, None)
    assert [c["key"] for c in data["columns"]][:2] == ["winrate", "race_c_f1"]
    assert data["columns"][1]["unit"] == "%"


def test_plots_and_page(runs: list[Path], tmp_path: Path) -> None:
    loaded = load_runs(runs)
    out = tmp_path / "out"
    out.mkdir()
    written = plots.write_plots(loaded, out)
    assert [p.name for p in written] == list(plots.PLOT_FILES)
    for png in written:
        assert png.read_bytes().startswith(PNG_MAGIC)
    assert sorted(p.name for p in out.iterdir()) == sorted(plots.PLOT_FILES)  # no temp left
    assert plots.plot_notes(loaded) == []
    page = render_page(method_table(loaded), written)
    assert page.count("data:image/png;base64,") == len(written)
    assert "run&lt;0&gt;&amp;c" in page and "run<0>" not in page


def test_plots_skip_weight_share_and_gemm_without_them(runs: list[Path], tmp_path: Path
                                                       ) -> None:
    loaded = load_runs(runs[1:])  # the two GRPO runs
    notes = plots.plot_notes(loaded)
    assert [n.split(" ")[0] for n in notes] == ["weight_share.png", "gemm_gflops.png"]
    out = tmp_path / "out"
    out.mkdir()
    assert [p.name for p in plots.write_plots(loaded, out)] == [
        "reward.png", "contrast.png", "completion_length.png"]


def test_gemm_without_sqd_uses_the_step_means(tmp_path: Path) -> None:
    run = write_run(tmp_path / "g", config=config_toml("dapo", 2, ("gemm",), "g"),
                    records=[record(1, 1.0, ("gemm",), gflops=2.0),
                             record(2, 2.0, ("gemm",), gflops=None)])
    loaded = load_runs([run])
    assert plots.series(loaded[0], "tasks/gemm/gflops_mean") == ([1], [2.0])
    assert plots.sqd_points(loaded[0]) == []
    written = plots.write_plots(loaded, tmp_path)
    assert plots.GFLOPS in [p.name for p in written]


def test_matplotlib_config_goes_to_a_private_temporary_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPLCONFIGDIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    chosen = Path(plots.matplotlib_config_dir())
    assert chosen.parent == tmp_path and chosen.name.startswith("hargo-matplotlib-")
    assert chosen.stat().st_mode & 0o777 == 0o700
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mine"))
    assert plots.matplotlib_config_dir() == str(tmp_path / "mine")


def test_load_run_errors_and_sweeps(runs: list[Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReportError, match=r"empty: not a run directory \(no config.toml, "):
        load_run(empty)
    with pytest.raises(ReportError, match="no such directory"):
        load_run(tmp_path / "nope")
    bad = write_run(tmp_path / "bad", evaluation='{"format": 3}')
    with pytest.raises(ReportError, match="format 3; this report reads formats 1, 2"):
        load_run(bad)
    # a sweep's submission directory stands for its run directories
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "config.toml").write_text('[run]\nname = "sweep"\n[sweep]\n"run.seed" = [0, 1]\n')
    (sweep / "handoff").mkdir()
    for seed in (0, 1):
        write_run(sweep / f"seed-{seed}", config=config_toml("rloo", seed, THREE, "sweep"),
                  records=[record(1, 0.5, THREE)])
    found = load_runs([sweep, sweep / "seed-1"])
    assert [(r.name, r.seed) for r in found] == [("sweep/seed-0", 0), ("sweep/seed-1", 1)]


def test_command_writes_every_file(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = CliRunner().invoke(main, ["report", *map(str, runs), "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert "| hargo | 0 | mix-hargo | 62.50 | 91.30 |" in done.stdout
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == sorted(plots.PLOT_FILES)
    for name in ("report.md", "report.json", "report.html"):
        assert (out / name).is_file() and f"wrote {out / name}" in done.stdout
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(pngs)
    for method in ("hargo", "grpo"):
        assert f"<td>{method}</td>" in page
    assert "http" not in page and "<script" not in page and "<link" not in page
    assert "| hargo | 0 | mix-hargo |" in (out / "report.md").read_text()
    assert json.loads((out / "report.json").read_text())["rows"][2]["gemm_best_ratio"] == 45.67
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*plots.PLOT_FILES, "report.md", "report.json", "report.html"])

    # again with the GRPO runs only: the plots without data now are removed
    done = CliRunner().invoke(main, ["report", str(runs[1]), str(runs[2]), "-o", str(out),
                                     "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert [r["method"] for r in data["rows"]] == ["grpo", "grpo"]
    assert str(out / "report.html") in data["files"]
    assert "weight_share.png not drawn: no run has HARGO weight shares " \
           "(tasks/<task>/weight_share)" in data["notes"]
    assert not (out / "weight_share.png").exists() and not (out / "gemm_gflops.png").exists()
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # reward, contrast, completion length


def test_not_a_run_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    done = subprocess.run([HARGO, "report", "notes", "-o", "out"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == ("error: notes: not a run directory (no config.toml, metrics.jsonl "
                           "or eval/metrics.json)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]  # nothing written


def test_no_run_dir_is_a_usage_error() -> None:
    done = CliRunner().invoke(main, ["report"])
    assert done.exit_code == 2
    assert "Missing argument 'RUN_DIR...'" in done.output


def test_help_explains_the_columns() -> None:
    done = CliRunner().invoke(main, ["report", "--help"])
    assert done.exit_code == 0
    for text in ("WinRate (%)", "C F1, C adj. F1", "MLPerf >40 chars", "PLP similarity",
                 "GEMM best of ref.", "GEMM fast_0.5", "GEMM log2 speed    ", "last reward",
                 "--json", "-o, --output"):
        assert text in done.output


def test_a_run_with_only_its_evaluation(tmp_path: Path) -> None:
    run = write_run(tmp_path / "evaluated", evaluation=eval_json("sft", 3, {
        "plp_qa": {"n": 5, "similarity": 0.5, "mean_chars": 70.0}}, winrate=None))
    loaded = load_run(run)
    assert (loaded.method, loaded.seed, loaded.name, loaded.tasks) == (
        "sft", 3, "evaluated", ("plp_qa",))
    row = method_table([loaded]).rows[0]
    assert row.values["plp_similarity"] == 0.5 and row.values["last_reward"] is None
    assert len(plots.plot_notes([loaded])) == len(plots.PLOT_FILES)  # no records: none drawn


def test_the_table_and_the_command_load_neither_torch_nor_matplotlib() -> None:
    code = ("import sys, json; import hargo_hpc.cli.report, hargo_hpc.report.page; "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'matplotlib', 'numpy'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []


RACE_CONFIG = ('[run]\nname = "r"\n[algorithm]\nname = "hargo"\n'
               '[[data.tasks]]\nname = "data_race_c"\n')


def race_eval() -> dict[str, Any]:
    return {
        "format": 2, "tasks": {"data_race_c": {
            "n": 200, "rows": 200, "distinct": 2, "f1": 0.6, "adjusted_f1": 0.5,
            "intervals": {"f1": {"value": 0.6, "low": 0.52, "high": 0.68, "n": 200}},
            "baseline": {"f1": 0.5, "distinct": 2},
            "vs_baseline": {"f1": {"value": 0.1, "low": 0.02, "high": 0.18, "n": 200},
                            "adjusted_f1": {"value": 0.05, "low": -0.01, "high": 0.11,
                                            "n": 200}}}},
        "winrate": {"baseline": "sft", "judge": "auto", "overall": {
            "n": 150, "wins": 45, "ties": 75, "losses": 30, "win_rate": 0.55,
            "interval": {"value": 0.55, "low": 0.51, "high": 0.59, "n": 150}}}}


def test_cells_show_intervals_and_significant_changes_are_bold(tmp_path: Path) -> None:
    """Format 2: a cell is the value, its interval (in the column's unit) and n, the change
    table holds the paired change against the baseline, bold where it excludes 0; WinRate's
    change is its distance from 50 % and its n the judged pairs."""
    run = write_run(tmp_path / "r", config=RACE_CONFIG, evaluation=json.dumps(race_eval()))
    table = method_table(load_runs([run]))
    text = to_markdown(table)
    assert "| 60.00 [52.00, 68.00] (n=200) |" in text  # C F1, in percent
    assert "| 55.00 [51.00, 59.00] (n=150) |" in text  # WinRate: its pairs
    assert "**+10.00 [+2.00, +18.00] (n=200)**" in text  # C F1's change excludes 0
    assert "| +5.00 [-1.00, +11.00] (n=200) |" in text  # adjusted F1's does not: not bold
    assert "**+5.00 [+1.00, +9.00] (n=150)**" in text  # WinRate 55 % [51, 59]: beats 50 %
    assert "evaluated on n examples per task: data_race_c 200" in text
    assert "hargo s?: distinct completions: data_race_c 2 of 200 (baseline 2)" in text
    row = to_dict(table)["rows"][0]
    assert row["vs_baseline"]["race_c_f1"] == {"value": 10.0, "interval": [2.0, 18.0],
                                               "significant": True}
    assert row["sizes"]["race_c_f1"] == {"n": 200, "rows": 200, "distinct": 2,
                                         "baseline_distinct": 2}


def test_the_html_cells_show_the_interval_and_n(tmp_path: Path) -> None:
    """The page's method table holds what its note promises (value, interval, n), and the
    change table is there too, bold as <strong>."""
    run = write_run(tmp_path / "r", config=RACE_CONFIG, evaluation=json.dumps(race_eval()))
    page = render_page(method_table(load_runs([run])), [])
    assert '<td class="num">60.00 [52.00, 68.00] (n=200)</td>' in page
    assert '<td class="num">55.00 [51.00, 59.00] (n=150)</td>' in page
    assert "<h2>Change against the baseline</h2>" in page
    assert '<td class="num"><strong>+10.00 [+2.00, +18.00] (n=200)</strong></td>' in page


def gemm_eval(**extra: Any) -> dict[str, Any]:
    """GEMM: 12 problems × 8 kernels, 26 of the 96 distinct (30 of the baseline's); an older
    evaluation's intervals and changes of the maxima, which the report must ignore."""
    interval = {"value": 0.25, "low": 0.1, "high": 0.4, "n": 12}
    return {"format": 2, "tasks": {"gemm": {
        "n": 12, "rows": 96, "distinct": 26, "ok_share": 0.5, "fast_0.5": 0.25,
        "log2_ratio_mean": -1.5, "reward_mean": 0.75, "gflops_max": 12.345, "ratio_max": 0.4567,
        "intervals": {"fast_0.5": interval, "log2_ratio_mean": {
            "value": -1.5, "low": -2.0, "high": -1.0, "n": 12},
            "reward_mean": {"value": 0.75, "low": 0.5, "high": 1.0, "n": 12},
            "gflops_max": {"value": 12.345, "low": 8.0, "high": 12.345, "n": 12},
            "ratio_max": {"value": 0.4567, "low": 0.3, "high": 0.4567, "n": 12}},
        "baseline": {"distinct": 30},
        "vs_baseline": {"fast_0.5": {"value": 0.2, "low": 0.05, "high": 0.35, "n": 12},
                        "gflops_max": {"value": 2.0, "low": 1.0, "high": 3.0, "n": 12}},
        **extra}}}


def test_maxima_are_points_and_gemm_cells_count_distinct_kernels(tmp_path: Path) -> None:
    run = write_run(tmp_path / "g", config=config_toml("hargo", 0, ("gemm",), "g"),
                    evaluation=json.dumps(gemm_eval()))
    table = method_table(load_runs([run]))
    row = table.rows[0]
    cells = {c.key: c.text(row.values[c.key], row.intervals.get(c.key),
                           size=row.size_text(c.key)) for c in table.columns}
    assert cells["gemm_best_gflops"] == "12.3" and cells["gemm_best_ratio"] == "45.67"
    assert cells["gemm_fast_0.5"] == "25.00 [10.00, 40.00] (n=12, 26 distinct of 96)"
    assert cells["gemm_log2_ratio"] == "-1.50 [-2.00, -1.00] (n=12, 26 distinct of 96)"
    assert cells["gemm_reward"] == "0.750 [0.500, 1.000] (n=12, 26 distinct of 96)"
    text = to_markdown(table)
    assert "**+20.00 [+5.00, +35.00] (n=12, 26 distinct of 96, baseline 30)**" in text
    assert "GEMM best GFLOPS" not in text.split("Change against the baseline")[1]
    assert "hargo s0: distinct completions: gemm 26 of 96 (baseline 30)" in text
    data = to_dict(table)["rows"][0]
    assert {"gemm_best_gflops", "gemm_best_ratio"}.isdisjoint(
        {*data["intervals"], *data["vs_baseline"]})


def test_the_point_columns_are_the_tasks_points() -> None:
    from hargo_hpc.report.table import COLUMNS
    from hargo_hpc.tasks.registry import task_class

    for column in COLUMNS:
        if column.task is not None:
            points = task_class(column.task).points
            assert column.point == (column.source[-1] in points), column.key


def write_race_predictions(run: Path, answers: list[str], baseline: list[str]) -> None:
    """data_race_c answers of 40 examples (labels yes, no, ...) and its baseline's."""
    folder = run / "eval" / "predictions"
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, texts in (("", answers), (".baseline", baseline)):
        lines = [json.dumps({"id": f"data_race_c:{i}", "sample": 0, "instruction": "q",
                             "input": "", "output": ["yes", "no"][i % 2], "prediction": t})
                 for i, t in enumerate(texts)]
        (folder / f"data_race_c{suffix}.jsonl").write_text("\n".join(lines) + "\n")


def sweep_run(root: Path, method: str, seed: int, right: int) -> Path:
    """A run of `method` and `seed` whose answers get the first `right` of the 20 'yes'
    examples right (its baseline answers 'no' throughout)."""
    answers = ["no"] * 40
    for i in range(0, 2 * right, 2):
        answers[i] = "yes"
    run = write_run(root / f"{method}-{seed}", config=config_toml(method, seed, ("data_race_c",),
                                                                   f"{method}-{seed}"),
                    evaluation=json.dumps({"format": 2, "tasks": {"data_race_c": {
                        "n": 40, "rows": 40, "distinct": 2, "accuracy": 0.5}}}))
    write_race_predictions(run, answers, ["no"] * 40)
    return run


def test_a_sweep_pools_each_method_over_its_seeds(tmp_path: Path) -> None:
    """hargo with 3 seeds: pooled with an interval over seeds; grpo with 2: the per-seed
    statement; both against the baseline, and hargo − grpo of each seed."""
    for seed, (hargo, grpo) in enumerate(((20, 5), (16, 4), (18, 6))):
        sweep_run(tmp_path, "hargo", seed, hargo)
        if seed < 2:
            sweep_run(tmp_path, "grpo", seed, grpo)
    out = tmp_path / "report"
    done = CliRunner().invoke(main, ["report", *map(str, sorted(tmp_path.glob("*-*"))),
                                     "-o", str(out)])
    assert done.exit_code == 0, done.output
    text = (out / "report.md").read_text()
    change, against = text.split("## Against grpo")
    # F1 (every 'yes' right, recall r = right / 20): 2r / (1 + r); the baseline's is 0.
    # hargo: 1, 0.8889, 0.9474 (mean 0.9454); grpo: 0.4, 0.3333
    hargo = next(line for line in change.splitlines() if line.startswith("| hargo | 0, 1, 2 |"))
    assert "| over 3 seeds | **+94.54 [" in hargo
    assert "] (3 seeds of n=40); s0 +100.00, s1 +88.89, s2 +94.74: better**" in hargo
    grpo = next(line for line in change.splitlines() if line.startswith("| grpo | 0, 1 |"))
    assert "| s0 +40.00, s1 +33.33: better in 2 of 2 seeds (too few to pool) |" in grpo
    # hargo − grpo: seeds 0 and 1 only (grpo has no seed 2): +0.6, +0.5556
    pooled = next(line for line in against.splitlines() if "| over 2 seeds |" in line)
    assert pooled.startswith("| hargo | 0, 1 |")
    assert "| s0 +60.00, s1 +55.56: better in 2 of 2 seeds (too few to pool) |" in pooled
    page = (out / "report.html").read_text()
    assert "<h2>Against grpo</h2>" in page and "over 3 seeds" in page
    data = json.loads((out / "report.json").read_text())
    found = {p["method"]: p for p in data["pooled_vs_baseline"]}
    assert found["hargo"]["race_c_adj_f1"]["pooled"]["value"] is not None
    assert found["grpo"]["seeds"] == [0, 1] and found["grpo"]["race_c_f1"]["pooled"] is None


def test_a_columns_verdict_follows_its_metrics_good_direction() -> None:
    from hargo_hpc.eval.intervals import mean_metric, over_seeds
    from hargo_hpc.report.table import COLUMNS

    by_key = {c.key: c for c in COLUMNS}
    assert by_key["mlperf_over_40"].direction() == "lower"  # shorter answers are the aim
    assert by_key["mlperf_f1"].direction() == by_key["winrate"].direction() == "higher"
    rose = over_seeds([(mean_metric([c] * 30), 30) for c in (0.1, 0.2, 0.3)])
    assert by_key["mlperf_over_40"].pooled_text(rose, [0, 1, 2]).endswith(": worse")
    assert by_key["mlperf_f1"].pooled_text(rose, [0, 1, 2]).endswith(": better")
