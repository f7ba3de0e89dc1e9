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

from collections.abc import Sequence

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
