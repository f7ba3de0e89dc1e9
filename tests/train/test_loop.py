"""The RL loop on the tiny model: two steps of every preset, HARGO-off = GRPO, micro-batches that
add up, num_iterations, unscored rows, the documented metric names, and an exact resume after
`kill -9` across an epoch boundary of the prompt sampler."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from numerics import assert_same_adam_update, grad_rtol
from safetensors.torch import load_file
from waiting import wait_until

from hargo_hpc.algorithms.presets import PRESETS
from hargo_hpc.config import ExperimentConfig, validate_config
from hargo_hpc.runs import RunLayout
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.model.models import tiny_dir

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]
HARGO = str(Path(sys.executable).parent / "hargo")


def make_config(tmp_path: Path, name: str = "t", **sections: dict[str, Any]) -> ExperimentConfig:
    """A small run: plp_qa with the plain cosine as its reward (`similarity_baseline =
    "none"`: continuous, so every group of the untrained model has contrast, DPO has pairs and
    dynamic sampling keeps groups; the default pays it nothing beyond the question), 2 prompts
    x G 4, 12 new tokens."""
    raw: dict[str, Any] = {
        "run": {"name": name, "dir": str(tmp_path), "seed": 0},
        "model": {"path": "tiny"},
        "rewards": {"similarity_baseline": "none"},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 12}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 4, "prompts_per_step": 2, "max_new_tokens": 12},
        "training": {"lr": 1e-3, "steps": 2, "micro_batch_size": 4, "zero_stage": 2},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return validate_config(raw)


def run(config: ExperimentConfig, **kwargs: Any) -> tuple[loop.TrainResult, list[dict]]:
    result = loop.train(config, log=lambda _: None, progress=False, **kwargs)
    return result, m.read_records(result.metrics)


def initial_weights() -> dict[str, torch.Tensor]:
    return load_file(tiny_dir() / "model.safetensors")


def exported(result: loop.TrainResult) -> dict[str, torch.Tensor]:
    assert result.export is not None
    return load_file(result.export / "model.safetensors")


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> int:
    assert before.keys() == after.keys()
    return sum(not torch.equal(before[k], after[k]) for k in before)


# ---------------------------------------------------------------- every preset


@pytest.mark.parametrize("name", list(PRESETS))
def test_two_steps_of_every_preset(tmp_path: Path, name: str) -> None:
    result, records = run(make_config(tmp_path, algorithm={"name": name}))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert set(m.STEP_KEYS) <= record.keys()
        assert math.isfinite(record["loss"])
        assert record["rows/scored"] == 8 and record["rows/in_loss"] >= 1
        assert record["optimizer_steps"] == record["step"]  # 8 rows, accum 2: one per step
        for key in ("count", "reward_mean", "completion_length"):
            assert record[f"tasks/plp_qa/{key}"] is not None
        assert record["tasks/plp_qa/reward_mean"] == pytest.approx(record["reward"])
        assert 0.0 <= record["tasks/plp_qa/similarity"] <= 1.0  # the metric: the raw cosine
    algorithm = PRESETS[name]
    last = records[-1]
    assert (last["kl"] is not None) == (algorithm.needs_reference and algorithm.loss in
                                        ("ppo", "pg"))
    assert (last["hargo/weight_mean"] is not None) == (algorithm.hargo is not None)
    assert (last["dpo/pairs"] is not None) == (algorithm.loss == "dpo")
    assert (last["sft/nll"] is not None) == (algorithm.loss == "sft")
    if algorithm.loss == "dpo":
        assert last["dpo/pairs"] == 2  # continuous rewards: every group has a best and a worst
    if algorithm.hargo is not None:
        assert last["hargo/weight_mean"] == pytest.approx(1.0, abs=1e-5)
    if algorithm.kl_in_reward:
        assert records[-1]["shaping/kl_penalty"] != 0.0  # the policy moved off the reference
    # parameters changed, and the export, the checkpoint and the finished marker are there
    assert changed(initial_weights(), exported(result)) > 0
    assert result.checkpoint is not None and result.checkpoint.name == "step_000002"
    assert json.loads(RunLayout(result.run_dir).finished.read_text())["step"] == 2
    rollouts = m.read_records(result.run_dir / "rollouts" / "step_000002.jsonl")
    assert len(rollouts) == 8 and {r["task"] for r in rollouts} == {"plp_qa"}
    assert {"prompt", "completion", "reward", "task", "weight"} <= rollouts[0].keys()


def test_every_metric_name_is_documented(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "training.md").read_text()
    documented = set(re.findall(r"`([a-z_]+(?:/[a-z_<>]+)*)`", doc))
    assert set(m.STEP_KEYS) <= documented, set(m.STEP_KEYS) - documented
    assert {f"tasks/<task>/{k}" for k in m.TASK_KEYS} <= documented
    assert {"tasks/<task>/<metric>", "bench/status/<status>"} <= documented
    assert set(m.SFT_KEYS) <= documented
    _, records = run(make_config(tmp_path, training={"steps": 1}))
    for key in records[0]:
        generic = re.sub(r"^tasks/[a-z_]+/", "tasks/<task>/", key)
        assert key in m.STEP_KEYS or generic.startswith("tasks/<task>/"), key


# ---------------------------------------------------------------- the update's arithmetic


def test_hargo_with_both_signals_off_is_grpo_step_for_step(tmp_path: Path) -> None:
    grpo, grpo_records = run(make_config(tmp_path, "grpo", algorithm={"name": "grpo"},
                                         training={"steps": 3}))
    off = {"name": "hargo", "hargo": {"discrimination": False, "confidence": False}}
    hargo, hargo_records = run(make_config(tmp_path, "hargo", algorithm=off,
                                           training={"steps": 3}))
    for a, b in zip(grpo_records, hargo_records, strict=True):
        assert b["hargo/weight_min"] == b["hargo/weight_max"] == 1.0
        same = {k: v for k, v in m.deterministic(a).items() if not k.startswith(("hargo/",
                                                                                 "tasks/"))}
        assert same == {k: b[k] for k in same}
    weights_a, weights_b = exported(grpo), exported(hargo)
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_micro_batches_add_up_to_the_full_batch(tmp_path: Path) -> None:
    """One optimizer step over 8 rows: 1 micro-batch of 8 or 4 of 2 give the same loss and the
    same parameters (whole-batch denominators), for a token-mean and a sequence-mean method."""
    for name in ("dapo", "grpo"):
        results = []
        for micro in (8, 2):
            cfg = make_config(tmp_path, f"{name}-{micro}", algorithm={"name": name},
                              training={"steps": 1, "micro_batch_size": micro})
            results.append(run(cfg))
        (one, [a]), (four, [b]) = results
        assert a["optimizer_steps"] == b["optimizer_steps"] == 1
        # the same sums in another order (tests/numerics.py): 8 rows x 12 tokens over the
        # tiny model's 953-token vocabulary: grad_rtol(8 * 12 * 953) = 7.2e-5
        rtol = grad_rtol(8 * 12 * 953)
        assert b["loss"] == pytest.approx(a["loss"], rel=rtol, abs=1e-6)
        assert b["pg_loss"] == pytest.approx(a["pg_loss"], rel=rtol, abs=1e-6)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=rtol)
        assert_same_adam_update(exported(one), exported(four), initial_weights(), 1e-3, 1)


def test_more_iterations_make_the_clip_active(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, training={"steps": 1, "num_iterations": 3, "lr": 2e-2})
    _, [record] = run(cfg)
    assert record["optimizer_steps"] == 3
    assert record["ratio_mean"] != 1.0 and record["approx_kl"] > 0
    assert record["clip_ratio/region_mean"] > 0
    _, [single] = run(make_config(tmp_path, "single", training={"steps": 1, "lr": 2e-2}))
    assert single["ratio_mean"] == 1.0 and single["clip_ratio/region_mean"] == 0.0


def test_unscored_completions_are_dropped_from_the_loss(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from hargo_hpc.train.rollout import rewards

    real = rewards.RewardRouter

    class Unscoring(real):  # the real router; completions 0 and 5 come back unscored
        def collect(self, pending):  # type: ignore[override]
            batch = super().collect(pending)
            for i in (0, 5):
                batch.scored[i], batch.rewards[i] = False, 0.0
            return batch

    monkeypatch.setattr(rewards, "RewardRouter", Unscoring)
    result, [record] = run(make_config(tmp_path, training={"steps": 1}))
    assert record["rows/unscored"] == 2 and record["rows/scored"] == 6
    assert record["rows/in_loss"] == 6
    rows = m.read_records(result.run_dir / "rollouts" / "step_000001.jsonl")
    assert [r["in_loss"] for r in rows] == [i not in (0, 5) for i in range(8)]
    assert rows[0]["advantage"] == 0.0 and rows[5]["advantage"] == 0.0
    kept = [r["reward"] for r in rows if r["scored"]]
    assert record["reward"] == pytest.approx(sum(kept) / len(kept))


# ---------------------------------------------------------------- run directory rules


def test_a_finished_run_is_refused_without_resume_and_nothing_is_overwritten(
        tmp_path: Path) -> None:
    cfg = make_config(tmp_path, training={"steps": 1})
    result, _ = run(cfg)
    before = {p: p.read_bytes() for p in result.run_dir.rglob("*") if p.is_file()}
    with pytest.raises(loop.TrainError, match="holds a finished run; pass --resume"):
        run(cfg)
    again, _ = run(cfg, resume=True)
    assert again.already_finished and again.step == 1
    other = make_config(tmp_path, training={"steps": 1, "lr": 5e-4})
    with pytest.raises(loop.TrainError, match="refusing to resume"):
        run(other, resume=True)
    assert before == {p: p.read_bytes() for p in result.run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("changes", "message"), [
    ({"rollout": {"num_generations": 1, "prompts_per_step": 4}}, "num_generations must be >= 2"),
    ({"training": {"micro_batch_size": 3}}, "not divisible by training.micro_batch_size"),
    ({"training": {"grad_accum": 3}}, "not divisible by training.grad_accum"),
    ({"model": {"path": "/no/such/model"}}, "no such directory or file"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, changes: dict,
                                                  message: str) -> None:
    with pytest.raises(loop.TrainError, match=message) as caught:
        run(make_config(tmp_path, **changes))
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "t").exists()


# ---------------------------------------------------------------- kill -9 and resume


def _job(tmp_path: Path, name: str, training: str = "") -> Path:
    """8 steps of 2 prompts over a 5-prompt training split: the sampler's epochs end at draws
    5, 10, 15 (steps 3, 5, 8); checkpoints every 2 steps (`training`: more of its lines).
    plp_qa with the plain cosine as its reward (`similarity_baseline = "none"`): rewards differ
    within a group, so every step moves the weights and the optimizer state."""
    job = tmp_path / f"{name}.toml"
    job.write_text(f"""
