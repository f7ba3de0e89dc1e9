"""Rollout: the batch layout, EOS / stop-string / truncation masks, seeds, the gather context,
the model's generation_config set aside, the backend interface, and scoring.

Uses this suite's own tiny model (`build_own_tiny_lm` in test_logprobs.py). Its random weights
almost never pick EOS (1 token in 300), so an "EOS-prone" copy adds a bias to the EOS logit.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence

import pytest
import torch
from numerics import forward_atol
from torch import nn
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from hargo_hpc.train.model.logprobs import token_logprobs
from hargo_hpc.train.rollout.generate import (
    GenerationBackend,
    Generations,
    HFGenerateBackend,
    RolloutBatch,
    SamplingParams,
    finish_completion,
    finish_completions,
    score_rollout,
)

from .test_logprobs import build_own_tiny_lm

PROMPTS = ["Does this loop have a data race?", "void gemm(int n, const float *a"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    return build_own_tiny_lm(tmp_path_factory.mktemp("own-tiny-lm-rollout"))


@pytest.fixture(scope="module")
def eos_prone(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> LlamaForCausalLM:
    """The tiny model with +6 on the EOS logit (p(EOS) ≈ 0.4 per step)."""
    model = copy.deepcopy(tiny[0])
    head = nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tiny[1].eos_token_id] = 6.0
    model.lm_head = head
    return model


def params(**kwargs: object) -> SamplingParams:
    return SamplingParams(**{"max_new_tokens": 12, "seed": 0, **kwargs})  # type: ignore[arg-type]


# ---------------------------------------------------------------- finish_completion by hand

PIECES = {0: "<eos>", 1: "he", 2: "llo", 3: "\n", 4: "\n\nfoo", 5: "wor", 6: "ld", 7: "###"}


def decode(tokens: Sequence[int]) -> str:
    return "".join(PIECES[t] for t in tokens if t != 0)  # 0 is special: skipped


EOS = frozenset({0})


def test_finish_at_eos_keeps_the_eos_in_the_mask() -> None:
    end = finish_completion([1, 2, 0, 0, 0], EOS, (), decode)
    assert (end.length, end.text, end.truncated) == (3, "hello", False)


def test_finish_without_eos_is_truncated() -> None:
    end = finish_completion([1, 2, 5, 6], EOS, (), decode)
    assert (end.length, end.text, end.truncated) == (4, "helloworld", True)


def test_stop_string_spanning_two_tokens() -> None:
    # "hello\n" + "\n" completes "\n\n" at the 4th token; the text drops the stop string
    end = finish_completion([1, 2, 3, 3, 5, 6], EOS, ("\n\n",), decode)
    assert (end.length, end.text, end.truncated) == (4, "hello", False)


def test_stop_string_inside_a_token_drops_what_follows_it() -> None:
    end = finish_completion([1, 2, 4, 5], EOS, ("\n\n",), decode)
    assert (end.length, end.text, end.truncated) == (3, "hello", False)


def test_the_first_completed_stop_string_wins() -> None:
    # "world" completes at token 5 (index 4), "###" at token 6: cut after "world"'s token
    end = finish_completion([1, 2, 5, 6, 7], EOS, ("###", "ld"), decode)
    assert (end.length, end.text) == (4, "hellowor")
    # a stop string after the EOS does not count
    end = finish_completion([1, 0, 7], EOS, ("###",), decode)
    assert (end.length, end.text, end.truncated) == (2, "he", False)


def test_finish_completions_pads_after_the_end_and_trims() -> None:
    raw = torch.tensor([[1, 0, 0, 0, 0], [1, 2, 3, 3, 5], [1, 2, 0, 0, 0]])
    ids, mask, truncated, texts = finish_completions(raw, EOS, 0, ("\n\n",), decode)
    assert ids.tolist() == [[1, 0, 0, 0], [1, 2, 3, 3], [1, 2, 0, 0]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert truncated.tolist() == [False, False, False]
    assert texts == ["he", "hello", "hello"]


# ---------------------------------------------------------------- the HF backend


def test_batch_layout(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    gen = HFGenerateBackend(model, tok).generate(PROMPTS, 3, params(max_new_tokens=8))
    n = len(PROMPTS) * 3
    assert gen.prompt_ids.shape[0] == gen.completion_ids.shape[0] == n
    assert gen.group_index.tolist() == [0, 0, 0, 1, 1, 1]
    for i in range(n):
        p = PROMPTS[i // 3]
        row_mask = gen.prompt_mask[i].bool()
        assert tok.decode(gen.prompt_ids[i][row_mask]) == p
        length = int(row_mask.sum())
        assert row_mask.tolist() == [False] * (row_mask.numel() - length) + [True] * length
        assert (gen.prompt_ids[i][~row_mask] == tok.pad_token_id).all()
    assert gen.completion_ids.shape[1] <= 8
    assert gen.input_ids.shape == (n, gen.completion_start + gen.completion_ids.shape[1])
    for i, length in enumerate(gen.completion_lengths.tolist()):
        row = gen.completion_ids[i].tolist()
        assert gen.texts[i] == tok.decode(row[:length], skip_special_tokens=True)
        assert bool(gen.truncated[i]) == (length == 8 and tok.eos_token_id not in row)
    assert isinstance(HFGenerateBackend(model, tok), GenerationBackend)


def test_same_seed_same_completions_and_the_global_rng_is_untouched(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    backend = HFGenerateBackend(*tiny)
    torch.manual_seed(99)
    before = torch.get_rng_state()
    first = backend.generate(PROMPTS, 2, params(seed=7))
    assert torch.equal(torch.get_rng_state(), before)
    again = backend.generate(PROMPTS, 2, params(seed=7))
    other = backend.generate(PROMPTS, 2, params(seed=8))
    assert torch.equal(first.completion_ids, again.completion_ids)
    assert first.texts == again.texts
    assert not torch.equal(first.completion_ids, other.completion_ids)
    # the G completions of one prompt differ from each other (sampled, not copied)
    assert not torch.equal(first.completion_ids[0], first.completion_ids[1])
    # seed None draws from the global RNG: reproducible from its state
    torch.manual_seed(5)
    a = backend.generate(PROMPTS, 2, params(seed=None))
    torch.manual_seed(5)
    b = backend.generate(PROMPTS, 2, params(seed=None))
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_pad_equal_to_eos_masks_up_to_the_first_eos(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
        eos_prone: LlamaForCausalLM) -> None:
    tok = tiny[1]
    eos = tok.eos_token_id
    assert tok.pad_token_id == eos
    gen = HFGenerateBackend(eos_prone, tok).generate(PROMPTS, 8, params(max_new_tokens=10))
    lengths = gen.completion_lengths.tolist()
    assert 1 in lengths or 2 in lengths  # some rows stop right away
    assert any(not t for t in gen.truncated.tolist())
    for i, length in enumerate(lengths):
        row = gen.completion_ids[i].tolist()
        assert gen.completion_mask[i].tolist() == [1] * length + [0] * (len(row) - length)
        assert all(t == eos for t in row[length:])
        if gen.truncated[i]:
            assert length == 10 and eos not in row[:length]
        else:
            assert row[length - 1] == eos and eos not in row[:length - 1]
            assert gen.texts[i] == tok.decode(row[:length - 1])


def test_stop_strings_cut_and_mask(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]
                                   ) -> None:
    model, tok = tiny
    stop = ("e", "o")
    gen = HFGenerateBackend(model, tok).generate(PROMPTS, 4, params(stop=stop, max_new_tokens=16))
    stopped = 0
    for i in range(gen.completion_ids.shape[0]):
        length = int(gen.completion_lengths[i])
        row = gen.completion_ids[i].tolist()
        assert not any(s in gen.texts[i] for s in stop)
        if gen.truncated[i]:
            assert length == 16 and not any(s in tok.decode(row) for s in stop)
            continue
        stopped += 1
        kept = tok.decode(row[:length])
        assert any(s in kept for s in stop)  # the last kept token completes a stop string
        assert not any(s in tok.decode(row[:length - 1]) for s in stop)
        assert kept.startswith(gen.texts[i])
        assert all(t == tok.pad_token_id for t in row[length:])
    assert stopped >= 4


def test_stop_strings_end_generation_early(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    # every token of this vocabulary decodes to at least one character, so "" is in none, but
    # a one-character stop string common in the text ends rows early; the raw width shrinks
    model, tok = tiny
    backend = HFGenerateBackend(model, tok)
    calls: list[int] = []
    original = model.generate

    def counting_generate(*args: object, **kwargs: object) -> torch.Tensor:
        out = original(*args, **kwargs)
        calls.append(out.shape[1])
        return out

    model.generate = counting_generate  # type: ignore[method-assign]
    try:
        backend.generate(PROMPTS, 4, params(stop=("e", "o", "a", " ", "i", "t"),
                                            max_new_tokens=40))
    finally:
        del model.generate
    prompt_width = max(len(tok(p)["input_ids"]) for p in PROMPTS)
    assert calls and calls[0] - prompt_width < 40


def test_gather_is_entered_once_per_generate_call(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    events: list[str] = []

    @contextlib.contextmanager
    def gather_double() -> Iterator[None]:
        events.append("enter")
        try:
            yield
        finally:
            events.append("exit")

    backend = HFGenerateBackend(*tiny, gather=gather_double)
    backend.generate(PROMPTS, 2, params())
    assert events == ["enter", "exit"]
    backend.generate(PROMPTS, 2, params())
    assert events == ["enter", "exit"] * 2


def test_the_models_generation_config_is_set_aside_and_restored(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    plain = HFGenerateBackend(model, tok).generate(PROMPTS, 2, params())
    saved = model.generation_config
    model.generation_config = copy.deepcopy(saved)
    model.generation_config.top_k = 1
    model.generation_config.repetition_penalty = 5.0
    try:
        configured = HFGenerateBackend(model, tok).generate(PROMPTS, 2, params())
        assert model.generation_config.top_k == 1
        assert model.generation_config.repetition_penalty == 5.0
    finally:
        model.generation_config = saved
    assert torch.equal(plain.completion_ids, configured.completion_ids)
    # and those settings would have changed the samples
    out = model.generate(input_ids=plain.prompt_ids, attention_mask=plain.prompt_mask,
                         do_sample=True, top_k=1, max_new_tokens=12, pad_token_id=0)
    assert not torch.equal(out[:, plain.completion_start:], plain.completion_ids)


class EngineLike(nn.Module):
    """Wraps a model as a DeepSpeed engine does: `.module`, no `generate` of its own."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def test_a_wrapper_without_generate_is_unwrapped(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    backend = HFGenerateBackend(EngineLike(model), tok)
    assert backend.model is model
    direct = HFGenerateBackend(model, tok).generate(PROMPTS, 2, params())
    assert torch.equal(backend.generate(PROMPTS, 2, params()).completion_ids,
                       direct.completion_ids)


