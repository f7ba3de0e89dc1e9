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
from hargo_hpc.eval.evaluate import BASELINE_STEP, EVAL_STEP, format_table
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
    assert metrics["format"] == 2 and metrics["split"] == "eval"
    # each task's own budget (Task.max_new_tokens, under rollout.max_new_tokens 64), greedy
    assert metrics["decoding"] == {
        name: {"samples": 1, "max_new_tokens": tokens, "stop": ["\n###"], "do_sample": False}
        for name, tokens in zip(TEXT, (8, 48, 64), strict=True)}
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
        # the mean reward is the mean of the rows' rewards; every share and mean has an
        # interval around its value; the same model as baseline changes nothing, exactly
        entry = metrics["tasks"][name]
        assert entry["reward_mean"] == pytest.approx(sum(r["reward"] for r in rows) / 3)
        for key, found in entry["intervals"].items():
            if found["low"] is None:  # undefined on some resamples: one label in them
                assert key == "yes_auc", key
                continue
            assert found["n"] == 3 and found["low"] <= entry[key] <= found["high"], key
        assert set(entry["intervals"]) >= {"reward_mean", *(
            k for k, v in entry.items() if isinstance(v, float))}
        assert entry["baseline"]["reward_mean"] == entry["reward_mean"]
        assert all((d["value"], d["low"], d["high"]) == (0.0, 0.0, 0.0)
                   or (k == "yes_auc" and d["value"] == 0.0 and d["low"] is None)
                   for k, d in entry["vs_baseline"].items())
    # greedy tiny against greedy tiny: the same answers, every pair a tie, WinRate 50 %
    rate = metrics["winrate"]
    assert rate["baseline"] == "tiny" and rate["judge"] == "auto"
    assert rate["overall"] == {"n": 9, "wins": 0, "losses": 0, "ties": 9, "win_rate": 0.5,
                               "interval": {"value": 0.5, "low": 0.5, "high": 0.5, "n": 9}}
    assert (out / "predictions" / "plp_qa.baseline.jsonl").is_file()
    assert (out / "table.md").read_text() == format_table(metrics)
    assert "WinRate vs tiny (auto judge): 50.00 % [50.0, 50.0] over 9 pairs" in done.output


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
    # every held-out problem, Gemm.eval_samples = 4 sampled kernels each, all benchmarked
    assert gemm["n"] >= 1 and gemm["rows"] == 4 * gemm["n"] == gemm["scored"]
    lines = [json.loads(line) for line in
             (run_dir / "eval" / "predictions" / "gemm.jsonl").read_text().splitlines()]
    assert [line["sample"] for line in lines] == [0, 1, 2, 3] * gemm["n"]
    assert all(line["record"]["status"] != "infra_error" for line in lines)
    assert metrics["decoding"]["gemm"]["do_sample"] is True
    steps = [p.name for p in (run_dir / "handoff" / "steps").iterdir()]
    assert any(str(EVAL_STEP) in name for name in steps)  # evaluation's own handoff step
    assert any(str(BASELINE_STEP) in name for name in steps)  # and the baseline's kernels
    assert "ok_share" in gemm["baseline"] and "ok_share" in gemm["vs_baseline"]
    assert metrics["winrate"]["baseline"] == "tiny"
    assert set(metrics["winrate"]["tasks"]) == {"plp_qa"}  # kernels are measured, not judged
    assert "forbidden_share" not in gemm and "stage" not in metrics  # the plain prompt

    # under an SQD stage's prompt (issue V): its own directory and handoff beside the plain
    # evaluation's, the requests forbid what the stage forbids, two more shares
    done = hargo("eval", str(run_dir), "--stage", "no_simd", "--tasks", "gemm", "-n", "1",
                 "--json")
    assert done.exit_code == 0, done.output
    staged = metrics_of(run_dir / "eval-no_simd")
    assert staged["stage"] == "no_simd" and metrics_of(run_dir / "eval") == metrics
    assert staged["decoding"]["gemm"]["stage"] == {"name": "no_simd", "forbid": ["simd"],
                                                   "require": []}  # fmt: skip
    values = staged["tasks"]["gemm"]
    assert 0.0 <= values["forbidden_share"] <= 1.0 and 0.0 <= values["on_stage_share"] <= 1.0
    assert values["on_stage_share"] <= values["ok_share"]
    records = [json.loads(line)["record"] for line in (run_dir / "eval-no_simd" /
               "predictions" / "gemm.jsonl").read_text().splitlines()]  # fmt: skip
    assert records and all(r["forbidden"] == ["simd"] for r in records)
    done = hargo("eval", str(run_dir), "--stage", "scalar", "--tasks", "gemm")
    assert done.exit_code == 2
    assert "no SQD stage 'scalar' in this run's sqd.stages (there are: open, no_simd" in (
        done.output)