[run]
name = "{name}"
dir = "{tmp_path}"
[model]
path = "tiny"
[[data.tasks]]
name = "plp_qa"
max_items = 5
[data]
eval_fraction = 0.0
[rewards]
similarity_baseline = "none"
[algorithm]
name = "grpo"
[rollout]
num_generations = 2
prompts_per_step = 2
max_new_tokens = 8
[training]
lr = 1e-3
steps = 8
micro_batch_size = 4
save_every = 2
{training}
""")
    return job


def _hargo(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    # not this process's rendezvous variables: its in-process engines exported them
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return subprocess.Popen([HARGO, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=kwargs.get("cwd"))


def _finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out


def test_kill_9_after_a_checkpoint_then_resume_matches_an_uninterrupted_run(
        tmp_path: Path) -> None:
    whole = _job(tmp_path, "whole")
    cut = _job(tmp_path, "cut", "save_total_limit = 2")  # pruning must not disturb a resume
    reference = _hargo("train", str(whole))
    victim = _hargo("train", str(cut))
    latest = tmp_path / "cut" / "checkpoints" / "latest"
    def checkpointed() -> bool:
        if victim.poll() is not None:
            pytest.fail(f"the run ended before its first checkpoint: {victim.stderr.read()}")
        return latest.is_file() and latest.read_text() == "step_000002"

    wait_until(checkpointed, 240, "the checkpoint of step 2", poll=0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert not RunLayout(tmp_path / "cut").finished.exists()
    saved = int(latest.read_text().removeprefix("step_"))  # 2, or 4 if the kill came late
    resumed = _finish(_hargo("train", str(cut), "--resume"))
    _finish(reference)
    progress = [line.split()[1] for line in resumed.splitlines() if line.startswith("step ")]
    assert progress == [f"{k}/8" for k in range(saved + 1, 9)]  # continued, not restarted
    assert "export: " in resumed
    kept = sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["step_000006", "step_000008"]
    expect = [m.deterministic(r) for r in m.read_records(tmp_path / "whole" / "metrics.jsonl")]
    got = [m.deterministic(r) for r in m.read_records(tmp_path / "cut" / "metrics.jsonl")]
    assert [r["step"] for r in got] == list(range(1, 9))
    assert got == expect
    assert all(r["grad_norm"] > 0 for r in got)
    # the prompts: the same sequence, and each epoch draws every one of the 5 prompts once
    ids = []
    for step in range(1, 9):
        rows = m.read_records(tmp_path / "cut" / "rollouts" / f"step_{step:06d}.jsonl")
        twin = m.read_records(tmp_path / "whole" / "rollouts" / f"step_{step:06d}.jsonl")
        assert rows == twin
        ids.extend(r["id"] for r in rows[::2])  # G = 2: one row per prompt
    assert len(set(ids[0:5])) == len(set(ids[5:10])) == len(set(ids[10:15])) == 5
    wa = load_file(tmp_path / "whole" / "export" / "model.safetensors")
    wb = load_file(tmp_path / "cut" / "export" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ---------------------------------------------------------------- engines, LoRA, prompts


@pytest.mark.parametrize("stage", [0, 3])
def test_zero_stages_train_and_export(tmp_path: Path, stage: int) -> None:
    result, records = run(make_config(tmp_path, training={"steps": 2, "zero_stage": stage}))
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)
    assert changed(initial_weights(), exported(result)) > 0
    config = json.loads((result.run_dir / "deepspeed_config.json").read_text())
    assert config["zero_optimization"]["stage"] == stage


def test_lora_trains_adapters_and_exports_a_merged_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    result, records = run(make_config(tmp_path, model={"lora_r": 4, "lora_alpha": 8.0},
                                      training={"lr": 1e-2}))
    assert records[-1]["grad_norm"] > 0
    after, before = exported(result), initial_weights()
    assert after.keys() == before.keys()  # merged: a plain model, no adapter tensors
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(any(t in k for t in ("q_proj", "k_proj", "v_proj", "o_proj"))
                         for k in moved)  # only the adapted projections changed
    AutoModelForCausalLM.from_pretrained(result.export)


def test_long_prompts_are_dropped_and_counted(tmp_path: Path) -> None:
    lines: list[str] = []
    cfg = make_config(tmp_path, model={"max_prompt_tokens": 40})
    result = loop.train(cfg, log=lines.append, progress=False)
    [line] = [x for x in lines if "longer than model.max_prompt_tokens" in x]
    dropped, total = map(int, re.search(r"dropped (\d+) of (\d+)", line).groups())
    assert 0 < dropped < total == 12
    from hargo_hpc.train.model.models import load_policy

    _, tokenizer = load_policy("tiny")
    prompts = {r["prompt"] for step in (1, 2)
               for r in m.read_records(result.run_dir / "rollouts" / f"step_{step:06d}.jsonl")}
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    assert lengths and max(lengths) <= 40
    with pytest.raises(loop.TrainError, match="every training prompt is longer"):
        run(make_config(tmp_path, "short", model={"max_prompt_tokens": 5}))


def test_a_gemm_step_is_rewarded_by_a_local_bench_worker(tmp_path: Path) -> None:
    """handoff.local_workers = 1: the loop's router starts a real `hargo worker` on the run's
    handoff directory; the untrained model's completions come back as bench records."""
    cfg = make_config(tmp_path, data={"tasks": [{"name": "gemm"}]},
                      rollout={"max_new_tokens": 16}, handoff={"local_workers": 1},
                      training={"steps": 1})
    lines: list[str] = []
    result = loop.train(cfg, log=lines.append, progress=False)
    [record] = m.read_records(result.metrics)
    assert any("started 1 local bench worker" in line for line in lines)
    statuses = {k: v for k, v in record.items() if k.startswith("bench/status/")}
    assert sum(statuses.values()) == 8 == record["tasks/gemm/n"]
    assert record["tasks/gemm/scored"] == record["rows/scored"] == 8
    assert record["timing_s/reward_wait"] > 0
    rows = m.read_records(result.run_dir / "rollouts" / "step_000001.jsonl")
    assert {f"bench/status/{r['status']}" for r in rows} == set(statuses)
    assert list((result.run_dir / "handoff").iterdir())  # the requests and results


