"""SFT: the row layout, the sampler's epochs and resume, micro-batches that add up, `hargo sft` on
the GEMM corpus (loss down, the signature learnt under teacher forcing), and the warm start of
`hargo train` (sft.steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from numerics import ADAM_EPS, adam_weight_tolerance, grad_rtol

from hargo_hpc.cli import main
from hargo_hpc.config import validate_config
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.corpus import load_corpus
from hargo_hpc.tasks.gemm import Gemm
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.engine import build_engine
from hargo_hpc.train.model.models import load_policy
from hargo_hpc.train.sft import (
    SftItem,
    SftSampler,
    build_sft_batch,
    fitting,
    sft_batch,
    sft_items,
    sft_update,
    split,
)

torch.set_num_threads(1)


def test_rows_are_laid_out_like_a_rollout() -> None:
    _, tok = load_policy("tiny")
    prompts, targets = ["What is a data race?", "Why?"], ["Two threads.", "No."]
    batch = sft_batch(tok, prompts, targets, max_target_tokens=64, device=torch.device("cpu"))
    p = [tok(x, add_special_tokens=False)["input_ids"] for x in prompts]
    t = [tok(x, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for x in targets]
    width_p, width_t = max(map(len, p)), max(map(len, t))
    assert batch.completion_start == width_p
    assert batch.input_ids.shape == (2, width_p + width_t)
    for i in range(2):
        row, mask = batch.input_ids[i].tolist(), batch.attention_mask[i].tolist()
        assert row[width_p - len(p[i]):width_p] == p[i]  # left-padded prompt
        assert row[width_p:width_p + len(t[i])] == t[i]  # target, then EOS
        assert mask == ([0] * (width_p - len(p[i])) + [1] * len(p[i]) + [1] * len(t[i])
                        + [0] * (width_t - len(t[i])))
    cut = sft_batch(tok, prompts[:1], ["word " * 50], max_target_tokens=5,
                    device=torch.device("cpu"))
    assert int(cut.target_mask.sum()) == 5  # cut to 5 tokens: no room for the EOS
    assert tok.eos_token_id not in cut.input_ids[0, cut.completion_start:].tolist()


def test_each_target_is_cut_at_its_own_tasks_budget() -> None:
    """`build_sft_batch` cuts a target at its task's budget; a target within its budget keeps
    its EOS; a task without a budget is refused."""
    _, tok = load_policy("tiny")
    answer = "word " * 30
    n = len(tok(answer, add_special_tokens=False)["input_ids"])
    assert n > 12
    items = [SftItem("short", "Q?", answer), SftItem("long", "Q?", answer),
             SftItem("other", "Q?", answer)]
    budgets = {"short": 4, "long": n + 1, "other": 12}
    batch = build_sft_batch(items, tok, "alpaca", max_target_tokens=budgets,
                            device=torch.device("cpu"))
    assert batch.target_mask.sum(dim=1).tolist() == [4, n + 1, 12]
    targets = batch.input_ids[:, batch.completion_start:]
    assert [tok.eos_token_id in row.tolist() for row in targets] == [False, True, False]
    with pytest.raises(ValueError, match=r"no token budget for task\(s\) other"):
        build_sft_batch(items, tok, "alpaca", max_target_tokens={"short": 4, "long": 5},
                        device=torch.device("cpu"))
    with pytest.raises(ValueError, match="2 target limits for 1 targets"):
        sft_batch(tok, ["Q?"], [answer], max_target_tokens=[3, 4], device=torch.device("cpu"))


def test_sft_targets_are_cut_at_the_generation_budget_of_their_task() -> None:
    """`token_budgets`: a yes/no task's own 8 tokens, MLPerf's 48, a spec's max_new_tokens over
    the task's default, and a task with no default (GEMM) the rollout's limit."""
    from hargo_hpc.config import token_budgets

    config = validate_config({
        "data": {"tasks": [{"name": "data_race_c"}, {"name": "mlperf_qa"},
                           {"name": "plp_qa", "max_new_tokens": 20}, {"name": "gemm"}]},
        "rollout": {"max_new_tokens": 200}})
    assert token_budgets(config) == {"data_race_c": 8, "mlperf_qa": 48, "plp_qa": 20,
                                      "gemm": 200}


def test_sampler_epochs_and_resume() -> None:
    items = [SftItem("t", f"q{i}", f"a{i}") for i in range(5)]
    sampler = SftSampler(items, seed=3)
    drawn = sampler.batch(7)
    state = sampler.state_dict()
    rest = sampler.batch(8)
    sequence = drawn + rest
    assert {x.user_text for x in sequence[:5]} == {x.user_text for x in sequence[5:10]} == {
        f"q{i}" for i in range(5)}
    assert [x.user_text for x in sequence[:5]] != [x.user_text for x in sequence[5:10]]
    again = SftSampler(items, seed=3)
    again.load_state_dict(state)
    assert again.batch(8) == rest
    with pytest.raises(ValueError, match="does not match"):
        SftSampler(items[:4], seed=3).load_state_dict(state)


def test_split_is_consecutive_and_even() -> None:
    assert split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split([1, 2], 4) == [[1], [2], [], []]


def test_gemm_rows_come_from_the_corpus() -> None:
    problems = Gemm.load_problems()
    items = sft_items(Gemm(), problems)
    kernels = load_corpus()
    assert len(items) == len(problems) * len(kernels)
    assert items[0].target == kernels[0].completion and "void gemm(" in items[0].target


def test_the_warm_start_keeps_the_corpus_answers_that_fit_the_budget() -> None:
    """A corpus answer cut at the generation budget is a program without its end: `fitting`
    keeps the rows whose answer and EOS fit."""
    _, tok = load_policy("tiny")
    task = Gemm()
    items = sft_items(task, task.load_problems()[:1])
    lengths = [len(tok(item.target, add_special_tokens=False)["input_ids"]) for item in items]
    budget = sorted(lengths)[len(lengths) // 2]  # the median answer's tokens
    kept = fitting(items, tok, budget)
    assert kept == [item for item, n in zip(items, lengths, strict=True) if n + 1 <= budget]
    assert 0 < len(kept) < len(items)
    shortest = min(lengths)
    assert fitting(items, tok, shortest) == []  # the shortest answer fits, but not its EOS
    assert fitting(items, tok, shortest + 1) == [
        item for item, n in zip(items, lengths, strict=True) if n == shortest]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_add_up_to_one_step(agg: str) -> None:
    """sft_update over 4 rows as 1 micro-batch or as 4: the same loss, gradient norm and
    weights, up to the rounding of sums taken in another order (tests/numerics.py: the longest
    reduction is the batch's target tokens times the vocabulary)."""
    items = [SftItem("t", f"Question {i}?", "answer " * (i + 1)) for i in range(4)]
    results = []
    for accum in (1, 4):
        model, tok = load_policy("tiny")
        engine = build_engine(model, zero_stage=0, lr=1e-3, micro_batch_size=4 // accum,
                              grad_accum=accum, eps=ADAM_EPS)
        batch = build_sft_batch(items, tok, "alpaca", max_target_tokens=16,
                                device=engine.device)
        stats = sft_update(engine, batch, accum=accum, agg=agg)
        assert engine.optimizer_steps == 1
        stats["grad_norm"] = engine.grad_norm
        results.append((stats, {k: v.detach().clone()
                                for k, v in engine.module.state_dict().items()}))
    (a, wa), (b, wb) = results
    expected = sum(len(tok(x.target, add_special_tokens=False)["input_ids"]) + 1 for x in items)
    assert b["tokens"] == a["tokens"] == float(expected)  # each target and its EOS
    reduction = int(expected) * len(tok)
    assert b["loss"] == pytest.approx(a["loss"], rel=grad_rtol(reduction))
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=grad_rtol(reduction))
    tol = adam_weight_tolerance([a["grad_norm"]], [1e-3], reduction)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < tol