def test_bad_targets_and_baselines_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = hargo("eval", str(tmp_path / "empty"))
    assert done.exit_code == 2
    assert done.output.strip() == (f"error: {tmp_path / 'empty'}: neither a run directory (no "
                                   "config.toml), a run's checkpoint, a model directory "
                                   "(no config.json), nor 'tiny' or 'smollm2'")
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


def test_the_answering_model_is_moved_to_the_jobs_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hargo eval` on a GPU node generates on the job's GPU, not where the weights loaded (the
    CPU). No GPU here: the job's device is faked as `meta` (any non-CPU device shows the move)."""
    import torch

    from hargo_hpc.eval.evaluate import Answerer
    from hargo_hpc.train.backend import distributed

    config = validate_config({"model": {"path": "tiny"}})
    assert distributed.job_device() == torch.device("cpu")  # this machine has no accelerator
    monkeypatch.setattr(distributed, "job_device", lambda: torch.device("meta"))
    answerer = Answerer("tiny", config, batch_size=2, log=lambda _: None)
    assert {p.device.type for p in answerer.backend.model.parameters()} == {"meta"}


def test_the_jobs_device_is_the_accelerators_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from hargo_hpc.train.backend import distributed

    class FakeAccelerator:  # a test double for torch.accelerator on a GPU node
        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def device_count() -> int:
            return 4

        @staticmethod
        def current_accelerator() -> torch.device:
            return torch.device("meta")

        @staticmethod
        def current_device_index() -> int:
            return 2

    monkeypatch.setattr(torch, "accelerator", FakeAccelerator)
    assert distributed.visible_devices() == 4
    assert distributed.job_device() == torch.device("meta", 2)


def test_sampled_answers_are_independent_draws_per_example_and_sample(tmp_path: Path) -> None:
    """A model that ignores its prompt (zero embeddings: the same next-token distribution
    whatever it reads) answers two held-out examples, 3 samples each, at temperature 1: sample
    k of example 0 differs from sample k of example 1 (each (example, sample) draws its own
    stream; seeded alike they were copies), and answering again gives the same texts."""
    import torch

    from hargo_hpc.eval.evaluate import Answerer, TaskPlan, eval_examples
    from hargo_hpc.train.model.models import load_policy

    model, tokenizer = load_policy("tiny")
    with torch.no_grad():
        model.get_input_embeddings().weight.zero_()
    model.save_pretrained(tmp_path / "blind")
    tokenizer.save_pretrained(tmp_path / "blind")
    config = validate_config({"data": {"tasks": [{"name": "mlperf_qa"}], "eval_fraction": 0.2}})
    tasks, examples = eval_examples(config, "eval", 2, log=lambda _: None)
    plan = TaskPlan(examples["mlperf_qa"][:2], 3, 12, (), do_sample=True, temperature=1.0)
    answer = Answerer(str(tmp_path / "blind"), config, batch_size=8, log=lambda _: None)
    texts = answer(tasks, {"mlperf_qa": plan})["mlperf_qa"]
    assert len(texts) == 6
    for k in range(3):
        assert texts[k] != texts[3 + k], (k, texts)
    assert answer(tasks, {"mlperf_qa": plan})["mlperf_qa"] == texts
