"""The DeepSpeed engine on CPU with the tests' own tiny Llama: ZeRO 0/2/3 against a plain-torch
AdamW reference, summed micro-batches, checkpoints (bit-exact resume, the layout a kill leaves),
the DeepSpeed JSON, a user's JSON, the HF export, and two ranks under torchrun."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from numerics import ADAM_EPS, adam_weight_tolerance, grad_rtol

from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.backend.engine import (
    CONFIG_NAME,
    EngineError,
    WarmupSchedule,
    build_engine,
    deepspeed_config,
)

from ._two_ranks import (
    REDUCTION,
    SETTINGS,
    STEPS,
    batch,
    engine_test_model,
    greedy,
    summed_nll,
)

GRAD_RTOL = grad_rtol(REDUCTION)  # 2.5e-5
assert SETTINGS["eps"] == ADAM_EPS

PARTITION_ALL = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}


def _engine(stage: int = 2, *, micro: int = 4, accum: int = 1, run_dir: Path | None = None,
            **changes: object):
    settings = {**SETTINGS, **changes}
    return build_engine(
        engine_test_model(), zero_stage=stage, micro_batch_size=micro, grad_accum=accum,
        run_dir=run_dir, overrides=PARTITION_ALL, **settings,  # type: ignore[arg-type]
    )


def _train(engine, steps: range, micro: int = 4) -> tuple[list[float], list[bool]]:
    """Optimizer steps over `batch(step)`, `micro` rows per micro-batch, each micro-batch loss
    divided by the whole batch's token count; returns the losses and step()'s answers."""
    losses, stepped = [], []
    for step in steps:
        ids, mask = batch(step)
        total, full = float(mask.sum()), 0.0
        for start in range(0, ids.shape[0], micro):
            rows = slice(start, start + micro)
            full += engine.backward(summed_nll(engine, ids[rows], mask[rows], total))
            stepped.append(engine.step())
        losses.append(full)
    return losses, stepped


Reference = tuple[dict[str, torch.Tensor], list[float], list[float], list[list[int]]]


def _reference(steps: int = STEPS) -> Reference:
    """The same run in plain torch: whole-batch loss, AdamW (decay on matrices only), warmup
    1 step at lr/2 then lr, no clipping. Returns parameters, gradient norms, the lrs used and
    the greedy tokens of prompts 0 and 1 after the first step."""
    model = engine_test_model()
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.ndim >= 2], "weight_decay": SETTINGS["weight_decay"]},
         {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
        lr=SETTINGS["lr"], eps=SETTINGS["eps"],
    )
    norms, lrs, generated = [], [], []
    for step in range(steps):
        lr = SETTINGS["lr"] * (0.5 if step == 0 else 1.0)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids, mask = batch(step)
        summed_nll(model, ids, mask, float(mask.sum())).backward()
        norms.append(float(torch.stack([p.grad.norm() for p in params]).norm()))
        lrs.append(lr)
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:
            model.eval()
            generated = [greedy(model, 0), greedy(model, 1)]
            model.train()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, norms, lrs, generated


@pytest.fixture(scope="module")
def reference() -> Reference:
    return _reference()


def _assert_close(got: dict[str, torch.Tensor], reference: Reference) -> None:
    """Every weight within `adam_weight_tolerance` of the reference run's (its derivation in
    tests/numerics.py: fp32 rounding of reductions summed in another order, through Adam)."""
    want, norms, lrs, _ = reference
    tol = adam_weight_tolerance(norms, lrs, REDUCTION)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=tol,
                                   msg=lambda m, name=name: f"{name} (bound {tol:.2g}): {m}")


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_stage_trains_like_plain_torch_adamw(stage: int, reference, tmp_path: Path) -> None:
    initial = engine_test_model().state_dict()
    engine = _engine(stage, run_dir=tmp_path)
    lrs = []
    losses = []
    for step in range(STEPS):
        lrs.append(engine.lr)
        losses += _train(engine, range(step, step + 1))[0]
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    state = engine.full_state_dict()
    assert all(not torch.equal(state[k], initial[k]) for k in initial)  # every tensor moved
    _, want_norms, want_lrs, _ = reference
    _assert_close(state, reference)
    assert lrs == pytest.approx(want_lrs)
    assert engine.grad_norm == pytest.approx(want_norms[-1], rel=GRAD_RTOL)
    assert engine.optimizer_steps == STEPS and engine.zero_stage == stage
    written = json.loads((tmp_path / CONFIG_NAME).read_text())
    assert written["zero_optimization"]["stage"] == stage
    assert written["train_batch_size"] == 4 and written["gradient_accumulation_steps"] == 1


@pytest.mark.parametrize("stage", [2, 3])
def test_summed_micro_batches_equal_the_full_batch(stage: int, reference) -> None:
    engine = _engine(stage, micro=2, accum=2)
    _, stepped = _train(engine, range(STEPS), micro=2)
    assert stepped == [False, True] * STEPS  # the optimizer steps on every 2nd micro-batch
    _assert_close(engine.full_state_dict(), reference)
    # DeepSpeed's own 1/grad_accum would have halved the gradient: the norm says it did not.
    assert engine.grad_norm == pytest.approx(reference[1][-1], rel=GRAD_RTOL)


def test_the_bound_catches_a_per_micro_batch_denominator(reference) -> None:
    """The mutation the equality tests exist to catch: each micro-batch's loss over its own
    token count instead of the whole batch's (rows of 11, 8, 5, 9 tokens: 19 vs 14 per half).
    The gradient norm moves by a share of itself, and the weights leave the bound."""
    engine = _engine(2, micro=2, accum=2)
    for step in range(STEPS):
        ids, mask = batch(step)
        for rows in (slice(0, 2), slice(2, 4)):
            own = float(mask[rows].sum()) * 2  # the per-micro-batch mean, as a naive loop has
            engine.backward(summed_nll(engine, ids[rows], mask[rows], own))
            engine.step()
    assert abs(engine.grad_norm / reference[1][-1] - 1) > 100 * GRAD_RTOL
    with pytest.raises(AssertionError, match="bound"):
        _assert_close(engine.full_state_dict(), reference)


def test_offloaded_optimizer_trains_like_plain_torch(reference) -> None:
    engine = _engine(2, offload_optimizer=True)
    _train(engine, range(STEPS))
    _assert_close(engine.full_state_dict(), reference)


# bf16 keeps 8 mantissa bits: unit roundoff 2^-9. Between the loss and a weight's gradient lie
# about 25 rounded ops (2 layers of ~10, the head); their errors add like a random walk, x4.
BF16_GRAD_RTOL = 4 * 25**0.5 * 2.0**-9  # 0.039


def test_bf16_trains_in_bf16_with_fp32_master_weights(reference) -> None:
    """bf16 weights that are exactly the rounding of fp32 master weights, and gradient norms
    within BF16_GRAD_RTOL of the fp32 reference's (a lost accumulation or a missing scale
    would be off by a factor; rounding only by a few bf16 units)."""
    engine = _engine(2, precision="bf16")
    losses, norms = [], []
    for step in range(STEPS):
        losses += _train(engine, range(step, step + 1))[0]
        norms.append(engine.grad_norm)
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    state = engine.full_state_dict()
    assert {v.dtype for v in state.values()} == {torch.bfloat16}
    optimizer = engine.deepspeed.optimizer
    assert all(group.dtype == torch.float32 for group in optimizer.single_partition_of_fp32_groups)
    for master, params in zip(optimizer.single_partition_of_fp32_groups, optimizer.bit16_groups,
                              strict=True):  # fmt: skip
        flat = torch.cat([p.detach().flatten() for p in params])
        assert torch.equal(flat, master[: flat.numel()].to(torch.bfloat16))
    assert norms == pytest.approx(reference[1], rel=BF16_GRAD_RTOL)


def _flat(obj: object) -> list[object]:
    if isinstance(obj, dict):
        return [x for k in sorted(obj, key=str) for x in [k, *_flat(obj[k])]]
    if isinstance(obj, list | tuple):
        return [x for item in obj for x in _flat(item)]
    if hasattr(obj, "__dict__") and not isinstance(obj, torch.Tensor):
        return [type(obj).__name__, *_flat(vars(obj))]  # e.g. DeepSpeed's loss scaler
    return [obj]


def _optimizer_state(engine) -> list[object]:
    """A copy (the state dict's tensors are the live ones the next step updates in place)."""
    flat = _flat(engine.deepspeed.optimizer.state_dict())
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in flat]


