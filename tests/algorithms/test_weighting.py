"""The stateful weightings' registry: HARGO's weighting equals `hargo_weights` step for step with
its running state threaded by hand, and its `state_dict` carries that state to a fresh object."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hargo_hpc.algorithms.hargo import hargo_weights
from hargo_hpc.algorithms.presets import PRESETS
from hargo_hpc.algorithms.weighting import WEIGHTINGS, HargoWeighting, make_weighting

REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.2, 2.0, -1.0])
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])
REF = torch.tensor([[-0.1, -2.0], [-1.0, -0.5], [-0.3, -0.2], [-2.5, -0.1], [-0.4, -0.9],
                    [-1.5, -0.6]])
MASK = torch.ones_like(REF, dtype=torch.bool)
ADV = torch.tensor([0.7, -0.7, 0.7, -0.7, 0.7, -0.7])


def test_the_registry_picks_the_presets_weighting() -> None:
    assert set(WEIGHTINGS) == {"hargo"}
    assert make_weighting(PRESETS["grpo"]) is None
    assert isinstance(make_weighting(PRESETS["hargo"]), HargoWeighting)


def test_hargo_weighting_threads_its_state_and_resumes_from_it() -> None:
    algorithm = PRESETS["hargo"]
    assert algorithm.hargo is not None
    params = algorithm.hargo.model_copy(update={"discrimination_stat": "std_batch",
                                                "contrast_momentum": 0.5})
    algorithm = replace(algorithm, hargo=params)
    weighting = make_weighting(algorithm)
    assert weighting is not None and weighting.state_dict() == {}
    running = None
    for scale in (1.0, 3.0):
        w, stats = weighting(REWARDS * scale, GROUPS, REF, MASK, advantages=ADV)
        want, want_stats = hargo_weights(REWARDS * scale, GROUPS, REF, MASK, advantages=ADV,
                                         running_contrast=running, **params.to_dict())
        assert torch.equal(w, want) and stats == want_stats
        running = want_stats["contrast_ref"]
        assert weighting.state_dict() == {"running_contrast": running}
    resumed = make_weighting(algorithm)
    assert resumed is not None
    resumed.load_state_dict(weighting.state_dict())
    a, _ = weighting(REWARDS, GROUPS, REF, MASK, advantages=ADV)
    b, _ = resumed(REWARDS, GROUPS, REF, MASK, advantages=ADV)
    assert torch.equal(a, b) and resumed.state_dict() == weighting.state_dict()


def test_the_label_control_keeps_its_means() -> None:
    weighting = make_weighting(PRESETS["hargo_label_control"])
    assert weighting is not None and weighting.needs_labels
    labels = ["a", "a", "b", "b", "b", "b"]
    weighting(REWARDS, GROUPS, REF, MASK, advantages=ADV, labels=labels)
    assert set(weighting.state_dict()["label_means"]) == {"a", "b"}
    with pytest.raises(ValueError, match="needs the task label"):
        weighting(REWARDS, GROUPS, REF, MASK, advantages=ADV)