def assert_resumed_like_whole(tmp_path: Path, resumed: Any, records: list[dict[str, Any]],
                              whole: list[dict[str, Any]]) -> None:
    """The resumed run "cut" ended at step 4 with the uninterrupted run "whole"'s records and
    the same completions in steps 3 and 4 (the ones around the stop)."""
    assert not resumed.interrupted and resumed.step == 4
    assert [m.deterministic(r) for r in records] == [m.deterministic(r) for r in whole]
    for step in (3, 4):
        a, b = (m.read_records(tmp_path / name / "rollouts" / f"step_{step:06d}.jsonl")
                for name in ("whole", "cut"))
        assert a == b


def test_a_signal_stops_in_process_and_resume_restores_hargos_running_contrast(
        tmp_path: Path) -> None:
    """HARGO with contrast_momentum 0.5 keeps σ̄ across steps: a run stopped by SIGUSR1 after
    step 2 and resumed logs what an uninterrupted run logs, σ̄ included."""
    algorithm = {"name": "hargo_std_batch", "hargo": {"contrast_momentum": 0.5}}
    _, whole = run(make_config(tmp_path, "whole", algorithm=algorithm, training={"steps": 4}))
    cfg = make_config(tmp_path, "cut", algorithm=algorithm, training={"steps": 4})

    def stop_after_two(record: dict[str, Any]) -> None:
        if record["step"] == 2:
            os.kill(os.getpid(), signal.SIGUSR1)

    stopped, first = run(cfg, on_step=stop_after_two)
    assert stopped.interrupted and stopped.step == 2 and [r["step"] for r in first] == [1, 2]
    assert stopped.checkpoint is not None and stopped.checkpoint.name == "step_000002"
    state = json.loads((stopped.checkpoint / "hargo_state.json").read_text())["client_state"]
    assert state["hargo"]["running_contrast"] == first[1]["hargo/contrast_ref"]
    assert state["step"] == 2 and state["sampler"]["draws"] == 4
    resumed, records = run(cfg, resume=True)
    assert not resumed.interrupted and resumed.step == 4
    assert [m.deterministic(r) for r in records] == [m.deterministic(r) for r in whole]
    # with momentum σ̄ is not the batch's own: the running value matters after the resume
    assert whole[2]["hargo/contrast_ref"] != whole[1]["hargo/contrast_ref"]


