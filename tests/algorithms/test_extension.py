"""One seam per extension: an advantage estimator and a policy loss written outside the package
are a module of their own and one registration line (or their "module:function" path as the
name in the experiment file), checked by the config and used by the trainer like the shipped
ones (docs/algorithms.md, "Adding an estimator or a policy loss")."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from hargo_hpc.algorithms import compute_advantages, policy_loss, registry, resolve_algorithm
from hargo_hpc.config import ConfigError, validate_config
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m

torch.set_num_threads(1)

OWN = '''
"""A user's own algorithms, outside hargo_hpc."""
from hargo_hpc.algorithms.losses import TokenLoss, clipped_surrogate

CALLS = {"estimator": 0, "loss": 0}


def doubled(rewards, groups):
    """A_i = 2 (R_i - mean_g R)."""
    CALLS["estimator"] += 1
    return 2 * groups.centred(rewards)


def batch_centred(rewards, groups):
    """A_i = R_i - mean_B R: no group statistics."""
    return rewards - rewards.mean()


batch_centred.grouped = False


def tight_clip(advantages, ratio, *, clip_low, clip_high, dual_clip):
    """PPO's clipped surrogate at half the clip range."""
    CALLS["loss"] += 1
    return clipped_surrogate(advantages, ratio, clip_low=clip_low / 2,
                             clip_high=clip_high / 2, dual_clip=dual_clip)
'''


@pytest.fixture
def own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The module `my_algos` in a directory of its own on sys.path; the registry restored after
    the test."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_algos.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    for table in ("ESTIMATORS", "POLICY_LOSSES", "UNGROUPED"):
        monkeypatch.setattr(registry, table, getattr(registry, table).copy())
    monkeypatch.delitem(sys.modules, "my_algos", raising=False)
    return importlib.import_module("my_algos")


def config(tmp_path: Path, **algorithm: Any) -> Any:
    return validate_config({
        "run": {"name": "own", "dir": str(tmp_path), "seed": 0},
        "model": {"path": "tiny"},
        "rewards": {"similarity_baseline": "none"},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 12}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 4, "prompts_per_step": 2, "max_new_tokens": 8},
        "training": {"lr": 1e-3, "steps": 2, "micro_batch_size": 4, "zero_stage": 0},
        "algorithm": {"name": "grpo", **algorithm},
    })


def test_an_estimator_of_your_own_by_its_module_path(own: ModuleType) -> None:
    rewards, index = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2]), torch.tensor([0, 0, 1, 1, 2])
    got = compute_advantages("my_algos:doubled", rewards, index)
    assert torch.equal(got, 2 * compute_advantages("dr_grpo", rewards, index))
    assert not registry.is_grouped("my_algos:batch_centred")
    assert registry.is_grouped("my_algos:doubled") and not registry.is_grouped("reinforce_pp")


def test_a_policy_loss_of_your_own_replaces_the_per_token_terms(own: ModuleType) -> None:
    logprobs = torch.tensor([[-1.0, -0.5], [-2.0, -0.1]], requires_grad=True)
    old = torch.tensor([[-1.3, -0.5], [-1.0, -0.1]])
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2, dtype=torch.bool)
    tight, stats = policy_loss(logprobs, old, adv, mask, loss_type="my_algos:tight_clip",
                               clip_low=0.2, clip_high=0.2)
    same, same_stats = policy_loss(logprobs, old, adv, mask, loss_type="ppo",
                                   clip_low=0.1, clip_high=0.1)
    assert torch.equal(tight, same) and stats == same_stats
    assert stats["clip_frac_high"] > 0  # the tighter clip bites where ppo's 0.2 would not


def test_registered_names_are_checked_by_the_config(own: ModuleType, tmp_path: Path) -> None:
    registry.register_estimator("doubled", "my_algos:doubled")
    registry.register_policy_loss("tight_clip", "my_algos:tight_clip")
    resolved = resolve_algorithm(config(tmp_path, estimator="doubled",
                                        loss="tight_clip").algorithm)
    assert (resolved.estimator, resolved.loss) == ("doubled", "tight_clip")
    with pytest.raises(ValueError, match="registered already"):
        registry.register_estimator("doubled", "my_algos:batch_centred")
    for field, value in (("estimator", "tripled"), ("loss", "cispo")):
        with pytest.raises(ConfigError) as caught:
            config(tmp_path, **{field: value})
        message = str(caught.value)
        assert "\n" not in message and f"algorithm.{field}" in message
        assert "registered:" in message and "module:function" in message
    with pytest.raises(ValueError, match=r"algorithm\.loss: dpo trains with its own dpo loss"):
        resolve_algorithm(config(tmp_path, name="dpo", loss="ppo").algorithm)


def test_a_run_trains_with_an_estimator_and_a_loss_of_your_own(own: ModuleType,
                                                                tmp_path: Path) -> None:
    result = loop.train(config(tmp_path, estimator="my_algos:doubled",
                               loss="my_algos:tight_clip"), log=lambda _: None, progress=False)
    records = m.read_records(result.metrics)
    assert [r["step"] for r in records] == [1, 2]
    assert own.CALLS["estimator"] == 2 and own.CALLS["loss"] >= 2
    saved = (result.run_dir / "config.toml").read_text()
    assert 'estimator = "my_algos:doubled"' in saved and 'loss = "my_algos:tight_clip"' in saved


def test_a_spec_that_does_not_load_stops_the_run_before_it_starts(own: ModuleType,
                                                                  tmp_path: Path) -> None:
    from hargo_hpc.train.run import TrainError

    with pytest.raises(TrainError, match=r"my_algos:missing.*cannot load"):
        loop.train(config(tmp_path, estimator="my_algos:missing"), log=lambda _: None,
                   progress=False)
    assert not (tmp_path / "own" / "metrics.jsonl").exists()
