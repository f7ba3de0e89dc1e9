"""Token log-probs: the position alignment checked by hand, micro-batches, left padding, the
gradient flag, entropy, and agreement with the per-step logits of `generate`.

The tests build their own tiny model (`build_own_tiny_lm`, also used by test_rollout.py): a
random Llama (hidden 64, 2 layers, 4 heads) and a byte-level BPE tokenizer trained on a few
lines, pad == EOS, saved under a pytest temp dir.

Tolerances (tests/numerics.py, forward_atol): a log-prob of the test model passes about 20
reductions in sequence (2 layers of norm, projections, attention scores, softmax, mixing and
MLP; the head; the log-softmax), the widest the 300-token vocabulary, on values of its random
init at most ~1: LOGPROB_ATOL = 20 · 4·sqrt(300)·u ≈ 8e-5. An entropy sums 300 terms p·(−log p)
with −log p up to ~10: ENTROPY_ATOL 10 times that. A misalignment by one position or a wrong
pad changes log-probs by 1e-3 and more (test_alignment_matches_a_hand_computation shows one).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from numerics import forward_atol
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from hargo_hpc.train.model.logprobs import (
    position_ids_from_mask,
    token_logprobs,
    token_logprobs_and_entropy,
)

OWN_TINY_LINES = [
    "Does this loop have a data race? yes",
    "Does this loop have a data race? no",
    "MLPerf measures training and inference speed.",
    "void gemm(int n, const float *a, const float *b, float *c) { }",
    "the quick brown fox jumps over the lazy dog",
]

LOGPROB_ATOL = forward_atol(ops=20, width=300)  # 8.3e-5 (module docstring)
ENTROPY_ATOL = 10 * LOGPROB_ATOL


def build_own_tiny_lm(directory: Path) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """This test suite's own tiny causal LM (not the project's `tiny` model): saved to and
    reloaded from `directory`, in eval mode."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(OWN_TINY_LINES * 10, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>",
                                   pad_token="<eos>")
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(1234)
    LlamaForCausalLM(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    model = LlamaForCausalLM.from_pretrained(directory).eval()
    return model, PreTrainedTokenizerFast.from_pretrained(directory)


def own_tiny_gpt2() -> GPT2LMHeadModel:
    """A random GPT-2 (learned absolute positions, unlike RoPE, which only sees relative
    offsets): left padding without position ids changes its logits."""
    torch.manual_seed(4321)
    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> LlamaForCausalLM:
    model, _ = build_own_tiny_lm(tmp_path_factory.mktemp("own-tiny-lm-logprobs"))
    return model


def left_pad(rows: list[list[int]], completion: list[list[int]], pad: int = 0
             ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """[prompt left padded | completion right padded] ids and mask, and P."""
    width = max(len(r) for r in rows)
    tail = max(len(c) for c in completion)
    ids, mask = [], []
    for prompt, comp in zip(rows, completion, strict=True):
        ids.append([pad] * (width - len(prompt)) + prompt + comp + [pad] * (tail - len(comp)))
        mask.append([0] * (width - len(prompt)) + [1] * (len(prompt) + len(comp))
                    + [0] * (tail - len(comp)))
    return torch.tensor(ids), torch.tensor(mask), width


def test_position_ids_count_real_tokens_from_zero() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]


def test_alignment_matches_a_hand_computation(lm: LlamaForCausalLM) -> None:
    # prompt [11, 12, 13], completion [14, 15, 16]: completion token j sits at position 3 + j
    # and is scored by the logits at position 2 + j.
    ids = torch.tensor([[11, 12, 13, 14, 15, 16]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = lm(input_ids=ids).logits[0]
    for tau in (1.0, 0.7):
        expected = torch.stack([
            torch.log_softmax(logits[2] / tau, dim=-1)[14],
            torch.log_softmax(logits[3] / tau, dim=-1)[15],
            torch.log_softmax(logits[4] / tau, dim=-1)[16],
        ])
        got, entropy = token_logprobs_and_entropy(lm, ids, mask, 3, 1, temperature=tau)
        assert got.shape == (1, 3)
        torch.testing.assert_close(got[0], expected, rtol=0, atol=LOGPROB_ATOL)
        probs = [torch.softmax(logits[t] / tau, dim=-1) for t in (2, 3, 4)]
        hand_entropy = torch.stack([-(p * p.log()).sum() for p in probs])
        torch.testing.assert_close(entropy[0], hand_entropy, rtol=0, atol=ENTROPY_ATOL)
    # an off-by-one (the logits at the token's own position) would give other numbers
    wrong = torch.log_softmax(logits[3], dim=-1)[14]
    assert abs(float(token_logprobs(lm, ids, mask, 3, 1)[0, 0]) - float(wrong)) > 1e-3


def test_masked_completion_positions_are_zero(lm: LlamaForCausalLM) -> None:
    ids, mask, start = left_pad([[5, 6, 7], [8, 9]], [[20, 21, 22], [23]])
    logprobs, entropy = token_logprobs_and_entropy(lm, ids, mask, start, 2)
    assert logprobs.shape == entropy.shape == (2, 3)
    assert (logprobs[1, 1:] == 0).all() and (entropy[1, 1:] == 0).all()
    assert (logprobs[0] < 0).all() and (logprobs[1, 0] < 0)
    assert (entropy[0] > 0).all()


def test_micro_batches_equal_one_full_batch(lm: LlamaForCausalLM) -> None:
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [15], [16, 17, 18, 19]]
    completions = [[30, 31, 32, 33], [34, 35], [36, 37, 38], [39], [40, 41, 42, 43]]
    ids, mask, start = left_pad(prompts, completions)
    full = token_logprobs(lm, ids, mask, start, micro_batch=5)
    for micro in (1, 2, 3):
        torch.testing.assert_close(token_logprobs(lm, ids, mask, start, micro), full,
                                   rtol=0, atol=LOGPROB_ATOL)
    _, ent_full = token_logprobs_and_entropy(lm, ids, mask, start, 5)
    _, ent_micro = token_logprobs_and_entropy(lm, ids, mask, start, 2)
    torch.testing.assert_close(ent_micro, ent_full, rtol=0, atol=ENTROPY_ATOL)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_left_padding_does_not_change_a_sequence(lm: LlamaForCausalLM, kind: str) -> None:
    model = lm if kind == "llama" else own_tiny_gpt2()
    alone_ids, alone_mask, start = left_pad([[5, 6, 7]], [[20, 21, 22]])
    alone = token_logprobs(model, alone_ids, alone_mask, start, 1)
    # in a batch with a prompt 6 tokens longer: 6 pads on its left, 1 on its right
    ids, mask, start = left_pad([[5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16, 17]],
                                [[20, 21, 22], [23, 24, 25, 26]])
    batched = token_logprobs(model, ids, mask, start, 2)
    torch.testing.assert_close(batched[0, :3], alone[0], rtol=0, atol=LOGPROB_ATOL)
    assert batched[0, 3] == 0
    if kind == "gpt2":  # the test can fail: without position ids the padded row differs
        with torch.no_grad():
            naive = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits[0], -1)
        naive_first = naive[start - 1, 20]
        assert abs(float(naive_first) - float(alone[0, 0])) > 1e-3


def test_grad_flag(lm: LlamaForCausalLM) -> None:
    ids, mask, start = left_pad([[5, 6, 7], [8, 9, 10, 11, 12]], [[20, 21], [22, 23, 24]])
    assert not token_logprobs(lm, ids, mask, start, 2).requires_grad
    lm.zero_grad()
    logprobs = token_logprobs(lm, ids, mask, start, 1, grad=True)
    assert logprobs.requires_grad
    (logprobs.sum() / mask[:, start:].sum()).backward()
    grads = [p.grad for p in lm.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads if g is not None)
    lm.zero_grad()


def test_logprobs_match_the_logits_generate_sampled_from(lm: LlamaForCausalLM) -> None:
    # generate on a left-padded batch with the per-step raw logits; the scoring pass (full
    # sequence, position ids from the mask) must give the same log-probs of the chosen tokens.
    ids, mask, start = left_pad([[5, 6, 7, 8, 9, 10], [11, 12]], [[], []])
    torch.manual_seed(0)
    out = lm.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0,
                      max_new_tokens=6, output_logits=True, return_dict_in_generate=True,
                      pad_token_id=0, eos_token_id=None)
    steps = torch.stack(out.logits, dim=1).float()  # [B, T, V], raw (before temperature)
    completion = out.sequences[:, start:]
    full_mask = torch.cat([mask, torch.ones_like(completion)], dim=1)
    for tau in (1.0, 0.6):
        expected = torch.log_softmax(steps / tau, -1).gather(-1, completion[..., None])[..., 0]
        got = token_logprobs(lm, out.sequences, full_mask, start, 2, temperature=tau)
        torch.testing.assert_close(got, expected, rtol=0, atol=LOGPROB_ATOL)


