"""`hargo eval MODEL_OR_RUN_DIR`: the tiny model answers held-out prompts; its metrics equal
`hargo eval score` of the predictions it wrote; a run directory is evaluated on its own split
against its starting model; GEMM goes through a real bench worker; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hargo_hpc.cli import main
from hargo_hpc.config import validate_config
from hargo_hpc.eval.evaluate import EVAL_STEP, format_table
from hargo_hpc.train import loop

TEXT = ("data_race_c", "mlperf_qa", "plp_qa")


def hargo(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def metrics_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "metrics.json").read_text())


def test_the_metrics_equal_hargo_eval_score_of_the_predictions(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    done = hargo("eval", "tiny", "--tasks", ",".join(TEXT), "-n", "3", "--baseline", "tiny",
                 "-o", str(out))
    assert done.exit_code == 0, done.output
    metrics = metrics_of(out)
    assert metrics["format"] == 1 and metrics["split"] == "eval"
    assert metrics["decoding"] == {"do_sample": False, "max_new_tokens": 64}
    assert list(metrics["tasks"]) == list(TEXT)
    for name in TEXT:
        file = out / "predictions" / f"{name}.jsonl"
        rows = [json.loads(line) for line in file.read_text().splitlines()]
        assert len(rows) == metrics["tasks"][name]["n"] == 3
        assert all({"id", "instruction", "input", "output", "prediction"} <= r.keys()
                   for r in rows)
        scored = hargo("eval", "score", name, str(file), "--json")
        assert scored.exit_code == 0, scored.output
        for key, value in json.loads(scored.output).items():
            assert metrics["tasks"][name][key] == pytest.approx(value), (name, key)
    # greedy tiny against greedy tiny: the same answers, every pair a tie, WinRate 50 %
    rate = metrics["winrate"]
    assert rate["baseline"] == "tiny" and rate["judge"] == "auto"
    assert rate["overall"] == {"n": 9, "wins": 0, "losses": 0, "ties": 9, "win_rate": 0.5}
    assert (out / "predictions" / "plp_qa.baseline.jsonl").is_file()
    assert (out / "table.md").read_text() == format_table(metrics)
    assert "WinRate vs tiny (auto judge): 50.00 % over 9 pairs" in done.output


def test_a_run_directory_is_evaluated_on_its_split_against_its_starting_model(
        tmp_path: Path) -> None:
    """A trained run: its export, its eval split (examples training never drew), WinRate
    against model.path; GEMM's kernels benchmarked by a real local worker."""
    config = validate_config({
        "run": {"name": "r", "dir": str(tmp_path), "seed": 3},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 12}, {"name": "gemm"}],
                 "eval_fraction": 0.25},
        "algorithm": {"name": "grpo"},
        "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 12},
        "training": {"lr": 1e-3, "steps": 1, "micro_batch_size": 4},
        "handoff": {"local_workers": 1}})
    result = loop.train(config, log=lambda _: None, progress=False)
    run_dir = result.run_dir
    done = hargo("eval", str(run_dir), "--json")
    assert done.exit_code == 0, done.output
    metrics = metrics_of(run_dir / "eval")
    assert json.loads(done.stdout) == metrics
    assert (metrics["model"], metrics["run_dir"]) == (str(run_dir / "export"), str(run_dir))
    assert (metrics["method"], metrics["seed"]) == ("grpo", 3)
    trained_on = {json.loads(line)["id"] for path in (run_dir / "rollouts").iterdir()
                  for line in path.read_text().splitlines()}
    held_out = [json.loads(line)["id"] for line in
                (run_dir / "eval" / "predictions" / "plp_qa.jsonl").read_text().splitlines()]
    assert held_out and not set(held_out) & trained_on
    assert metrics["tasks"]["plp_qa"]["n"] == 3  # 12 items, eval_fraction 0.25
    gemm = metrics["tasks"]["gemm"]
    assert gemm["n"] >= 1 and gemm["scored"] == gemm["n"]
    records = [json.loads(line)["record"] for line in
               (run_dir / "eval" / "predictions" / "gemm.jsonl").read_text().splitlines()]
    assert all(r["status"] != "infra_error" for r in records)
    steps = [p.name for p in (run_dir / "handoff" / "steps").iterdir()]
    assert any(str(EVAL_STEP) in name for name in steps)  # evaluation's own handoff step
    assert metrics["winrate"]["baseline"] == "tiny"
    assert set(metrics["winrate"]["tasks"]) == {"plp_qa"}  # kernels are measured, not judged


def test_bad_targets_and_baselines_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = hargo("eval", str(tmp_path / "empty"))
    assert done.exit_code == 2
    assert done.output.strip() == (f"error: {tmp_path / 'empty'}: neither a run directory (no "
                                   "config.toml) nor a model directory (no config.json), nor "
                                   "'tiny' or 'smollm2'")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text('[[data.tasks]]\nname = "plp_qa"\n')
    done = hargo("eval", str(run_dir))
    assert done.exit_code == 2 and "the run has no exported model yet" in done.output
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.toml").write_text('[[data.tasks]]\nname = "mlperf_qa"\n')
    done = hargo("eval", "tiny", "--tasks", "plp_qa", "--baseline", str(other))
    assert done.exit_code == 2
    assert f"--baseline {other}: its run has no task 'plp_qa'" in done.output
    done = hargo("eval", "tiny", "--tasks", "plp_qa", "-n", "0")
    assert done.exit_code == 2 and "-n" in done.output
    assert not (tmp_path / "eval").exists()
