"""The engine tests' own tiny model and batches, and the two-rank run.

As a script, under `torchrun --nproc_per_node=2 tests/train/_two_ranks.py OUT STAGE...`: for each
ZeRO stage, every rank builds the same model, takes its half of one global batch, trains STEPS
optimizer steps with whole-batch denominators (and generates for its own prompt between the two
steps, inside `gathered_parameters`) and saves its full parameters, gradient norms and
generated tokens as `OUT/stage<z>_rank<r>.pt`, plus `OUT/gathered_rank<r>.json` (what
gather_floats returned). The test compares ranks with each other and with a one-process run of
the whole batch.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

VOCAB = 256
SEQ = 12
GLOBAL_BATCH = 4
STEPS = 2
# Adam's eps above most gradient elements, so that rounding gives a bound on the weights
# (tests/numerics.py; the script runs without tests/ on its path, hence the literal).
SETTINGS = dict(lr=1e-3, weight_decay=0.1, grad_clip=0.0, warmup_steps=1, total_steps=STEPS,
                eps=1e-2)
# The longest reduction behind one gradient element: the weight gradients sum over the batch's
# tokens, each a product of back-propagated reductions at most VOCAB wide (the LM head).
REDUCTION = GLOBAL_BATCH * (SEQ - 1) * VOCAB


def engine_test_model(seed: int = 0) -> torch.nn.Module:
    """A 2-layer Llama (hidden 64, 4 heads, vocab 256), random weights from `seed`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def batch(step: int, rows: int = GLOBAL_BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [rows, SEQ] of step `step` and a loss mask with a different length per row
    (so per-rank token counts differ and the global denominator matters)."""
    gen = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(0, VOCAB, (rows, SEQ), generator=gen)
    lengths = torch.tensor([SEQ - 1 - (3 * i) % 7 for i in range(rows)])
    mask = (torch.arange(SEQ - 1)[None, :] < lengths[:, None]).float()
    return ids, mask


def summed_nll(forward: Callable[..., object], ids: torch.Tensor, mask: torch.Tensor,
               denominator: float) -> torch.Tensor:
    """Σ masked next-token NLL of these rows / `denominator` (the whole batch's token count)."""
    logits = forward(input_ids=ids.to(_device(forward))).logits.float()
    nll = F.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1).to(logits.device),
        reduction="none",
    ).view(ids.shape[0], -1)
    return (nll * mask.to(nll.device)).sum() / denominator


def greedy(module: torch.nn.Module, row: int) -> list[int]:
    """8 greedy tokens after the first 4 tokens of `batch(5)`'s row `row`."""
    prompt = batch(5)[0][row : row + 1, :4].to(next(module.parameters()).device)
    with torch.no_grad():
        out = module.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    return out[0, 4:].tolist()


def _device(forward: Callable[..., object]) -> torch.device:
    device = getattr(forward, "device", None)
    if device is not None:
        return torch.device(device)
    return next(forward.parameters()).device  # type: ignore[attr-defined]


def main(out: Path, stages: list[int]) -> None:
    from hargo_hpc.train.backend import distributed
    from hargo_hpc.train.backend.engine import build_engine

    env = distributed.init()
    rank, world = env.rank, env.world_size
    per_rank = GLOBAL_BATCH // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    gathered = distributed.gather_floats([float(rank), 10.0 + rank])
    (out / f"gathered_rank{rank}.json").write_text(json.dumps(gathered))
    for stage in stages:
        engine = build_engine(
            engine_test_model(), zero_stage=stage, micro_batch_size=per_rank, grad_accum=1,
            overrides={"zero_optimization": {"stage3_param_persistence_threshold": 0}},
            **SETTINGS,
        )
        norms, generated, whole = [], [], False
        for step in range(STEPS):
            ids, mask = batch(step)
            total = distributed.sum_across_ranks(float(mask[rows].sum()))
            loss = summed_nll(engine, ids[rows], mask[rows], total)
            engine.backward(loss)
            engine.step()
            norms.append(engine.grad_norm)
            if step == 0:  # each rank its own prompt, between two optimizer steps
                engine.eval()
                with engine.gathered_parameters():
                    generated = greedy(engine.module, rank)
                    whole = all(p.numel() > 0 for p in engine.module.parameters())
                engine.train()
        state = engine.full_state_dict()
        torch.save({"state": state, "norms": norms, "generated": generated, "whole": whole},
                   out / f"stage{stage}_rank{rank}.pt")
    distributed.teardown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), [int(s) for s in sys.argv[2:]])
    from hargo_hpc.train.backend.distributed import end_process

    end_process(0)  # as hargo's ranks end (a group's threads may outlive the run)
