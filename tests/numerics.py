"""Tolerances of the suite's numeric equality tests, derived from the arithmetic.

Two runs of the same training that sum the same terms in another order (micro-batches, ranks,
ZeRO's flat buckets, another CPU's kernels: ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS) differ
by rounding only. For a reduction of n float32 terms the error of a result is about
sqrt(n)·u relative to the terms' scale (the rounding errors add like a random walk; the
worst case n·u is never approached), u = 2^-24; the bounds take 4 times that.

Adam turns a gradient into a step lr·m̂/(√v̂ + ε). With the default ε = 1e-8 a weight whose
gradient is ~0 steps sign(rounding noise)·lr, and no bound on the weights follows; the equality
tests therefore train with ε above most gradient elements (1e-2), where a step moves with its
gradient by at most 2/ε per unit (∂m̂/∂g ≤ 1, the √v̂ term no more than as much again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

FP32_UNIT = 2.0**-24
ADAM_EPS = 1e-2  # the equality tests' Adam ε (module docstring)


def grad_rtol(reduction: int) -> float:
    """Relative bound between two float32 gradients (or their norms) whose longest reduction
    has `reduction` terms: 4·sqrt(n)·u."""
    return 4 * reduction**0.5 * FP32_UNIT


def adam_weight_tolerance(grad_norms: Sequence[float], lrs: Sequence[float], reduction: int,
                          eps: float = ADAM_EPS) -> float:
    """The largest |θ_a − θ_b| rounding allows after the same Adam steps of two runs:

        tol = Σ_t (lr_t · (2 / ε) · grad_rtol(n) · ‖g_t‖ + 8 u)

    per step, every gradient element differs by at most grad_rtol(n)·‖g_t‖ (the norm bounds each
    element), Adam's step by 2/ε times that, and the update's own rounding adds a few u (weights
    are O(1)). A mismatch in what is summed (a per-rank or per-micro-batch denominator) moves
    gradients by a share of themselves, orders above grad_rtol.
    """
    rtol = grad_rtol(reduction)
    return sum(lr * (2 / eps) * rtol * norm + 8 * FP32_UNIT
               for lr, norm in zip(lrs, grad_norms, strict=True))


def forward_atol(ops: int, width: int, scale: float = 1.0) -> float:
    """Absolute bound between two float32 forward passes of the same model over the same
    tokens in another batch shape (micro-batches, padding, a KV cache), for `ops` reductions
    in sequence (matmuls, softmaxes, norms) each at most `width` terms, on values at most
    `scale`: each op adds grad_rtol(width) relative, and the errors of ops in sequence add,

        atol = ops · 4·sqrt(width)·u · scale
    """
    return ops * grad_rtol(width) * scale


def assert_same_adam_update(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor],
                            before: Mapping[str, torch.Tensor], lr: float, steps: int) -> None:
    """Two runs' weights after the same Adam steps at the default ε (1e-8), gradients summed
    in another order. Rounding-sized gradient elements may step by anything up to 2·lr per
    step (module docstring), so no element-wise bound holds; what does: such elements are
    few, so ‖Δgot − Δwant‖ ≤ 1 % of ‖Δwant‖ over all parameters, 99.9 % of the elements
    within 1e-5, and none further than 2·lr·steps. A mismatch in what is summed moves most
    elements' steps (the norm condition)."""
    diff = torch.cat([(got[k] - want[k]).flatten().double() for k in want])
    moved = torch.cat([(want[k] - before[k]).flatten().double() for k in want])
    assert moved.norm() > 0.1 * lr  # the steps trained
    assert diff.norm() <= 1e-2 * moved.norm(), (float(diff.norm()), float(moved.norm()))
    assert float((diff.abs() <= 1e-5).double().mean()) >= 0.999
    assert float(diff.abs().max()) <= 2 * lr * steps
