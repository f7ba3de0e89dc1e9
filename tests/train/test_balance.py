"""balanced_order: a mixed step's prompts shared so that every rank's generation work is
nearly equal, every prompt exactly once, equal counts, a one-task step as before."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hargo_hpc.train.rollout.balance import balanced_order


def loads(costs: list[int], order: list[int], parts: int) -> list[int]:
    share = len(costs) // parts
    return [sum(costs[i] for i in order[p * share:(p + 1) * share]) for p in range(parts)]


def test_a_mixed_step_gives_each_rank_one_kernel_and_one_short_answer() -> None:
    costs = [1024, 1024, 8, 8]  # drawn as GEMM, GEMM, yes/no, yes/no
    order = balanced_order(costs, 2)
    assert loads(costs, list(range(4)), 2) == [2048, 16]  # the contiguous split: one rank waits
    assert loads(costs, order, 2) == [1032, 1032]
    assert order == [0, 2, 1, 3]  # within a share, the draw's order


def test_one_task_or_one_rank_keeps_the_draws_order() -> None:
    assert balanced_order([32] * 8, 4) == list(range(8))
    assert balanced_order([1024, 8, 64], 1) == [0, 1, 2]


def test_a_step_that_cannot_be_shared_equally_is_refused() -> None:
    with pytest.raises(ValueError, match="5 prompts cannot be shared equally over 2 ranks"):
        balanced_order([8] * 5, 2)


@given(st.integers(1, 8).flatmap(lambda parts: st.tuples(
    st.just(parts), st.integers(1, 6).flatmap(lambda share: st.lists(
        st.sampled_from([8, 64, 256, 1024]), min_size=share * parts,
        max_size=share * parts)))))
def test_every_prompt_once_and_no_share_heavier_than_another_by_more_than_one_prompt(
        case: tuple[int, list[int]]) -> None:
    parts, costs = case
    order = balanced_order(costs, parts)
    assert sorted(order) == list(range(len(costs)))
    spread = loads(costs, order, parts)
    assert max(spread) - min(spread) <= max(costs)