GEMM_SFT = """
[run]
name = "gemm-sft"
dir = "{dir}"
[model]
path = "tiny"
[[data.tasks]]
name = "gemm"
[data]
eval_fraction = 0.0
[rollout]
num_generations = 1
prompts_per_step = 2
max_new_tokens = 96
[training]
lr = 1e-6
micro_batch_size = 2
zero_stage = 0
[sft]
steps = 300
lr = 3e-3
check_examples = 0
"""


def signature_accuracy(model: torch.nn.Module, tok, items: list[SftItem]) -> float:
    """Teacher-forced token accuracy on the `void gemm(...)` signature of each item's target:
    with the prompt and the target before the signature given, the share of the signature's
    tokens that are the model's argmax next token."""
    hits = total = 0
    for item in items:
        prompt = tok(build_prompt(item.user_text, "auto", tok), add_special_tokens=False)
        start = item.target.index("void gemm(")
        end = item.target.index(")", start) + 1
        before = len(tok(item.target[:start], add_special_tokens=False)["input_ids"])
        upto = tok(item.target[:end], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt["input_ids"] + upto])
        first = len(prompt["input_ids"]) + before  # the signature's first token
        with torch.no_grad():
            predicted = model(input_ids=ids).logits[0, first - 1 : -1].argmax(-1)
        hits += int((predicted == ids[0, first:]).sum())
        total += ids.shape[1] - first
    return hits / total