@pytest.mark.parametrize(("change", "message"), [
    ({"completion_start": 0}, "completion_start"),
    ({"completion_start": 6}, "completion_start"),
    ({"micro_batch": 0}, "micro_batch"),
    ({"temperature": 0.0}, "temperature"),
    ({"attention_mask": torch.ones(1, 5, dtype=torch.long)}, "attention_mask"),
    ({"input_ids": torch.ones(1, 6)}, "integer"),
])
def test_bad_input_is_a_one_line_error(lm: LlamaForCausalLM, change: dict, message: str) -> None:
    args = {"input_ids": torch.tensor([[1, 2, 3, 4, 5, 6]]),
            "attention_mask": torch.ones(1, 6, dtype=torch.long), "completion_start": 3,
            "micro_batch": 1, "temperature": 1.0}
    args.update(change)
    with pytest.raises(ValueError, match=message):
        token_logprobs(lm, args["input_ids"], args["attention_mask"], args["completion_start"],
                       args["micro_batch"], temperature=args["temperature"])


def test_the_taken_log_probs_differentiate_as_a_log_softmax_does() -> None:
    """TakenLogprobs (a row at a time, no fp32 copy kept) against autograd's own log-softmax:
    the same values and gradients, at τ = 1 and τ = 0.7; gradcheck in float64."""
    from hargo_hpc.train.model.logprobs import TakenLogprobs

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (3, 5), generator=gen)
    weights = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    for tau in (1.0, 0.7):
        ours = TakenLogprobs.apply(logits, targets, tau)
        (g_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
        assert ours.dtype == torch.float64
        plain = torch.log_softmax(logits / tau, dim=-1).gather(-1, targets.unsqueeze(-1))
        (g_plain,) = torch.autograd.grad((plain.squeeze(-1) * weights).sum(), logits)
        torch.testing.assert_close(ours.double(), plain.squeeze(-1), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g_ours, g_plain, rtol=1e-6, atol=1e-9)
    assert torch.autograd.gradcheck(
        lambda z: TakenLogprobs.apply(z, targets, 0.7).double(), (logits,))
    bf16 = logits.detach().to(torch.bfloat16).requires_grad_()
    TakenLogprobs.apply(bf16, targets, 1.0).sum().backward()
    assert bf16.grad is not None and bf16.grad.dtype == torch.bfloat16  # the model's dtype


def test_a_micro_batch_cut_after_its_longest_completion_scores_the_same(
        lm: LlamaForCausalLM) -> None:
    """The update's micro-batches (updates.micro_batch) drop the columns that are padding in
    all their rows: a yes/no pair beside a long answer is scored on its own width, and its
    log-probs are those of the full-width rows."""
    from hargo_hpc.train.updates import UpdateBatch, micro_batch

    prompts = [[5, 6, 7], [8, 9], [10, 11, 12]]
    completions = [[30, 31, 32, 33, 34, 35], [36], [37, 38]]
    ids, mask, start = left_pad(prompts, completions)
    loss_mask = mask[:, start:].bool()
    per_token = torch.randn(loss_mask.shape)
    batch = UpdateBatch(input_ids=ids, attention_mask=mask, completion_start=start,
                        loss_mask=loss_mask, keep=torch.ones(3, dtype=torch.bool),
                        rewards=torch.zeros(3), groups=torch.zeros(3, dtype=torch.long),
                        advantages=torch.randn(3), weights=None, old=per_token, ref=None,
                        examples=[])
    full = token_logprobs(lm, ids, mask, start, micro_batch=3)
    short = micro_batch(batch, [1, 2])
    assert short.input_ids.shape == (2, start + 2) and short.loss_mask.shape == (2, 2)
    assert short.old is not None and torch.equal(short.old, per_token[1:, :2])
    assert torch.equal(short.advantages, batch.advantages[1:])
    got = token_logprobs(lm, short.input_ids, short.attention_mask, start, micro_batch=2)
    torch.testing.assert_close(got, full[1:, :2], rtol=0, atol=LOGPROB_ATOL)
    assert micro_batch(batch, [0, 1]).input_ids.shape == (2, ids.shape[1])  # the longest: no cut
    assert micro_batch(batch, []).input_ids.shape == (0, start + 1)


def test_an_optimizer_step_keeps_its_rows_and_packs_them_by_length() -> None:
    """`plan_by_length`: the optimizer steps hold the rows `plan` gives them; inside a step the
    rows run longest completion first, so like lengths share a micro-batch (ties in row
    order)."""
    from hargo_hpc.train.updates import UpdateBatch, plan, plan_by_length

    lengths = [1, 9, 2, 9, 1, 5, 3, 1]
    prompts = [[5, 6]] * len(lengths)
    ids, mask, start = left_pad(prompts, [[30] * n for n in lengths])
    batch = UpdateBatch(input_ids=ids, attention_mask=mask, completion_start=start,
                        loss_mask=mask[:, start:].bool(), keep=torch.ones(8, dtype=torch.bool),
                        rewards=torch.zeros(8), groups=torch.zeros(8, dtype=torch.long),
                        advantages=torch.zeros(8), weights=None, old=None, ref=None,
                        examples=[])
    packed = plan_by_length(batch, opt_steps=2, accum=2)
    assert packed == [[[1, 3], [2, 0]], [[5, 6], [4, 7]]]
    for ours, theirs in zip(packed, plan(list(range(8)), 2, 2), strict=True):
        assert sorted(i for micro in ours for i in micro) == [i for m in theirs for i in m]
