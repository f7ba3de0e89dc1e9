"""Input checks shared by the algorithms: shapes, dtypes and finiteness, with clear messages.

Every public function validates its tensors here first, so a bad batch fails with a one-line
`ValueError` naming the tensor, never with a NaN loss or a broadcasting surprise later.
"""

from __future__ import annotations

import torch
from torch import Tensor


def as_rewards(rewards: Tensor, name: str = "rewards") -> Tensor:
    """A finite 1-D float tensor; integer and bool rewards are converted to float32."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 1:
        raise ValueError(f"{name} must be 1-D [B], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    check_finite(rewards, name)
    return rewards


def check_finite(tensor: Tensor, name: str, mask: Tensor | None = None) -> None:
    """Raise if `tensor` (where `mask` is true, if given) holds NaN or inf."""
    bad = ~torch.isfinite(tensor.detach())
    if mask is not None:
        bad = bad & mask.bool()
    if bool(bad.any()):
        where = bad.nonzero().tolist()[:5]
        raise ValueError(f"{name} contains NaN or inf (first positions: {where})")


def as_group_index(group_index: Tensor, size: int, name: str = "group_index") -> Tensor:
    """A 1-D integer tensor of length `size` (one group id per response)."""
    if not isinstance(group_index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(group_index).__name__}")
    if group_index.dim() != 1 or group_index.shape[0] != size:
        raise ValueError(
            f"{name} must have shape [{size}] like rewards, got {tuple(group_index.shape)}"
        )
    if group_index.is_floating_point() or group_index.is_complex() or group_index.dtype == (
        torch.bool
    ):
        raise ValueError(f"{name} must be an integer tensor, got {group_index.dtype}")
    return group_index.long()


def check_same_shape(*named: tuple[str, Tensor | None]) -> None:
    """Raise naming the tensors if the given (non-None) tensors differ in shape."""
    present = [(n, t) for n, t in named if t is not None]
    if not present:
        return
    first_name, first = present[0]
    for name, tensor in present[1:]:
        if tensor.shape != first.shape:
            raise ValueError(
                f"shape mismatch: {first_name} {tuple(first.shape)} vs {name} "
                f"{tuple(tensor.shape)}"
            )


def as_mask(mask: Tensor, like: Tensor, like_name: str) -> Tensor:
    """A bool [B, T] completion mask of the same shape as `like`."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if like.dim() != 2:
        raise ValueError(f"{like_name} must be 2-D [B, T], got shape {tuple(like.shape)}")
    check_same_shape((like_name, like), ("mask", mask))
    return mask.bool()


def check_batch(per_response: Tensor, name: str, batch: int, batch_name: str) -> None:
    """Raise if a per-response tensor is not [B] with B taken from `batch_name`."""
    if per_response.dim() != 1 or per_response.shape[0] != batch:
        raise ValueError(
            f"{name} must have shape [{batch}] (one per response of {batch_name}), got "
            f"{tuple(per_response.shape)}"
        )
