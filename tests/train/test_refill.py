"""DAPO's dynamic sampling with refill (`train.step.refill`): a step draws more prompts until
its batch holds prompts_per_step informative groups or it has used its rounds; the joined
rollout keeps each rank's share one block; bad combinations are one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from hargo_hpc.config import validate_config
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m
from hargo_hpc.train.rollout.generate import Generations
from hargo_hpc.train.rollout.generated import Rollout, by_rank

torch.set_num_threads(1)


def config(tmp_path: Path, tasks: list[dict[str, Any]] | None = None, **algorithm: Any) -> Any:
    """Data race (the untrained model's yes/no rewards: mostly flat groups) mixed with plp_qa
    under the plain cosine (`similarity_baseline = "none"`: every group has contrast), 2 prompts
    x G 4 a step."""
    return validate_config({
        "run": {"name": "r", "dir": str(tmp_path), "seed": 0},
        "model": {"path": "tiny"},
        "rewards": {"similarity_baseline": "none"},
        "data": {"tasks": tasks or [{"name": "data_race_c", "max_items": 12},
                                    {"name": "plp_qa", "max_items": 12}],
                 "eval_fraction": 0.0},
        "rollout": {"num_generations": 4, "prompts_per_step": 2, "max_new_tokens": 8},
        "training": {"lr": 1e-3, "steps": 4, "micro_batch_size": 4, "zero_stage": 0},
        "algorithm": {"name": "grpo", **algorithm},
    })


def test_a_step_refills_until_it_has_enough_informative_groups(tmp_path: Path) -> None:
    result = loop.train(config(tmp_path, dynamic_sampling=True, refill_rounds=3),
                        log=lambda _: None, progress=False)
    records = m.read_records(result.metrics)
    assert len(records) == 4
    for record in records:
        rounds, kept = record["dynamic_sampling/rounds"], record["dynamic_sampling/kept_groups"]
        rows = [json.loads(line) for line in
                result.run_dir.joinpath("rollouts", f"step_{record['step']:06d}.jsonl")
                .read_text().splitlines()]
        assert 1 <= rounds <= 3 and len(rows) % 4 == 0
        assert kept <= 2  # each round draws only the groups still missing
        if rounds < 3:  # it stopped early: the batch was full
            assert kept == 2
        assert (len(rows) > 8) == (rounds > 1)  # a round drew prompts exactly when it ran
        assert record["rows/scored"] + record["rows/unscored"] == len(rows)
        assert record["rows/in_loss"] == 4 * kept
    assert any(r["dynamic_sampling/rounds"] > 1 for r in records), "no step needed a refill"


def test_without_refill_the_step_keeps_its_prompts(tmp_path: Path) -> None:
    result = loop.train(config(tmp_path, dynamic_sampling=True), log=lambda _: None,
                        progress=False)
    for record in m.read_records(result.metrics):
        assert record["dynamic_sampling/rounds"] == 1
        assert record["rows/scored"] + record["rows/unscored"] == 8


@pytest.mark.parametrize(("algorithm", "tasks", "message"), [
    ({"refill_rounds": 3}, None, "needs algorithm.dynamic_sampling = true"),
    ({"dynamic_sampling": True, "refill_rounds": 2}, [{"name": "gemm", "max_items": 4}],
     "task gemm is rewarded by the bench"),
])
def test_refill_needs_dynamic_sampling_and_text_tasks(tmp_path: Path, algorithm: dict,
                                                      tasks: list | None, message: str) -> None:
    with pytest.raises((loop.TrainError, ValueError), match=message) as caught:
        loop.train(config(tmp_path, tasks, **algorithm), log=lambda _: None, progress=False)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "r").exists()


def test_by_rank_keeps_each_ranks_share_one_block() -> None:
    assert by_rank([0, 1, 2, 3], ["a", "b"], world=2) == [0, 1, "a", 2, 3, "b"]
    assert by_rank([0, 1], [2, 3, 4], world=1) == [0, 1, 2, 3, 4]


def _rollout(prompts: list[str], width: int, length: int, G: int = 2) -> Rollout:
    n = len(prompts) * G
    gen = Generations(prompt_ids=torch.full((n, width), 7),
                      prompt_mask=torch.ones(n, width, dtype=torch.long),
                      completion_ids=torch.full((n, length), 9),
                      completion_mask=torch.ones(n, length, dtype=torch.long),
                      truncated=torch.zeros(n, dtype=torch.bool),
                      texts=[f"{p}/{g}" for p in prompts for g in range(G)],
                      group_index=torch.arange(len(prompts)).repeat_interleave(G))
    examples = [Example(task="plp_qa", id=p, instruction=p, input="", output="")
                for p in prompts]
    return Rollout(1, examples, prompts, [None] * n, gen, list(gen.texts),
                   torch.full((n, length), -1.0), 0)


def test_an_extended_rollout_joins_generations_and_pads_the_narrower() -> None:
    first, more = _rollout(["p0", "p1"], width=3, length=2), _rollout(["q0"], width=5, length=4)
    more.timer.seconds["gen"] = 2.0
    first.timer.seconds["gen"] = 1.0
    joined = first.extended(more, world=1, pad_id=0)
    assert [e.id for e in joined.everything] == ["p0", "p1", "q0"]
    assert joined.texts == ["p0/0", "p0/1", "p1/0", "p1/1", "q0/0", "q0/1"]
    gen = joined.gen
    assert gen.prompt_ids.shape == (6, 5) and gen.completion_ids.shape == (6, 4)
    assert gen.prompt_mask[:4].sum(1).tolist() == [3] * 4  # left padded
    assert gen.completion_mask[:4].sum(1).tolist() == [2] * 4  # right padded
    assert gen.group_index.tolist() == [0, 0, 1, 1, 2, 2]
    assert joined.old is not None and joined.old.shape == (6, 4)
    assert joined.old[:4, 2:].abs().sum() == 0 and joined.old[4:].eq(-1).all()
    assert joined.timer.seconds["gen"] == 3.0