def test_training_mode_is_restored(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]
                                   ) -> None:
    model, tok = tiny
    model.train()
    try:
        HFGenerateBackend(model, tok).generate(PROMPTS, 1, params(max_new_tokens=2))
        assert model.training
    finally:
        model.eval()


def test_a_tokenizer_without_pad_pads_with_eos(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    no_pad = copy.deepcopy(tok)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    backend = HFGenerateBackend(model, no_pad)
    assert backend.pad_id == tok.eos_token_id
    a = backend.generate(PROMPTS, 2, params())
    b = HFGenerateBackend(model, tok).generate(PROMPTS, 2, params())
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_score_rollout_gives_masked_old_and_ref_logprobs(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
        eos_prone: LlamaForCausalLM) -> None:
    model, tok = tiny
    gen = HFGenerateBackend(eos_prone, tok).generate(PROMPTS, 4, params(temperature=0.8))
    batch = score_rollout(gen, eos_prone, model, micro_batch=3, temperature=0.8)
    assert isinstance(batch, RolloutBatch)
    mask = gen.completion_mask.bool()
    assert batch.old_logprobs.shape == batch.ref_logprobs.shape == mask.shape  # type: ignore
    assert (batch.old_logprobs[~mask] == 0).all() and (batch.old_logprobs[mask] < 0).all()
    expected = token_logprobs(eos_prone, gen.input_ids, gen.attention_mask,
                              gen.completion_start, 8, temperature=0.8)
    # the same log-probs in micro-batches of 3 and 8: the test model's ~20 reductions in
    # sequence, the widest its 300-token vocabulary (tests/numerics.py)
    torch.testing.assert_close(batch.old_logprobs, expected, rtol=0,
                               atol=forward_atol(ops=20, width=300))
    assert not torch.allclose(batch.ref_logprobs[mask], batch.old_logprobs[mask])  # type: ignore
    assert score_rollout(gen, model, None, micro_batch=8, temperature=0.8).ref_logprobs is None


class ScriptedBackend:
    """Another backend (what a vLLM backend would be): fixed completions, same interface."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts: list[str], G: int, params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> Generations:
        eos = self.tokenizer.eos_token_id
        prompt = torch.tensor([[self.tokenizer(p)["input_ids"][0]] for p in prompts])
        raw = torch.tensor([[5, 6, eos], [7, 8, 9]] * len(prompts))[: len(prompts) * G]
        ids, mask, truncated, texts = finish_completions(
            raw, frozenset({eos}), eos, params.stop, self.tokenizer.decode)
        return Generations(prompt_ids=prompt.repeat_interleave(G, 0),
                           prompt_mask=torch.ones(len(prompts) * G, 1, dtype=torch.long),
                           completion_ids=ids, completion_mask=mask, truncated=truncated,
                           texts=texts, group_index=torch.arange(len(prompts)).repeat_interleave(G))


def test_any_backend_feeds_the_same_scoring(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    model, tok = tiny
    backend: GenerationBackend = ScriptedBackend(tok)
    assert isinstance(backend, GenerationBackend)
    gen = backend.generate(PROMPTS, 2, params())
    batch = score_rollout(gen, model, None, micro_batch=2, temperature=1.0)
    assert gen.completion_mask.tolist() == [[1, 1, 1], [1, 1, 1]] * 2
    assert gen.truncated.tolist() == [False, True] * 2
    assert (batch.old_logprobs < 0).all()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"temperature": 0.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"stop": "\n"}, "stop"),
    ({"stop": ("",)}, "stop"),
])
def test_bad_sampling_params(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        params(**kwargs)


def test_bad_generate_input(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    backend = HFGenerateBackend(*tiny)
    with pytest.raises(ValueError, match="prompts"):
        backend.generate([], 2, params())
    with pytest.raises(ValueError, match="G"):
        backend.generate(PROMPTS, 0, params())
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        backend.generate(["a", ""], 2, params())
    with pytest.raises(ValueError, match="max_position_embeddings 256"):
        backend.generate(PROMPTS, 1, params(max_new_tokens=250))
    with pytest.raises(ValueError, match="old_logprobs shape"):
        gen = backend.generate(PROMPTS, 1, params(max_new_tokens=2))
        gen.with_logprobs(torch.zeros(2, 5))


def test_the_g_completions_of_a_prompt_share_one_prefill(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompts are prefilled once each (not G times), their cache repeated for the G rows;
    the next-token logits from that cache equal a full forward pass of every row (left padding
    included), and seeded sampling stays reproducible."""
    from hargo_hpc.train.model.logprobs import position_ids_from_mask

    model, tok = tiny
    backend = HFGenerateBackend(model, tok)
    seen: list[tuple[int, ...]] = []
    real_forward = model.forward

    def counting(*args: object, **kwargs: object) -> object:
        ids = kwargs.get("input_ids")
        if isinstance(ids, torch.Tensor):
            seen.append(tuple(ids.shape))
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    G = 3
    gen = backend.generate(PROMPTS, G, params(do_sample=False))
    width = gen.prompt_ids.shape[1]
    assert seen[0] == (len(PROMPTS), width - 1)  # one prefill row per prompt
    assert all(shape == (G * len(PROMPTS), 1) for shape in seen[1:])
    monkeypatch.undo()

    ids, mask = gen.prompt_ids, gen.prompt_mask
    prefilled = backend._shared_prefill(ids, mask, G)
    assert len(prefilled) == 1  # under the name this transformers' forward takes it
    positions = position_ids_from_mask(mask)
    with torch.no_grad():
        step = model(input_ids=ids[:, -1:], attention_mask=mask, **prefilled,
                     position_ids=positions[:, -1:], use_cache=True).logits[:, -1]
        full = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
    # one cached step against the full pass: the attention's sums over the prompt are taken in
    # another order (tests/numerics.py, as for the log-probs)
    torch.testing.assert_close(step, full, rtol=0, atol=forward_atol(ops=20, width=300))
    first = backend.generate(PROMPTS, G, params(seed=3))
    assert torch.equal(first.completion_ids,
                       backend.generate(PROMPTS, G, params(seed=3)).completion_ids)


# ---------------------------------------------------------------- per-prompt budgets


def test_per_prompt_params_equal_each_prompt_sampled_alone(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    """Prompts with their own budgets (a yes/no task's few tokens, a kernel's hundreds) come
    back in prompt order, each row what its prompt sampled on its own gives (greedy: no RNG
    shared between the parts), each within its own budget, under one gather."""
    model, tok = tiny
    events: list[str] = []

    @contextlib.contextmanager
    def gather_double() -> Iterator[None]:
        events.append("enter")
        yield

    backend = HFGenerateBackend(model, tok, gather=gather_double)
    short, long = params(max_new_tokens=2, do_sample=False), params(max_new_tokens=9,
                                                                   do_sample=False)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0]]
    mixed = backend.generate(prompts, 2, [short, long, long])
    assert events == ["enter"]
    assert mixed.group_index.tolist() == [0, 0, 1, 1, 2, 2]
    for i, (prompt, p) in enumerate(zip(prompts, [short, long, long], strict=True)):
        alone = HFGenerateBackend(model, tok).generate([prompt], 2, p)
        for g in range(2):
            row = i * 2 + g
            length = int(mixed.completion_mask[row].sum())
            assert length == int(alone.completion_lengths[g]) <= p.max_new_tokens
            assert mixed.completion_ids[row, :length].tolist() == \
                alone.completion_ids[g, :length].tolist()
            assert (mixed.completion_ids[row, length:] == tok.pad_token_id).all()
            assert mixed.texts[row] == alone.texts[g]
            assert bool(mixed.truncated[row]) == bool(alone.truncated[g])
            kept = mixed.prompt_mask[row].bool()
            assert tok.decode(mixed.prompt_ids[row][kept]) == prompt