def _same(a: list[object], b: list[object]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def _draws() -> tuple[list[float], float, float]:
    """One draw from each generator a checkpoint restores (torch, NumPy, Python)."""
    return torch.rand(3).tolist(), float(np.random.rand()), random.random()


@pytest.mark.parametrize("stage", [2, 3])
def test_resume_is_bit_exact(stage: int, tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    first = _engine(stage)
    _train(first, range(2))
    state = ckpt.TrainerState(step=2, config_hash="abc", sampler={"epoch": 1, "pos": 3},
                              hargo={"contrast": 0.25}, handoff_step=2, sqd={"stage": 1})
    path = first.save_checkpoint(root, "step_000002", state.to_dict())
    params_at_save, optim_at_save = first.full_state_dict(), _optimizer_state(first)
    draws_after_save = _draws()
    _train(first, range(2, 3))
    uninterrupted = first.full_state_dict()

    assert path == root / "step_000002"
    assert (root / "latest").read_text() == "step_000002"
    assert not [p for p in root.iterdir() if p.name.startswith(".")]
    torch.manual_seed(99)  # the load must restore the RNGs, not inherit these
    second = _engine(stage)
    client = second.load_checkpoint(root)
    assert ckpt.TrainerState.from_dict(client) == state
    assert _draws() == draws_after_save
    assert second.optimizer_steps == 2 and second.lr == first.lr
    assert _same(_optimizer_state(second), optim_at_save)
    for name, value in second.full_state_dict().items():
        assert torch.equal(value, params_at_save[name]), name
    _train(second, range(2, 3))
    for name, value in second.full_state_dict().items():
        assert torch.equal(value, uninterrupted[name]), name


def test_a_save_killed_half_way_leaves_latest_on_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "checkpoints"
    engine = _engine(0)
    engine.save_checkpoint(root, "step_1", {"step": 1, "config_hash": "h"})

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # stands for the process dying after DeepSpeed's files

    monkeypatch.setattr(ckpt, "write_state", killed)
    with pytest.raises(KeyboardInterrupt):
        engine.save_checkpoint(root, "step_2", {"step": 2, "config_hash": "h"})
    monkeypatch.undo()
    assert (root / ".partial-step_2").is_dir() and not (root / "step_2").exists()
    assert ckpt.latest_checkpoint(root) == root / "step_1"
    (root / "latest").unlink()  # even without the pointer, only complete checkpoints count
    assert ckpt.latest_checkpoint(root) == root / "step_1"

    engine.save_checkpoint(root, "step_2", {"step": 2, "config_hash": "h"})
    again = engine.save_checkpoint(root, "step_2", {"step": 2, "config_hash": "h"})
    assert again == root / "step_2.1" and ckpt.read_state(again)["tag"] == "step_2.1"
    assert ckpt.latest_checkpoint(root) == again
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step_1", "step_2", "step_2.1"]


def test_pruning_keeps_the_newest_and_never_latests_target(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"

    def saved(tag: str) -> None:
        partial = ckpt.prepare_partial(root, tag)
        ckpt.write_state(partial, tag=tag, world_size=1, zero_stage=2, client_state={})
        ckpt.publish(root, tag)

    for step in (1, 2, 3):
        saved(f"step_{step}")
    assert ckpt.prune(root, 0) == []  # 0 keeps all
    assert ckpt.prune(root, 2) == ["step_1"]
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step_2", "step_3"]
    # `latest` on an older checkpoint (a resume from it): it stays, the rest by age
    saved("step_4")
    (root / "latest").write_text("step_2")
    (root / ".pruned-step_0").mkdir()  # a removal a kill interrupted: finished now
    assert ckpt.prune(root, 1) == ["step_3"]
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step_2", "step_4"]
    assert ckpt.latest_checkpoint(root) == root / "step_2"


def test_resume_refuses_another_experiments_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "run" / "checkpoints"
    ours, theirs = ckpt.config_hash("[training]\nlr = 1e-6\n"), ckpt.config_hash("lr = 2e-6")
    assert len(ours) == 16 and ours != theirs
    assert ours == ckpt.config_hash("[training]\nlr = 1e-6\n")
    with pytest.raises(ckpt.CheckpointError, match="no complete checkpoint"):
        ckpt.check_resume(root, ours)
    partial = ckpt.prepare_partial(root, "step_5")
    ckpt.write_state(partial, tag="step_5", world_size=1, zero_stage=2,
                     client_state=ckpt.TrainerState(step=5, config_hash=theirs).to_dict())
    ckpt.publish(root, "step_5")
    with pytest.raises(ckpt.CheckpointError) as refused:
        ckpt.check_resume(root, ours, run_dir=tmp_path / "other")
    message = str(refused.value)
    assert "\n" not in message
    assert all(s in message for s in (theirs, ours, str(root / "step_5"), str(tmp_path / "other")))
    assert ckpt.check_resume(root, theirs) == root / "step_5"


def test_client_state_must_be_json(tmp_path: Path) -> None:
    partial = ckpt.prepare_partial(tmp_path, "t")
    with pytest.raises(ckpt.CheckpointError, match="not JSON-serialisable"):
        ckpt.write_state(partial, tag="t", world_size=1, zero_stage=0,
                         client_state={"step": 1, "bad": object()})
    with pytest.raises(ckpt.CheckpointError, match="bad checkpoint tag"):
        ckpt.check_tag("latest")


def test_user_deepspeed_json_replaces_the_generated_one(tmp_path: Path) -> None:
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"zero_optimization": {"stage": 1}, "gradient_clipping": 0.0,
                                "gradient_accumulation_steps": 2}))
    engine = build_engine(engine_test_model(), zero_stage=3, micro_batch_size=2, grad_accum=2,
                          user_config=mine, run_dir=tmp_path / "run", lr=1e-3)
    assert engine.zero_stage == 1  # the user's file, not the zero_stage argument
    written = json.loads((tmp_path / "run" / CONFIG_NAME).read_text())
    assert written == {"zero_optimization": {"stage": 1}, "gradient_clipping": 0.0,
                       "gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 2,
                       "train_batch_size": 4}


