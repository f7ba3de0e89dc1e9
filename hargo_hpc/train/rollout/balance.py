"""How a step's prompts are shared out over the ranks: an order whose contiguous equal shares
carry nearly equal generation work, so that in a mixed step no rank writes long kernels while
the others wait after short answers (docs/rollout.md, "Sharing a step over ranks")."""

from __future__ import annotations

from collections.abc import Sequence


def balanced_order(costs: Sequence[float], parts: int) -> list[int]:
    """An order of the indices of `costs` whose `parts` contiguous shares of len(costs)/parts
    each carry nearly equal total cost.

    The longest-processing-time rule under equal counts: the indices, costliest first (ties by
    index), each to the share with the least cost so far that still has room (ties to the
    lower share); within a share the original order. (Graham's LPT rule, "Bounds on
    multiprocessing timing anomalies", 1969, here under equal counts; that no share ends more
    than one largest cost above another is what tests/train/test_balance.py checks.) With one
    share or equal costs it is the identity, so a one-task step splits as it always did.
    ValueError when len(costs) is not a multiple of `parts`."""
    n = len(costs)
    if parts < 1 or n % parts:
        raise ValueError(f"{n} prompts cannot be shared equally over {parts} ranks")
    if parts == 1 or len(set(costs)) <= 1:
        return list(range(n))
    room = n // parts
    loads = [0.0] * parts
    shares: list[list[int]] = [[] for _ in range(parts)]
    for index in sorted(range(n), key=lambda i: (-costs[i], i)):
        part = min((p for p in range(parts) if len(shares[p]) < room),
                   key=lambda p: (loads[p], p))
        shares[part].append(index)
        loads[part] += costs[index]
    return [index for share in shares for index in sorted(share)]
