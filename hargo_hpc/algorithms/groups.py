"""Per-group statistics over an explicit group index (groups may differ in size).

A *group* is the set of responses sampled for one prompt; `group_index[i]` names the group of
response `i`. Ids may be any integers in any order: they are made dense with `torch.unique`,
never inferred from positions in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Groups:
    """Dense group structure: `inverse[i]` in 0..num-1 and the size of each group."""

    inverse: Tensor  # [B] long
    sizes: Tensor  # [num] long
    num: int

    @classmethod
    def of(cls, group_index: Tensor) -> Groups:
        _, inverse, sizes = torch.unique(group_index, return_inverse=True, return_counts=True)
        return cls(inverse=inverse, sizes=sizes, num=int(sizes.numel()))

    def sum(self, values: Tensor) -> Tensor:
        """[num]: Σ_{i∈g} values_i."""
        out = torch.zeros(self.num, dtype=values.dtype, device=values.device)
        return out.index_add(0, self.inverse, values)

    def mean(self, values: Tensor) -> Tensor:
        """[num]: mean_{i∈g} values_i."""
        return self.sum(values) / self.sizes.to(values.dtype)

    def centred(self, values: Tensor) -> Tensor:
        """[B]: values_i − mean_g values, exactly 0 in groups whose values are all equal
        (the float mean of equal numbers can differ from them in the last bit)."""
        flat = (self.spread(values) == 0)[self.inverse]
        centred = values - self.mean(values)[self.inverse]
        return torch.where(flat, torch.zeros_like(centred), centred)

    def std(self, values: Tensor) -> Tensor:
        """[num]: unbiased std within each group (as torch.std, TRL, verl); 0 for size-1 groups.

        std_g = sqrt( Σ_{i∈g} (x_i − mean_g)² / (n_g − 1) ).
        """
        centred = self.centred(values)
        squares = self.sum(centred * centred)
        denom = (self.sizes - 1).clamp(min=1).to(values.dtype)
        return torch.where(self.sizes > 1, (squares / denom).sqrt(), torch.zeros_like(squares))

    def max(self, values: Tensor) -> Tensor:
        out = torch.full((self.num,), -torch.inf, dtype=values.dtype, device=values.device)
        return out.scatter_reduce(0, self.inverse, values, reduce="amax")

    def min(self, values: Tensor) -> Tensor:
        out = torch.full((self.num,), torch.inf, dtype=values.dtype, device=values.device)
        return out.scatter_reduce(0, self.inverse, values, reduce="amin")

    def spread(self, values: Tensor) -> Tensor:
        """[num]: max − min within each group (0 when all rewards are equal)."""
        return self.max(values) - self.min(values)