@pytest.mark.parametrize(
    ("content", "match"),
    [("{\"zero_optimization\": {\"stage\": 2},", "is not valid JSON"),
     ("[1, 2]", "must hold a JSON object"),
     ("{\"train_micro_batch_size_per_gpu\": 8}", "sets train_micro_batch_size_per_gpu=8")],
)
def test_bad_user_deepspeed_json_is_refused_in_one_line(
    content: str, match: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(EngineError, match=match) as refused:
        build_engine(engine_test_model(), micro_batch_size=2, user_config=bad,
                     run_dir=tmp_path / "run")
    assert "\n" not in str(refused.value) and str(bad) in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(EngineError, match="offload_optimizer needs"):
        deepspeed_config(zero_stage=0, precision="fp32", grad_clip=1.0, grad_accum=1,
                         micro_batch_size=1, world_size=1, offload_optimizer=True)
    with pytest.raises(EngineError, match="zero_stage must be"):
        deepspeed_config(zero_stage=4, precision="fp32", grad_clip=1.0, grad_accum=1,
                         micro_batch_size=1, world_size=1, offload_optimizer=False)
    with pytest.raises(EngineError, match="cosine schedule needs"):
        build_engine(engine_test_model(), lr_schedule="cosine", warmup_steps=5, total_steps=5)


def test_warmup_then_cosine_schedule() -> None:
    cosine = WarmupSchedule(warmup_steps=3, total_steps=7, kind="cosine", min_lr_ratio=0.1)
    assert [cosine(s) for s in range(3)] == pytest.approx([0.25, 0.5, 0.75])
    # after warmup: 0.1 + 0.9 * (1 + cos(pi * (s - 3) / 4)) / 2
    assert [cosine(s) for s in (3, 5, 7, 9)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    assert WarmupSchedule(0, 0)(0) == 1.0 and WarmupSchedule(2, 0)(10) == 1.0


def test_the_sft_steps_run_at_their_own_rate_before_the_schedule() -> None:
    """S = 2 warm-start steps at lr_S / base = 30, then the RL schedule from s' = 0: warmup
    (s' + 1) / 3 for s' = 0, 1, then 0.1 + 0.9 (1 + cos(pi (s' - 2) / 5)) / 2."""
    schedule = WarmupSchedule(2, 7, "cosine", 0.1, sft_steps=2, sft_ratio=30.0)
    after = 0.1 + 0.45 * (1 + math.cos(math.pi / 5))
    assert [schedule(s) for s in range(6)] == pytest.approx([30, 30, 1 / 3, 2 / 3, 1.0, after])


@pytest.mark.parametrize("stage", [0, 3])
def test_export_reloads_with_equal_logits(stage: int, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    engine = _engine(stage)
    _train(engine, range(1))
    ids, _ = batch(7)
    engine.eval()
    with torch.no_grad(), engine.gathered_parameters():
        want = engine.module(input_ids=ids).logits
        whole_after_forward = all(p.numel() > 0 for p in engine.module.parameters())
    assert whole_after_forward  # ZeRO-3's hooks did not release them module by module
    assert any(p.numel() == 0 for p in engine.module.parameters()) == (stage == 3)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "old-export-file").write_text("replaced")
    out = engine.export_hf(tmp_path / "hf")
    assert (out / "model.safetensors").is_file() and not (out / "old-export-file").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temporary left
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        got = reloaded(input_ids=ids).logits
    assert torch.equal(got, want)


def test_rng_states_round_trip() -> None:
    saved = ckpt.capture_rng()
    first = _draws()
    assert _draws() != first
    ckpt.restore_rng(saved)
    assert _draws() == first


def test_two_ranks_match_each_other_and_one_process(
    tmp_path: Path, reference, summary_line, repo_root: Path
) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo_root)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    script = Path(__file__).with_name("_two_ranks.py")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script), str(tmp_path), "2", "3"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    summary_line(f"two ranks under torchrun, ZeRO-2 and ZeRO-3, {STEPS} steps: {elapsed:.1f} s")
    for rank in (0, 1):
        assert json.loads((tmp_path / f"gathered_rank{rank}.json").read_text()) == [0, 10, 1, 11]
    _, want_norms, _, want_generated = reference
    for stage in (2, 3):
        runs = [torch.load(tmp_path / f"stage{stage}_rank{r}.pt") for r in (0, 1)]
        for name, value in runs[0]["state"].items():
            assert torch.equal(value, runs[1]["state"][name]), (stage, name)
        _assert_close(runs[0]["state"], reference)
        assert runs[0]["norms"] == pytest.approx(want_norms, rel=GRAD_RTOL)
        # each rank generated for its own prompt, with whole weights (ZeRO-3: gathered once,
        # still whole after generate: no per-module release), and training went on exactly
        assert [runs[0]["generated"], runs[1]["generated"]] == want_generated
        assert runs[0]["whole"] and runs[1]["whole"]


def test_weight_decay_goes_by_the_parameters_own_shape_when_partitioned() -> None:
    """A parameter created partitioned (engine.partitioned_loading) holds an empty shard; its
    group comes from `ds_shape`, so a matrix is still decayed and a norm is not."""
    from hargo_hpc.train.backend.engine import _optimizer_groups

    model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.LayerNorm(4))
    for param in model.parameters():
        param.ds_shape = param.shape  # what zero.Init leaves beside an empty shard
        param.data = torch.empty(0)
    decay, no_decay = _optimizer_groups(model, 0.1)
    assert [p.ds_shape for p in decay["params"]] == [torch.Size([4, 4])]
    assert decay["weight_decay"] == 0.1 and len(no_decay["params"]) == 2  # LayerNorm's two