# ---------------------------------------------------------------- the metric helpers


def test_reward_and_task_statistics_by_hand() -> None:
    rewards = [1.0, 0.0, 0.5, 0.5, 0.0, 0.0]
    scored = [True, True, True, True, False, True]
    groups = [0, 0, 1, 1, 2, 2]
    stats = m.reward_stats(rewards, scored, groups)
    kept = [1.0, 0.0, 0.5, 0.5, 0.0]  # mean 0.4; Σ(x − 0.4)² = 0.36 + 0.16 + 0.01·2 + 0.16
    assert stats["reward"] == pytest.approx(sum(kept) / 5)
    assert stats["reward_std"] == pytest.approx(math.sqrt(0.7 / 4))
    assert stats["frac_reward_zero_std"] == pytest.approx(2 / 3)  # groups 1 and 2 (one row)
    tasks = ["a", "a", "b", "b", "b", "b"]
    per = m.task_stats(tasks, rewards, scored, groups, [3, 5, 2, 2, 9, 1],
                       [0.5, 1.5, 1, 1, 2, 1])
    assert per["tasks/a/count"] == 2 and per["tasks/b/count"] == 4
    # a's one group has contrast (1 vs 0); b's groups are flat (0.5, 0.5) or one scored row
    assert per["tasks/a/contrast_share"] == 1.0 and per["tasks/b/contrast_share"] == 0.0
    assert m.contrast_share([1.0], [False], [0]) is None
    assert per["tasks/a/reward_mean"] == 0.5 and per["tasks/b/reward_mean"] == pytest.approx(1 / 3)
    assert per["tasks/a/completion_length"] == 4 and per["tasks/b/completion_length"] == 3.5
    assert (per["tasks/a/weight_min"], per["tasks/a/weight_max"]) == (0.5, 1.5)
    metrics = m.task_metrics("a", {"n": 3, "f1": 0.25, "ok": True, "statuses": {"ok": 2}})
    assert metrics == {"tasks/a/n": 3.0, "tasks/a/f1": 0.25, "tasks/a/statuses/ok": 2.0}
    assert m.status_histogram([{"status": "ok"}, None, {"status": "ok"}]) == {
        "bench/status/ok": 2.0}


