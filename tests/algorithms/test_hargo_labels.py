"""Task labels next to HARGO: per-task shares (logging) and the label control (an ablation)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch

from hargo_hpc.algorithms.hargo import hargo_signals, hargo_weights
from hargo_hpc.algorithms.hargo_labels import label_control_weights, task_weight_shares

D = torch.float64
REWARDS = torch.tensor([1.0, 0.0, 0.6, 0.4, 0.9, 0.1], dtype=D)
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])
REF = torch.tensor([[-0.1, -0.3], [-1.0, -1.0], [-1.0, -1.0], [-0.5, -0.5], [-2.0, -0.2],
                    [-0.4, -0.4]], dtype=D)
MASK = torch.ones(6, 2, dtype=torch.bool)
LABELS = ["yes/no", "yes/no", "qa", "qa", "qa", "qa"]


def test_task_weight_shares_hand_computed() -> None:
    labels = ["a", "a", "b", "b", "c"]
    weights = [2.0, 1.0, 1.0, 0.5, 1.0]
    advantages = [1.0, -1.0, 2.0, -2.0, 3.0]
    keep = [True, True, True, True, False]
    # kept |w A| = [2, 1, 2, 1] (sum 6), |A| = [1, 1, 2, 2] (sum 6); c has no kept row
    shares = task_weight_shares(labels, weights, advantages, keep)
    assert shares == {
        "a": {"share": 0.5, "adv_share": pytest.approx(1 / 3), "mean_weight": 1.5, "rows": 2.0},
        "b": {"share": 0.5, "adv_share": pytest.approx(2 / 3), "mean_weight": 0.75,
              "rows": 2.0},
    }
    # all rows kept: |w A| = [2, 1, 2, 1, 3] (sum 9)
    every = task_weight_shares(labels, weights, advantages)
    assert every["c"]["share"] == pytest.approx(3 / 9)
    assert every["a"]["share"] == pytest.approx(3 / 9)


def test_task_weight_shares_takes_tensors_and_no_weights() -> None:
    adv = torch.tensor([1.0, -1.0, 2.0, -2.0])
    keep = torch.tensor([True, True, True, False])
    shares = task_weight_shares(["a", "a", "b", "b"], None, adv, keep)
    # w ≡ 1: |A| kept = [1, 1, 2] (sum 4)
    assert shares["a"] == {"share": 0.5, "adv_share": 0.5, "mean_weight": 1.0, "rows": 2.0}
    assert shares["b"] == {"share": 0.5, "adv_share": 0.5, "mean_weight": 1.0, "rows": 1.0}
    # no advantage at all: every share 0.0, never a division by zero
    zero = task_weight_shares(["a", "b"], torch.tensor([1.0, 2.0]), torch.zeros(2))
    assert zero["a"]["share"] == zero["b"]["adv_share"] == 0.0
    assert zero["b"]["mean_weight"] == 2.0


def test_task_weight_shares_errors() -> None:
    with pytest.raises(ValueError, match=r"advantages must have one value per label \(2\)"):
        task_weight_shares(["a", "b"], None, [1.0])
    with pytest.raises(ValueError, match="weights must have one value per label"):
        task_weight_shares(["a", "b"], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="keep must have one value per label"):
        task_weight_shares(["a", "b"], None, [1.0, 2.0], [True])
    with pytest.raises(ValueError, match="weights contains NaN"):
        task_weight_shares(["a"], [float("nan")], [1.0])


def test_label_control_weights_hand_computed() -> None:
    labels = ["x", "x", "y", "y"]
    # batch means: x 1.0, y 1.5; no history: m = batch means; v = m / mean(1, 1, 1.5, 1.5)
    weights, means = label_control_weights(labels, [1.5, 0.5, 2.0, 1.0], None, 0.9)
    assert weights == pytest.approx([0.8, 0.8, 1.2, 1.2])
    assert means == {"x": 1.0, "y": 1.5}
    # with history, momentum ½: m_x = ½ · 2 + ½ · 1 = 1.5; y is new (1.5); z is kept as it was
    previous = {"x": 2.0, "z": 3.0}
    weights, means = label_control_weights(labels, [1.5, 0.5, 2.0, 1.0], previous, 0.5)
    assert weights == pytest.approx([1.0] * 4)
    assert means == {"x": 1.5, "y": 1.5, "z": 3.0}
    assert previous == {"x": 2.0, "z": 3.0}  # the state passed in is not changed


def test_label_control_weights_keeps_the_tensor_type() -> None:
    free = torch.tensor([1.5, 0.5, 2.0, 1.0], dtype=D)
    weights, _ = label_control_weights(["x", "x", "y", "y"], free, {}, 0.0)
    assert isinstance(weights, torch.Tensor) and weights.dtype == D
    assert weights.tolist() == pytest.approx([0.8, 0.8, 1.2, 1.2])
    empty, means = label_control_weights([], torch.zeros(0), {"x": 1.0}, 0.5)
    assert empty.numel() == 0 and means == {"x": 1.0}


def test_label_control_weights_errors() -> None:
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\), got 1.0"):
        label_control_weights(["x"], [1.0], None, 1.0)
    with pytest.raises(ValueError, match="one value per label"):
        label_control_weights(["x", "y"], [1.0], None, 0.5)
    with pytest.raises(ValueError, match="must be positive"):
        label_control_weights(["x"], [0.0], None, 0.5)


def test_hargo_weights_under_the_label_control() -> None:
    free, _ = hargo_weights(REWARDS, GROUPS, REF, MASK)
    w, stats = hargo_weights(REWARDS, GROUPS, REF, MASK, label_control=True, labels=LABELS,
                             label_momentum=0.0)
    yes_no, qa = float(free[:2].mean()), float(free[2:].mean())
    centre = (2 * yes_no + 4 * qa) / 6
    assert w.tolist() == pytest.approx([yes_no / centre] * 2 + [qa / centre] * 4)
    assert stats["label_means"] == pytest.approx({"yes/no": yes_no, "qa": qa})
    assert stats["weight_max"] == pytest.approx(max(yes_no, qa) / centre)
    # the state goes round: momentum ½ against a previous yes/no mean of 3
    w2, stats2 = hargo_weights(REWARDS, GROUPS, REF, MASK, label_control=True, labels=LABELS,
                               label_momentum=0.5, label_means={"yes/no": 3.0})
    assert stats2["label_means"]["yes/no"] == pytest.approx(1.5 + 0.5 * yes_no)
    assert float(w2.mean()) == pytest.approx(1.0)
    # both signals off: the label-free weights are 1, so are the control's
    off, _ = hargo_weights(REWARDS, GROUPS, REF, MASK, label_control=True, labels=LABELS,
                           discrimination=False, confidence=False)
    assert off.tolist() == [1.0] * 6


def test_the_label_control_needs_labels() -> None:
    with pytest.raises(ValueError, match="label_control needs the task label of every row"):
        hargo_weights(REWARDS, GROUPS, REF, MASK, label_control=True)
    with pytest.raises(ValueError, match="labels must have 6 entries"):
        hargo_weights(REWARDS, GROUPS, REF, MASK, label_control=True, labels=["a"])


def test_labels_never_reach_the_label_free_path() -> None:
    # hargo_signals takes no labels at all; hargo_weights ignores them without the control
    assert not {"labels", "label_means"} & set(inspect.signature(hargo_signals).parameters)
    base, stats = hargo_weights(REWARDS, GROUPS, REF, MASK)
    tagged, tagged_stats = hargo_weights(REWARDS, GROUPS, REF, MASK, labels=["z"] * 6,
                                         label_means={"z": 5.0})
    assert torch.equal(base, tagged) and "label_means" not in tagged_stats
    assert stats == tagged_stats


def test_labels_module_needs_no_torch() -> None:
    code = ("import sys; import hargo_hpc.algorithms.hargo_labels as h; "
            "print(h.task_weight_shares(['a'], [2.0], [1.0])['a']['mean_weight']); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["2.0", "False"]