def test_per_prompt_params_must_match_the_prompts(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    backend = HFGenerateBackend(*tiny)
    with pytest.raises(ValueError, match="1 SamplingParams for 2 prompts"):
        backend.generate(PROMPTS[:2], 2, [params()])


# ---------------------------------------------------------------- a stream per row


def prompt_blind(tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> LlamaForCausalLM:
    """A model whose next-token distribution ignores the prompt: zero embeddings make every
    hidden state 0, so its logits are the same (uniform) whatever it reads."""
    model = copy.deepcopy(tiny[0])
    with torch.no_grad():
        model.get_input_embeddings().weight.zero_()
    return model


def test_with_seeds_two_prompts_sample_k_differ_for_a_model_that_ignores_the_prompt(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    """The bug this guards against: an evaluation that seeded every call alike gave sample k
    of every example the same random stream, so a model writing the same thing whatever the
    prompt produced copies. With a seed per prompt, each row draws its own stream: the same
    prompt-blind model gives different completions to the two prompts' sample k, and the same
    ones again under the same seeds (reproducible); one seed per call (the old way) gives
    copies, which is what the per-row seeds exist to avoid."""
    model, tok = prompt_blind(tiny), tiny[1]
    backend = HFGenerateBackend(model, tok)
    p = params(seed=None, max_new_tokens=12)
    seeded = backend.generate(PROMPTS, 3, p, seeds=[11, 12])
    for k in range(3):
        assert seeded.texts[k] != seeded.texts[3 + k], k
    assert len(set(seeded.texts)) == 6
    assert backend.generate(PROMPTS, 3, p, seeds=[11, 12]).texts == seeded.texts
    one_stream = [backend.generate([prompt], 3, params(seed=5)).texts for prompt in PROMPTS]
    assert one_stream[0] == one_stream[1]  # copies: the same stream for each call


def test_a_rows_completion_depends_on_its_seed_not_its_neighbours(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    """Prompt 1 with seed 12 gives the same completions alone as beside prompt 0, before or
    after it (its rows' streams do not depend on the batch), and another seed gives others."""
    model, tok = tiny
    backend = HFGenerateBackend(model, tok)
    p = params(seed=None, max_new_tokens=10)
    alone = backend.generate([PROMPTS[1]], 2, p, seeds=[12]).texts
    assert backend.generate(PROMPTS, 2, p, seeds=[11, 12]).texts[2:] == alone
    assert backend.generate(PROMPTS[::-1], 2, p, seeds=[12, 11]).texts[:2] == alone
    assert backend.generate([PROMPTS[1]], 2, p, seeds=[13]).texts != alone


def test_the_row_sampler_draws_from_the_tempered_nucleus() -> None:
    """RowSampler on fixed logits: the empirical frequencies of 4000 rows' argmax match
    softmax(z / τ) within 4 standard errors, and tokens outside the top-p nucleus never win."""
    from hargo_hpc.train.rollout.generate import RowSampler

    z = torch.tensor([2.0, 1.0, 0.5, -3.0, -4.0])
    tau, rows = 0.7, 4000
    sampler = RowSampler(range(rows), tau, 1.0, torch.device("cpu"))
    picked = sampler(torch.zeros(rows, 1), z.repeat(rows, 1)).argmax(dim=-1)
    counts = torch.bincount(picked, minlength=5).double() / rows
    expected = (z / tau).softmax(-1).double()
    se = (expected * (1 - expected) / rows).sqrt()
    assert ((counts - expected).abs() <= 4 * se + 1e-9).all(), (counts, expected)
    # top-p 0.8: softmax(z/0.7) = [0.74, 0.18, 0.09, ...]: the nucleus is tokens 0 and 1
    nucleus = RowSampler(range(rows), tau, 0.8, torch.device("cpu"))
    picked = nucleus(torch.zeros(rows, 1), z.repeat(rows, 1)).argmax(dim=-1)
    assert set(picked.tolist()) == {0, 1}


def test_seeds_must_match_the_prompts(
        tiny: tuple[LlamaForCausalLM, PreTrainedTokenizerFast]) -> None:
    with pytest.raises(ValueError, match="1 seeds for 2 prompts"):
        HFGenerateBackend(*tiny).generate(PROMPTS, 2, params(), seeds=[1])


def test_derived_seeds_are_stable_and_unrelated() -> None:
    from hargo_hpc.train.rollout.generate import derive_seed

    assert derive_seed(0, "gemm", "gemm:a") == derive_seed(0, "gemm", "gemm:a")
    assert derive_seed(0, "gemm:a") != derive_seed(0, "gemm:b") != derive_seed(1, "gemm:a")
    assert 0 <= derive_seed(7, 3) < 2 ** 63
    # a fixed value: the same on every machine and Python (BLAKE2b, not `hash`)
    assert derive_seed(0, 1) == int.from_bytes(
        __import__("hashlib").blake2b(b"0\x001", digest_size=8).digest(), "big") >> 1


def test_the_stop_check_decodes_only_live_rows_and_only_their_window() -> None:
    from hargo_hpc.train.rollout.generate import _StopStrings

    decoded: list[list[int]] = []

    def decode(tokens: list[int]) -> str:  # token t is the character chr(ord("a") + t)
        decoded.append(list(tokens))
        return "".join(chr(ord("a") + t) for t in tokens)

    check = _StopStrings(("cd",), prompt_length=2, eos_ids=frozenset({25}), decode=decode)
    assert check.window == 4
    rows = [[0, 0, 1, 1, 1, 1, 1, 2], [0, 0, 1, 1, 1, 1, 1, 25], [0, 0, 1, 1, 1, 1, 2, 3]]
    done = check(torch.tensor(rows), None)
    assert done.tolist() == [False, True, True]  # running; ended by EOS; "cd" in its window
    assert decoded == [[1, 1, 1, 2], [1, 1, 2, 3]]  # the window only; the EOS row not decoded
    decoded.clear()
    grown = torch.tensor([[*row, 4] for row in rows])
    assert check(grown, None).tolist() == [False, True, True]
    assert decoded == [[1, 1, 2, 4]]  # the ended rows are never decoded again
