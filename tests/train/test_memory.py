"""The memory plan: the parameter count against the model transformers builds, each component
against its formula by hand, the shipped large-model jobs fitting an 80 GB GPU with the
settings they carry (and not without), one line refusing a job that cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from transformers import AutoConfig, AutoModelForCausalLM

from hargo_hpc.cli import main
from hargo_hpc.config import ConfigError, load_config
from hargo_hpc.slurm.submission import check_memory
from hargo_hpc.train.memory import (
    GIB,
    MemoryPlanError,
    architecture_from,
    architecture_of,
    fit_refusal,
    host_plan,
    host_refusal,
    memory_plan,
)

JOBS = Path(__file__).resolve().parents[2] / "hargo_hpc" / "examples" / "jobs"
# The published shapes of the models the shipped jobs are written for (their config.json)
QWEN_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
           "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "vocab_size": 152064, "tie_word_embeddings": False}
QWEN_14B = {"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
            "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
            "vocab_size": 152064, "tie_word_embeddings": False}


def model_dir(tmp_path: Path, shape: dict, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(shape))
    return directory


def built_params(shape: dict) -> int:
    """The parameter count of the model transformers builds from `shape` (on the meta device:
    no memory)."""
    config = AutoConfig.for_model(**shape)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def test_the_parameter_count_is_the_built_models() -> None:
    smollm2 = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
               "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
               "vocab_size": 49152, "tie_word_embeddings": True}
    assert architecture_from(smollm2).params == built_params(smollm2)  # Llama: exact
    assert architecture_of("smollm2").params == built_params(smollm2)
    for shape in (QWEN_7B, QWEN_14B):  # Qwen2's q, k, v biases are left out: < 0.1 %
        built = built_params(shape)
        assert abs(architecture_from(shape).params - built) / built < 1e-3


def test_each_component_is_its_formula(tmp_path: Path) -> None:
    config = load_config(JOBS / "tiny.toml", [
        "training.zero_stage=2", "training.micro_batch_size=2", "rollout.prompts_per_step=4",
        "rollout.num_generations=2", "rollout.max_new_tokens=16",
        'data.tasks=[{name="plp_qa"}]', "model.max_prompt_tokens=48"])
    arch = architecture_of("tiny")
    n, b, h, L, V = arch.params, 4, 64, 2, 1000
    k, d, i = 2, 16, 128
    plan = {c.name: c.bytes for c in memory_plan(config, arch, needs_reference=True).components}
    tokens = 48 + 16
    assert plan["weights"] == n * b
    assert plan["optimizer"] == 8 * n  # fp32: no separate master copy
    assert plan["gradients"] == n * b / 1
    assert plan["reference"] == n * b
    assert plan["gathered weights"] == 0
    assert plan["KV cache"] == 2 * L * k * d * tokens * 8 * b
    assert plan["activations"] == 2 * tokens * L * b * (6 * h + 2 * k * d + 4 * i)
    assert plan["logits"] == 2 * 2 * 16 * V * b + 8 * 16 * V
    no_ref = memory_plan(config, arch, needs_reference=False)
    assert {c.name: c.bytes for c in no_ref.components}["reference"] == 0


@pytest.mark.parametrize(("job", "shape"), [("hpcgpt_mix", QWEN_7B), ("gemm_sqd", QWEN_14B)])
def test_the_shipped_large_jobs_fit_80_gb_with_their_settings(
        tmp_path: Path, job: str, shape: dict) -> None:
    path = model_dir(tmp_path, shape, job)
    fits = load_config(JOBS / f"{job}.toml", [f"model.path={path}",
                                             "slurm.train.gpu_memory_gib=79"])
    assert fits.model.gradient_checkpointing and fits.model.reference_device == "sharded"
    assert fits.training.precision == "bf16" and fits.training.zero_stage == 3
    check_memory(fits, job)  # no refusal
    without = load_config(JOBS / f"{job}.toml", [
        f"model.path={path}", "slurm.train.gpu_memory_gib=79",
        "model.gradient_checkpointing=false", "model.reference_device=policy"])
    with pytest.raises(ConfigError, match=r"over slurm\.train\.gpu_memory_gib = 79") as refused:
        check_memory(without, job)
    assert "\n" not in str(refused.value)


def test_a_job_that_cannot_fit_is_refused_in_one_line_naming_what_would_help(
        tmp_path: Path) -> None:
    path = model_dir(tmp_path, QWEN_14B, "q14")
    config = load_config(JOBS / "gemm_sqd.toml", [
        f"model.path={path}", "model.gradient_checkpointing=false"])
    plan = memory_plan(config, architecture_of(str(path)), needs_reference=True)
    assert plan.biggest.name == "activations" and plan.peak_phase == "update"
    said = fit_refusal(plan, 79)
    assert said is not None and "\n" not in said
    assert "the biggest part is activations" in said
    assert "model.gradient_checkpointing = true" in said
    assert fit_refusal(plan, plan.peak / GIB + 1) is None and fit_refusal(plan, None) is None

    runner = CliRunner()
    done = runner.invoke(main, ["config", "check", str(JOBS / "gemm_sqd.toml"),
                                f"model.path={path}", "model.gradient_checkpointing=false",
                                "slurm.train.gpu_memory_gib=79"])
    assert done.exit_code == 1
    assert "activations       update" in done.output and "peak:" in done.output
    assert "error:" in done.output and "over slurm.train.gpu_memory_gib = 79" in done.output


def test_host_memory_a_node_is_its_formula_and_refused_over_slurm_mem(tmp_path: Path) -> None:
    """Each rank of a node loads the whole policy and reference, except under ZeRO-3 over
    several ranks, where they load partitioned (once a node); a reference kept on the host
    and an offloaded optimizer stay."""
    path = model_dir(tmp_path, QWEN_7B, "q7")
    n = architecture_from(QWEN_7B).params
    base = [f"model.path={path}", "slurm.train.nodes=2", "slurm.train.ntasks_per_node=8",
            "slurm.train.mem=512G"]

    def host(*overrides: str) -> dict[str, float]:
        config = load_config(JOBS / "hpcgpt_mix.toml", [*base, *overrides])
        return {c.name: c.bytes for c in host_plan(config, architecture_from(QWEN_7B), True)}

    sharded = host()  # the shipped settings: ZeRO-3, bf16, a sharded reference
    assert sharded == {"policy at load": 2 * n, "reference at load": 2 * n,
                       "reference on host": 0, "offloaded optimizer": 0, "vLLM weights": 0}
    on_policy = host("model.reference_device=policy")
    assert on_policy["policy at load"] == 2 * n and on_policy["reference at load"] == 8 * 2 * n
    zero2 = host("training.zero_stage=2", "model.reference_device=cpu",
                 "training.offload_optimizer=true")
    assert zero2 == {"policy at load": 8 * 2 * n, "reference at load": 0,
                     "reference on host": 8 * 2 * n, "offloaded optimizer": 8 * 12 * n / 16,
                     "vLLM weights": 0}
    assert host('rollout.backend="vllm"')["vLLM weights"] == 8 * 2 * n  # its weights, bf16
    config = load_config(JOBS / "hpcgpt_mix.toml", [
        *base, "training.zero_stage=2", "model.reference_device=cpu", "slurm.train.mem=200G"])
    said = host_refusal(host_plan(config, architecture_from(QWEN_7B), True), "200G")
    assert said is not None and "\n" not in said
    assert "over slurm.train.mem = 200G" in said and "biggest part is policy at load" in said
    with pytest.raises(ConfigError, match=r"of host memory a node, over slurm\.train\.mem"):
        check_memory(config, "job")
    check_memory(load_config(JOBS / "hpcgpt_mix.toml", base), "job")  # the shipped: fits


def test_a_vllm_engine_takes_its_share_of_the_gpu_in_generation(tmp_path: Path) -> None:
    """rollout.backend "vllm": the engine's u·M in generation instead of HF's KV cache, the
    ZeRO-3 push gathering at most the embeddings; refused when that share does not fit."""
    path = model_dir(tmp_path, QWEN_7B, "q7")
    arch = architecture_from(QWEN_7B)
    shipped = [f"model.path={path}", "slurm.train.gpu_memory_gib=79"]

    def plan(*overrides: str) -> dict[str, float]:
        config = load_config(JOBS / "hpcgpt_mix.toml", [*shipped, *overrides])
        return {c.name: c.bytes for c in memory_plan(config, arch, True).components}

    hf, vllm = plan(), plan('rollout.backend="vllm"', "rollout.vllm_gpu_memory_utilization=0.3")
    assert hf["vLLM engine"] == 0 and hf["KV cache"] > 0
    assert hf["gathered weights"] == 2 * arch.params  # the whole policy, bf16
    assert vllm["vLLM engine"] == 0.3 * 79 * GIB and vllm["KV cache"] == 0
    assert vllm["gathered weights"] == arch.vocab * arch.hidden * 2  # the embeddings, bf16
    assert {k: v for k, v in vllm.items() if k not in ("vLLM engine", "KV cache",
                                                       "gathered weights")} == {
        k: v for k, v in hf.items() if k not in ("vLLM engine", "KV cache", "gathered weights")}
    greedy = load_config(JOBS / "hpcgpt_mix.toml", [
        *shipped, 'rollout.backend="vllm"', "rollout.vllm_gpu_memory_utilization=0.9"])
    with pytest.raises(ConfigError, match=r"biggest part is vLLM engine .*"
                                          r"rollout\.vllm_gpu_memory_utilization"):
        check_memory(greedy, "job")


def test_a_model_without_a_readable_shape_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(MemoryPlanError, match="cannot read the model's shape from"):
        architecture_of(str(tmp_path / "nowhere"))
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(MemoryPlanError, match="is not JSON"):
        architecture_of(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(MemoryPlanError, match="no usable 'hidden_size'"):
        architecture_of(str(tmp_path))


def measured_peak(model_name: str, rows: int, prompt: int, completion: int) -> float:
    """Bytes at the peak of one update as the plan models it (one rank, no ZeRO, fp32): the
    policy and the reference in memory, log-probs of `rows` completions under autograd,
    backward, an AdamW step. What the step allocates is read from torch's profiler (every
    tensor allocation and free, in order), the models' weights counted as they are."""
    from torch.profiler import ProfilerActivity, profile

    from hargo_hpc.train.model.logprobs import token_logprobs
    from hargo_hpc.train.model.models import load_policy, load_reference

    torch.manual_seed(0)
    policy, _ = load_policy(model_name, dtype="float32")
    reference = load_reference(model_name, dtype="float32")
    policy.train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    ids = torch.randint(0, policy.config.vocab_size, (rows, prompt + completion))
    mask = torch.ones_like(ids)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        logprobs = token_logprobs(policy, ids, mask, prompt, rows, grad=True)
        (-logprobs.mean()).backward()
        optimizer.step()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.end):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    weights = sum(p.numel() * p.element_size()
                  for model in (policy, reference) for p in model.parameters())
    return float(weights + peak)


@pytest.mark.parametrize(("model", "rows", "prompt", "completion"), [
    ("tiny", 2, 48, 16),
    pytest.param("smollm2", 2, 64, 128, marks=pytest.mark.slow),
])
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(
        model: str, rows: int, prompt: int, completion: int) -> None:
    config = load_config(JOBS / "tiny.toml", [
        f"model.path={model}", "training.zero_stage=0", f"training.micro_batch_size={rows}",
        f"model.max_prompt_tokens={prompt}", f"rollout.max_new_tokens={completion}",
        f'data.tasks=[{{name="plp_qa", max_new_tokens={completion}}}]'])
    plan = memory_plan(config, architecture_of(model), needs_reference=True)
    measured = measured_peak(model, rows, prompt, completion)
    assert abs(plan.peak - measured) / measured <= 0.25, (plan.peak, measured)