def test_hargo_sft_on_the_gemm_corpus_teaches_the_signature(tmp_path: Path) -> None:
    """300 steps of 2 kernels (cut to 96 tokens) at lr 3e-3, the middle of the range that
    learns (measured, every ATEN_CPU_CAPABILITY alike: lr 1e-3, 3e-3, 1e-2 give loss 6.9 ->
    1.39, 0.85, 1.57 and signature accuracy 0.77, 0.84, 0.68; untrained 0.0). What SFT teaches
    is measured teacher-forced on the signature of every 10th corpus target, not by a greedy
    sample whose path one rounding can tip."""
    job = tmp_path / "gemm_sft.toml"
    job.write_text(GEMM_SFT.format(dir=tmp_path))
    done = CliRunner().invoke(main, ["sft", str(job)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("sft step 1/300  loss ")
    # 96 tokens hold no whole kernel (the shortest has 187): all are kept, cut, and said so
    assert ("warning: gemm: no answer of its SFT corpus fits its 96-token generation budget; "
            "SFT on them cut short") in done.stderr
    out = tmp_path / "gemm-sft" / "sft"
    assert lines[-2:] == [f"metrics: {out / 'metrics.jsonl'}", f"export: {out / 'export'}"]
    records = m.read_records(out / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 301))
    assert set(m.SFT_KEYS) <= records[0].keys()
    first, last = records[0]["loss"], sum(r["loss"] for r in records[-20:]) / 20
    assert first > 6 and last < 0.4 * first
    assert max(r["loss"] for r in records[20:]) < first  # no divergence after the start
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(out / "export").eval()
    tok = PreTrainedTokenizerFast.from_pretrained(out / "export")
    task = Gemm()
    items = sft_items(task, task.load_problems())[::10]
    untrained, _ = load_policy("tiny")
    assert signature_accuracy(untrained.eval(), tok, items) < 0.1
    assert signature_accuracy(model, tok, items) > 0.5
    again = CliRunner().invoke(main, ["sft", str(job)])
    assert again.exit_code == 2 and again.stderr.startswith(f"error: {out} holds an SFT run")


def test_warm_start_before_rl(tmp_path: Path) -> None:
    cfg = validate_config({
        "run": {"name": "warm", "dir": str(tmp_path)},
        "model": {"path": "tiny"},
        "data": {"tasks": [{"name": "mlperf_qa", "max_items": 8}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 8},
        "training": {"lr": 1e-3, "steps": 1, "micro_batch_size": 2, "warmup_steps": 2},
        "sft": {"steps": 3, "lr": 4e-3},
    })
    result = loop.train(cfg, log=lambda _: None, progress=False)
    sft = m.read_records(result.run_dir / "sft" / "metrics.jsonl")
    assert [r["step"] for r in sft] == [1, 2, 3]
    assert all(r["sequences"] == 4 for r in sft)  # accum 2 x micro 2: one RL step's rows
    # the SFT steps at sft.lr, then RL's warmup over its own optimizer steps:
    # lr = 1e-3 (s' + 1) / 3 for s' = 0
    assert [r["learning_rate"] for r in sft] == pytest.approx([4e-3] * 3)
    [rl] = m.read_records(result.metrics)
    assert rl["optimizer_steps"] == 4 and rl["learning_rate"] == pytest.approx(1e-3 / 3)
    assert json.loads(RunLayout(result.run_dir).finished.read_text())["step"] == 1


def test_a_stopped_sft_resumes_to_the_end_of_an_uninterrupted_one(tmp_path: Path) -> None:
    """`hargo sft` stopped by SIGUSR1 after step 2 of 4 writes a checkpoint, no export and no
    finished.json; resumed, it logs the same records and exports the same weights as a run
    that was never stopped; resumed again, it ends at once."""
    import os
    import signal

    from safetensors.torch import load_file

    def cfg(name: str):
        return validate_config({
            "run": {"name": name, "dir": str(tmp_path)},
            "model": {"path": "tiny"},
            "data": {"tasks": [{"name": "mlperf_qa", "max_items": 8}], "eval_fraction": 0.0},
            "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 8},
            "training": {"micro_batch_size": 2},
            "sft": {"steps": 4, "lr": 4e-3, "check_examples": 0},
        })

    def quiet(_: str) -> None:
        pass

    whole = loop.sft_run(cfg("whole"), log=quiet)

    def stop_after_two(record: dict) -> None:
        if record["step"] == 2:
            os.kill(os.getpid(), signal.SIGUSR1)

    stopped = loop.sft_run(cfg("cut"), log=quiet, on_step=stop_after_two)
    layout = RunLayout(tmp_path / "cut").sft
    assert stopped.interrupted and stopped.step == 2 and stopped.export is None
    assert stopped.checkpoint is not None and stopped.checkpoint.parent == layout.checkpoints
    assert not layout.finished.exists() and not layout.export.exists()
    refused = CliRunner().invoke(main, ["sft", str(tmp_path / "cut" / "sft" / "config.toml")])
    assert refused.exit_code == 2 and "--resume" in refused.stderr
    # a checkpoint without its metrics (the directory removed as the run wrote its checkpoint
    # on the way out) is taken as well: nothing resumes without --resume
    aside = layout.metrics.rename(layout.metrics.with_suffix(".aside"))
    with pytest.raises(loop.TrainError, match="holds an SFT run already"):
        loop.sft_run(cfg("cut"), log=quiet)
    aside.rename(layout.metrics)
    resumed = loop.sft_run(cfg("cut"), resume=True, log=quiet)
    assert not resumed.interrupted and resumed.step == 4
    keys = ("step", "loss", "nll", "tokens", "sequences", "grad_norm", "learning_rate")
    assert [{k: r[k] for k in keys} for r in m.read_records(resumed.metrics)] == \
        [{k: r[k] for k in keys} for r in m.read_records(whole.metrics)]
    a, b = (load_file(r.export / "model.safetensors") for r in (whole, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert loop.sft_run(cfg("cut"), resume=True, log=quiet).already_finished


def test_hargo_sft_needs_steps(tmp_path: Path) -> None:
    job = tmp_path / "j.toml"
    job.write_text(GEMM_SFT.format(dir=tmp_path).replace("steps = 300", "steps = 0"))
    done = CliRunner().invoke(main, ["sft", str(job)])
    assert done.exit_code == 2
    assert done.stderr == "error: sft.steps is 0: set it to the number of SFT steps\n"
    assert not (tmp_path / "gemm-sft").exists()


def test_the_sft_presets_target_of_a_gemm_prompt_is_one_of_its_corpus_kernels() -> None:
    """A prompt with a reference answer trains on it; a GEMM problem (no reference) on the
    corpus kernel crc32(id) picks, the same every time; a task with neither is refused."""
    import zlib

    from hargo_hpc.tasks.base import Example
    from hargo_hpc.train.sft import SftItem, preset_item

    qa = Example(task="plp_qa", id="plp_qa:3", instruction="q", input="", output="an answer")
    assert preset_item(qa, "the prompt") == SftItem("plp_qa", "the prompt", "an answer")
    problem = Gemm.load_problems()[0]
    item = preset_item(problem, "ignored")
    corpus = load_corpus()
    assert item.task == "gemm" and item.user_text == Gemm().user_text(problem)
    assert item.target == corpus[zlib.crc32(problem.id.encode()) % len(corpus)].completion
    assert preset_item(problem, "ignored") == item
    _, tok = load_policy("tiny")
    lengths = [len(tok(k.completion, add_special_tokens=False)["input_ids"]) for k in corpus]
    budget = sorted(lengths)[len(lengths) // 2]
    fit = [k.completion for k, n in zip(corpus, lengths, strict=True) if n + 1 <= budget]
    assert 0 < len(fit) < len(corpus)
    picked = preset_item(problem, "ignored", tokenizer=tok, max_tokens=budget)
    assert picked.target == fit[zlib.crc32(problem.id.encode()) % len(fit)]  # the fitting ones
    assert preset_item(problem, "ignored", tokenizer=tok, max_tokens=min(lengths)) == item
    with pytest.raises(ValueError, match="no reference answer, and task mlperf_qa has no SFT"):
        preset_item(Example(task="mlperf_qa", id="m:1", instruction="q", input="", output=""),
                    "p")


FORM_JOB = """
[run]
name = "form"
dir = "{dir}"
[model]
path = "tiny"
[[data.tasks]]
name = "data_race_c"
eval_fraction = 0.2
[[data.tasks]]
name = "gemm"
eval_fraction = 0.02
[rollout]
num_generations = 1
prompts_per_step = 2
max_new_tokens = 48
[training]
micro_batch_size = 2
zero_stage = 0
[sft]
steps = 2
lr = 1e-3
check_examples = 3
"""


def test_hargo_sft_ends_with_the_form_check(tmp_path: Path) -> None:
    """After the SFT steps, 3 held-out examples of each task are answered by the SFT model and
    by the tiny model it started from (GEMM kernels through the real bench, in process) and
    each task's form metrics are printed start -> end with n; the evaluation is kept in
    <run>/sft/eval/."""
    job = tmp_path / "form.toml"
    job.write_text(FORM_JOB.format(dir=tmp_path))
    done = CliRunner().invoke(main, ["sft", str(job)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    form = [line for line in lines if line.startswith("form  ")]
    assert [line.split()[1:3] for line in form] == [
        ["data_race_c", "support_rate"], ["gemm", "compiled_share"], ["gemm", "ok_share"]]
    assert all(" -> " in line for line in form)
    assert "(n=3, distinct " in form[0]  # data race: 3 held-out examples, each its own draw
    assert f"(n=1 × {Gemm.eval_samples}, distinct " in form[1]  # gemm: 1 problem of 48, its samples
    evaluated = json.loads((tmp_path / "form" / "sft" / "eval" / "metrics.json").read_text())
    assert evaluated["baseline"] == "tiny"
    gemm = evaluated["tasks"]["gemm"]
    assert gemm["n"] == 1 and gemm["rows"] == Gemm.eval_samples
    assert 0.0 <= gemm["compiled_share"] <= 1.0 and "compiled_share" in gemm["vs_baseline"]


def test_a_warm_start_taught_the_stage_prompts_is_checked_under_each(tmp_path: Path) -> None:
    """Issue V.3: with sft.stage_prompts the GEMM corpus is trained under SQD's stage prompts
    too (`hargo sft` says how many rows), and the form check asks GEMM again under each stage
    other than the open one: compiled, ok, forbidden-technique and on-stage shares, start ->
    end, each into <run>/sft/eval-<stage>/."""
    job = tmp_path / "form.toml"
    job.write_text(FORM_JOB.format(dir=tmp_path) + "stage_prompts = true\n")
    done = CliRunner().invoke(main, ["sft", str(job)])
    assert done.exit_code == 0, done.output
    assert "SFT rows under an SQD stage prompt (sft.stage_prompts)" in done.output
    lines = done.stdout.splitlines()
    for stage, technique in (("no_simd", "simd"), ("no_blocking", "blocking")):
        staged = [line for line in lines if line.startswith(f"form@{stage}  gemm  ")]
        assert [line.split()[2] for line in staged] == [
            "compiled_share", "ok_share", "forbidden_share", "on_stage_share"], lines
        found = json.loads((tmp_path / "form" / "sft" / f"eval-{stage}" / "metrics.json")
                           .read_text())  # fmt: skip
        assert found["stage"] == stage and list(found["tasks"]) == ["gemm"]
        assert found["decoding"]["gemm"]["stage"]["forbid"] == [technique]
    assert not any(line.startswith("form@open") for line in lines)  # the plain check is it