def test_every_tracker_gets_the_finite_numbers_of_each_step(tmp_path: Path) -> None:
    logged: list[tuple[dict[str, float], int]] = []

    class Recorder:  # a tracker of the user's own (train.trackers.Tracker)
        def log(self, metrics: dict[str, float], step: int) -> None:
            logged.append((dict(metrics), step))

        def close(self) -> None:
            logged.append(({}, -1))

    with m.MetricsWriter(tmp_path / "metrics.jsonl", [Recorder()]) as writer:
        writer.write({"step": 3, "reward": 0.5, "kl": None, "nan": float("nan"), "flag": True})
    assert logged == [({"reward": 0.5}, 3), ({}, -1)]
    assert m.read_records(tmp_path / "metrics.jsonl") == [
        {"step": 3, "reward": 0.5, "kl": None, "nan": None, "flag": True}]


# ---------------------------------------------------------------- rollout.max_staleness 1


def test_staleness_one_updates_on_the_sampling_policys_log_probs(tmp_path: Path) -> None:
    """With max_staleness 1 step t+1 is sampled before step t's update: from step 2 on the
    batch is one optimizer step stale, so the first pass's ratio leaves 1, while the
    synchronous run's stays exactly 1 (num_iterations 1, one optimizer step per batch)."""
    _, stale = run(make_config(tmp_path, "stale", rollout={"max_staleness": 1},
                               training={"steps": 3}))
    _, sync = run(make_config(tmp_path, "sync", training={"steps": 3}))
    assert [r["rollout/staleness"] for r in stale] == [0, 1, 1]
    assert [r["rollout/staleness"] for r in sync] == [0, 0, 0]
    assert all(r["ratio_mean"] == 1.0 and r["ratio_std"] == 0.0 for r in sync)
    assert stale[0]["ratio_std"] == pytest.approx(0.0, abs=1e-6)
    assert all(r["ratio_std"] > 1e-4 and r["approx_kl"] > 0 for r in stale[1:])
    # the same prompts in the same order: only when the completions were sampled differs
    for step in (1, 2, 3):
        a, b = (m.read_records(tmp_path / name / "rollouts" / f"step_{step:06d}.jsonl")
                for name in ("stale", "sync"))
        assert [r["id"] for r in a] == [r["id"] for r in b]


