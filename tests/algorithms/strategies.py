"""Shared helpers of the algorithm tests: hypothesis strategies for grouped batches."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

# rewards on a grid of quarters are exact in binary floating point, so invariances can be
# checked to round-off; hypothesis keeps the batches small so the suite stays fast
REWARD = st.integers(min_value=0, max_value=8).map(lambda k: k / 4)


@st.composite
def grouped_rewards(draw: st.DrawFn, max_groups: int = 5, max_size: int = 6) -> tuple[
    torch.Tensor, torch.Tensor
]:
    """(rewards [B] float64, group_index [B]) with groups of sizes 1..max_size, ids shuffled."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    ids = draw(st.permutations(list(range(100, 100 + len(sizes)))))
    rewards: list[float] = []
    groups: list[int] = []
    for gid, size in zip(ids, sizes, strict=True):
        rewards += draw(st.lists(REWARD, min_size=size, max_size=size))
        groups += [gid] * size
    order = draw(st.permutations(list(range(len(rewards)))))
    return (torch.tensor([rewards[i] for i in order], dtype=torch.float64),
            torch.tensor([groups[i] for i in order]))


def token_batch(batch: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [B, T] float64 in [-3, 0), mask [B, T]) with random lengths 0..T."""
    gen = torch.Generator().manual_seed(seed)
    logprobs = -3.0 * torch.rand(batch, width, generator=gen, dtype=torch.float64) - 1e-3
    lengths = torch.randint(0, width + 1, (batch,), generator=gen)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return logprobs, mask