def test_staleness_one_resumes_exactly_with_the_step_in_flight(tmp_path: Path) -> None:
    """Stopped by SIGUSR1 after step 2, the run has step 3 generated and in flight: the
    checkpoint holds it, and the resumed run logs what an uninterrupted one logs."""
    def cfg(name: str) -> ExperimentConfig:
        return make_config(tmp_path, name, rollout={"max_staleness": 1},
                           algorithm={"name": "hargo_label_control"},
                           training={"steps": 4})

    _, whole = run(cfg("whole"))

    def stop_after_two(record: dict[str, Any]) -> None:
        if record["step"] == 2:
            os.kill(os.getpid(), signal.SIGUSR1)

    stopped, first = run(cfg("cut"), on_step=stop_after_two)
    assert stopped.interrupted and stopped.step == 2 and stopped.checkpoint is not None
    assert [r["step"] for r in first] == [1, 2]
    saved = torch.load(stopped.checkpoint / "loop_rank0.pt", weights_only=True)
    assert saved["step"] == 3 and saved["policy_version"] == 1  # sampled before update 2
    state = json.loads((stopped.checkpoint / "hargo_state.json").read_text())["client_state"]
    assert state["sampler"]["draws"] == 6  # steps 1-3 drawn: 3 x 2 prompts
    resumed, records = run(cfg("cut"), resume=True)
    assert_resumed_like_whole(tmp_path, resumed, records, whole)
    assert exported(resumed).keys() == exported(run(cfg("whole"), resume=True)[0]).keys()


def test_a_stop_during_generation_is_honoured_before_the_rewards_and_resumes_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGUSR1 arriving while step 3 generates: the loop stops right after generation (not
    after the step's update), the checkpoint holds steps 1-2 and step 3 in flight, and the
    resumed run logs what an uninterrupted one logs, step 3's completions included."""
    def cfg(name: str) -> ExperimentConfig:
        return make_config(tmp_path, name, training={"steps": 4})

    _, whole = run(cfg("whole"))
    generate = loop.start_step

    def signal_during_step_three(ctx: Any, state: Any, step: int) -> Any:
        rollout = generate(ctx, state, step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGUSR1)
        return rollout

    monkeypatch.setattr(loop, "start_step", signal_during_step_three)
    stopped, first = run(cfg("cut"))
    assert stopped.interrupted and stopped.step == 2 and stopped.checkpoint is not None
    assert [r["step"] for r in first] == [1, 2]  # step 3 was not updated, not logged
    assert torch.load(stopped.checkpoint / "loop_rank0.pt", weights_only=True)["step"] == 3
    monkeypatch.setattr(loop, "start_step", generate)
    resumed, records = run(cfg("cut"), resume=True)
    assert_resumed_like_whole(tmp_path, resumed, records, whole)


def test_a_stop_while_the_trainer_loads_is_honoured_at_its_first_boundary(
        tmp_path: Path) -> None:
    """`hargo train` catches stop signals first thing (`early_stop.catch`): one that comes
    while torch and the model load stops the run right after step 1's generation, with a
    checkpoint, and the resumed run is the uninterrupted one; the default actions are back
    once the loop has ended."""
    from hargo_hpc.train import early_stop

    def cfg(name: str) -> ExperimentConfig:
        return make_config(tmp_path, name, training={"steps": 2})

    _, whole = run(cfg("whole"))
    before = {sig: signal.getsignal(sig) for sig in early_stop.SIGNALS}
    try:
        early_stop.catch()
        os.kill(os.getpid(), signal.SIGUSR2)  # submitit's signal, before the loop exists
        stopped, first = run(cfg("cut"))
        assert all(signal.getsignal(sig) is signal.SIG_DFL for sig in early_stop.SIGNALS)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert stopped.interrupted and stopped.step == 0 and first == []
    assert stopped.checkpoint is not None
    resumed, records = run(cfg("cut"), resume=True)
    assert resumed.step == 2
    assert [m.deterministic(r) for r in records] == [m.deterministic(r) for r in whole]


def test_a_stop_during_the_reward_wait_ends_the_wait_and_resumes_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GEMM with a real bench worker: SIGUSR1 while step 2 waits for its bench results ends
    the wait at the next tick (a stop need not outlast the bench); the checkpoint holds step 1
    and step 2 in flight; resumed, step 2's results come from the handoff (each request
    benchmarked once) and the run logs what an uninterrupted one logs."""
    from hargo_hpc.handoff.layout import Layout, parse_result_name
    from hargo_hpc.train.rollout.rewards import RewardRouter

    def cfg(name: str) -> ExperimentConfig:
        return make_config(tmp_path, name, data={"tasks": [{"name": "gemm"}]},
                           rollout={"max_new_tokens": 16}, handoff={"local_workers": 1},
                           training={"steps": 3})

    _, whole = run(cfg("whole"))
    wait = RewardRouter._collect
    waits: list[int] = []

    def signal_as_step_two_waits(self: Any, step: int, ids: list[str]) -> Any:
        waits.append(step)
        if step == 2:
            os.kill(os.getpid(), signal.SIGUSR1)  # seen at the wait's first tick
        return wait(self, step, ids)

    monkeypatch.setattr(RewardRouter, "_collect", signal_as_step_two_waits)
    stopped, first = run(cfg("cut"))
    assert waits == [1, 2]
    assert stopped.interrupted and stopped.step == 1 and stopped.checkpoint is not None
    assert [r["step"] for r in first] == [1]
    assert torch.load(stopped.checkpoint / "loop_rank0.pt", weights_only=True)["step"] == 2
    monkeypatch.setattr(RewardRouter, "_collect", wait)
    resumed, records = run(cfg("cut"), resume=True)
    assert resumed.step == 3
    assert [m.deterministic(r) for r in records] == [m.deterministic(r) for r in whole]
    layout = Layout(resumed.run_dir / "handoff")
    stored = [json.loads(p.read_text()) for p in layout.results(2).iterdir()
              if parse_result_name(p.name)]
    # one result per request: resuming did not submit the step again. A benchmark the stop
    # cut short (its worker ended with the run; seen under load) is retried once, attempt 2
    assert len(stored) == 8 and all(s["attempt"] in (1, 2) for s in stored)


def test_staleness_one_with_gemm_submits_the_step_in_flight_again_on_resume(
        tmp_path: Path) -> None:
    """GEMM with a real bench worker: a stop after step 1 leaves step 2 generated and
    submitted; the resumed run submits it again under the same request ids and reads the
    results the handoff holds (one per request: nothing benchmarked twice)."""
    from hargo_hpc.handoff.layout import Layout, parse_result_name

    cfg = make_config(tmp_path, data={"tasks": [{"name": "gemm"}]},
                      rollout={"max_new_tokens": 16, "max_staleness": 1},
                      handoff={"local_workers": 1}, training={"steps": 3})

    def stop_after_one(record: dict[str, Any]) -> None:
        if record["step"] == 1:
            os.kill(os.getpid(), signal.SIGUSR1)

    stopped, _ = run(cfg, on_step=stop_after_one)
    assert stopped.interrupted and stopped.step == 1 and stopped.checkpoint is not None
    assert torch.load(stopped.checkpoint / "loop_rank0.pt", weights_only=True)["step"] == 2
    resumed, records = run(cfg, resume=True)
    assert resumed.step == 3 and [r["step"] for r in records] == [1, 2, 3]
    assert [r["rollout/staleness"] for r in records] == [0, 1, 1]
    layout = Layout(resumed.run_dir / "handoff")
    stored = {parse_result_name(p.name): json.loads(p.read_text())
              for p in layout.results(2).iterdir() if parse_result_name(p.name)}
    rows = m.read_records(resumed.run_dir / "rollouts" / "step_000002.jsonl")
    assert len(stored) == len(rows) == 8
    assert sorted(r["status"] for r in rows) == sorted(
        s["record"]["status"] for s in stored.values())
    # each request answered once; an attempt the stop cut short is retried (attempt 2)
    assert all(s["attempt"] in (1, 2) for s in stored.values())


def test_the_sft_preset_trains_on_a_mix_with_gemm(tmp_path: Path) -> None:
    """GEMM prompts have no reference answer: the sft preset trains on their corpus kernels
    (the rollout is still benchmarked by a real worker)."""
    cfg = make_config(tmp_path, algorithm={"name": "sft"},
                      data={"tasks": [{"name": "plp_qa", "max_items": 12, "weight": 1.0},
                                      {"name": "gemm", "weight": 3.0}]},
                      rollout={"max_new_tokens": 16}, handoff={"local_workers": 1},
                      training={"steps": 2, "lr": 1e-3})
    result, records = run(cfg)
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["sft/tokens"] > 0 and math.isfinite(r["sft/nll"]) for r in records)
    drawn = {row["task"] for step in (1, 2) for row in
             m.read_records(result.run_dir / "rollouts" / f"step_{step:06d}.jsonl")}
    assert "gemm" in drawn


def test_the_mix_summary_says_which_task_had_a_say() -> None:
    """Per task over step records: the steps it was drawn in, those with contrast, the mean
    contrast share and HARGO's shares; a task with contrast in under half its steps is a
    PASSENGER (its groups rarely differ: it barely shapes the update)."""
    records = [
        {"tasks/a/contrast_share": 1.0, "tasks/b/contrast_share": 0.0,
         "tasks/a/weight_share": 0.9, "tasks/a/adv_share": 0.8},
        {"tasks/a/contrast_share": 0.5, "tasks/b/contrast_share": 0.0},
        {"tasks/a/contrast_share": 0.0, "tasks/b/contrast_share": 0.5},
        {"tasks/a/contrast_share": None},  # a not drawn: no contrast share
    ]
    found = m.mix_summary(records)
    assert found["a"] == {"steps": 3, "with_contrast": 2, "contrast_mean": 0.5,
                          "weight_share": 0.9, "adv_share": 0.8}
    assert found["b"]["steps"] == 3 and found["b"]["with_contrast"] == 1
    lines = m.mix_lines(found, 4)
    assert lines[0].startswith("a  drawn in 3 of 4 steps, contrast in 2 of them (mean share "
                               "of its groups 0.50); HARGO weight share 0.90 (0.80 with w = 1)")
    assert "PASSENGER" not in lines[0] and "PASSENGER" in lines[1]
