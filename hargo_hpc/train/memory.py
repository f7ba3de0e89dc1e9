"""The memory plan of a training job before it starts: the estimated peak per GPU and the host
memory per node, by component, from the model's shape and the experiment's settings, and whether
they fit the partition's GPUs and the job's `mem`.

`architecture_of(path)` reads the model's shape (its config.json, or the tiny recipe and
SmolLM2's shape) without loading weights; `memory_plan(config, arch)` gives each component's
bytes per device in the phase it lives in (`plan.peak`, `plan.biggest`); `fit_refusal` is the
one line that refuses a job over `slurm.train.gpu_memory_gib`. No torch: it runs on a login node.
Each formula and its source: docs/cluster.md, "6. Memory".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hargo_hpc.config import ExperimentConfig, token_budgets
from hargo_hpc.errors import HargoError
from hargo_hpc.train.model.hub import resolve_model
from hargo_hpc.train.model.recipes import SMOLLM2_ARCHITECTURE, TINY_RECIPE

GIB = 2**30
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp32": 4, "bf16": 2, "fp16": 2}


class MemoryPlanError(HargoError, ValueError):
    """The model's shape cannot be read (one line naming the path)."""


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape (Llama, Qwen, Mistral, SmolLM2 alike)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int = 0  # 0: hidden / heads

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def params(self) -> int:
        """N = V·h (·2 untied) + L·(h·H·d + 2·h·K·d + H·d·h + 3·h·i + 2h) + h: embeddings (and a
        separate output head), each layer's q, k, v, o projections, SwiGLU MLP and two RMSNorm
        weights, the final norm (biases, present in Qwen's q/k/v, add < 0.1 %: left out)."""
        h, d = self.hidden, self.dim
        layer = (h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h
                 + 3 * h * self.intermediate + 2 * h)
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h


def architecture_from(config: dict) -> Architecture:
    """The shape in an HF config.json's keys."""
    try:
        return Architecture(
            hidden=int(config["hidden_size"]), intermediate=int(config["intermediate_size"]),
            layers=int(config["num_hidden_layers"]), heads=int(config["num_attention_heads"]),
            kv_heads=int(config.get("num_key_value_heads") or config["num_attention_heads"]),
            vocab=int(config["vocab_size"]), tied=bool(config.get("tie_word_embeddings", False)),
            head_dim=int(config.get("head_dim") or 0))
    except (KeyError, TypeError, ValueError) as err:
        raise MemoryPlanError(f"the model's config has no usable {err}") from None


def architecture_of(path: str, revision: str | None = None) -> Architecture:
    """The shape of `model.path`: the tiny recipe, SmolLM2's, or a directory's (a hub id's
    snapshot's) config.json."""
    path = resolve_model(path, revision)
    if path == "tiny":
        spec = TINY_RECIPE["model"]
        return architecture_from({**spec, "vocab_size": TINY_RECIPE["tokenizer"]["vocab_size"]})
    if path == "smollm2":
        return architecture_from(dict(SMOLLM2_ARCHITECTURE))
    file = Path(path) / "config.json"
    try:
        return architecture_from(json.loads(file.read_text()))
    except OSError as err:
        raise MemoryPlanError(f"cannot read the model's shape from {file}: "
                              f"{err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise MemoryPlanError(f"{file} is not JSON: {err.msg} (line {err.lineno})") from None


PHASES = ("generation", "update", "step")  # sampling, forward and backward, optimizer step


@dataclass(frozen=True)
class Component:
    name: str
    phase: str  # "always", or one of PHASES
    bytes: float
    fix: str  # the setting that shrinks it


@dataclass(frozen=True)
class MemoryPlan:
    ranks: int
    components: tuple[Component, ...]

    def phase_total(self, phase: str) -> float:
        return sum(c.bytes for c in self.components if c.phase in ("always", phase))

    @property
    def peak(self) -> float:
        """Bytes per device in the largest phase (resident state included)."""
        return max(self.phase_total(phase) for phase in PHASES)

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_total)

    @property
    def biggest(self) -> Component:
        """The largest component present in the peak phase."""
        live = [c for c in self.components if c.phase in ("always", self.peak_phase)]
        return max(live, key=lambda c: c.bytes)


def memory_plan(config: ExperimentConfig, arch: Architecture,
                needs_reference: bool) -> MemoryPlan:
    """Each component's bytes per device (formulas: docs/cluster.md, "6. Memory").

    W ranks (slurm.train nodes × ntasks_per_node), ZeRO stage z, weight bytes b
    (model.dtype), N parameters, micro-batch m, rows per rank in generation R = P·G / W,
    prompt S_p (model.max_prompt_tokens) and completion S_c (the largest task budget):

    weights N·b, / W under z = 3; optimizer (AdamW: two fp32 moments, and an fp32 master copy
    when b < 4) (8 + 4·[b < 4])·N, / W for z ≥ 1, 0 with offload_optimizer; gradients N·b,
    / W for z ≥ 2; reference N·b on every device ("policy"), 0 ("cpu"), N·b / W ("sharded");
    generation: the gathered policy N·b under z = 3 and the KV cache 2·L·K·d·(S_p + S_c)·R·b;
    update: activations m·(S_p + S_c)·L·b·(6h + 2K·d + 4i) without gradient checkpointing
    (the tensors a Llama layer keeps for its backward: the two norms' inputs, q, k and v after
    RoPE, the attention output, the MLP's gate, up and their product; attention by SDPA, so no
    S² term; after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    Transformer Models", adapted to SwiGLU and grouped-query attention), with it
    m·(S_p + S_c)·b·(L·h + 6h + 2K·d + 4i) (each layer's input, one layer recomputed); and
    the completion's logits 2·m·S_c·V·b + 8·S_c·V (the model's, kept for the log-softmax's
    backward, and their gradient; one row's fp32 logits and softmax at a time:
    `logprobs.TakenLogprobs`); step: torch's AdamW (foreach) holds two fp32
    temporaries the size of its parameters, 8·N, / W for z ≥ 1.

    With rollout.backend "vllm" the engine generates instead: its share u·M of the GPU
    (u = rollout.vllm_gpu_memory_utilization of M = slurm.train.gpu_memory_gib; 0 where M is
    not set) holds its weights and KV cache in generation (asleep otherwise), no HF KV cache,
    and under z = 3 the weight push gathers one module at a time, at most the embeddings
    V·h·b."""
    t, r, model = config.training, config.rollout, config.model
    res = config.slurm.train
    ranks = res.nodes * res.ntasks_per_node
    b = BYTES[model.dtype]
    n = arch.params
    h, d, k, i, L, V = (arch.hidden, arch.dim, arch.kv_heads, arch.intermediate, arch.layers,
                        arch.vocab)
    z = t.zero_stage
    completion = max(token_budgets(config).values())
    prompt = model.max_prompt_tokens
    tokens = prompt + completion
    rows = r.prompts_per_step * r.num_generations / ranks
    m = t.micro_batch_size
    master = 4 if b < 4 else 0
    reference = {"policy": n * b, "cpu": 0.0, "sharded": n * b / ranks}[model.reference_device]
    vllm = r.backend == "vllm"
    engine = r.vllm_gpu_memory_utilization * (res.gpu_memory_gib or 0.0) * GIB if vllm else 0.0
    gathered = (V * h * b if vllm else n * b) if z == 3 else 0.0
    if model.gradient_checkpointing:
        activations = m * tokens * b * (L * h + 6 * h + 2 * k * d + 4 * i)
    else:
        activations = m * tokens * L * b * (6 * h + 2 * k * d + 4 * i)
    components = [
        Component("weights", "always", n * b / (ranks if z == 3 else 1),
                  "training.zero_stage = 3"),
        Component("optimizer", "always",
                  0.0 if t.offload_optimizer else (8 + master) * n / (ranks if z >= 1 else 1),
                  "training.zero_stage >= 1, or training.offload_optimizer = true"),
        Component("gradients", "always", n * b / (ranks if z >= 2 else 1),
                  "training.zero_stage >= 2"),
        Component("reference", "always", reference if needs_reference else 0.0,
                  'model.reference_device = "sharded" (ZeRO-3) or "cpu"'),
        Component("gathered weights", "generation", gathered,
                  "fewer parameters per rank cannot help: the whole policy generates"),
        Component("KV cache", "generation", 0.0 if vllm else 2 * L * k * d * tokens * rows * b,
                  "rollout.prompts_per_step, or more ranks"),
        Component("vLLM engine", "generation", engine,
                  "a smaller rollout.vllm_gpu_memory_utilization (its share of "
                  "slurm.train.gpu_memory_gib)"),
        Component("activations", "update", activations,
                  "model.gradient_checkpointing = true, or a smaller training.micro_batch_size"),
        Component("logits", "update", 2 * m * completion * V * b + 8 * completion * V,
                  "a smaller training.micro_batch_size"),
        Component("optimizer step", "step",
                  0.0 if t.offload_optimizer else 8 * n / (ranks if z >= 1 else 1),
                  "training.zero_stage >= 1, or training.offload_optimizer = true"),
    ]
    return MemoryPlan(ranks, tuple(components))


def fit_refusal(plan: MemoryPlan, gpu_memory_gib: float | None) -> str | None:
    """One line when the plan's peak exceeds `gpu_memory_gib` (None: not checked), naming the
    biggest component and the setting that shrinks it; None when it fits."""
    if not gpu_memory_gib or plan.peak <= gpu_memory_gib * GIB:
        return None
    big = plan.biggest
    return (f"the training job needs about {size(plan.peak)} a GPU in its "
            f"{plan.peak_phase} phase, over slurm.train.gpu_memory_gib = {gpu_memory_gib:g}: the "
            f"biggest part is {big.name} ({size(big.bytes)}); {big.fix}")


def loads_partitioned(config: ExperimentConfig, ranks: int) -> bool:
    """Whether the trainer creates the policy already partitioned over its `ranks` at load
    (`engine.partitioned_loading`: no rank holds it whole in host memory): ZeRO-3 over several
    ranks with the generated DeepSpeed config, a checkpoint directory (not GGUF), no LoRA (its
    adapters are added to the whole base model). The reference too when it is "sharded"."""
    t, model = config.training, config.model
    return (t.zero_stage == 3 and ranks > 1 and not t.deepspeed_config and not model.lora_r
            and not model.path.endswith(".gguf"))


def host_plan(config: ExperimentConfig, arch: Architecture,
              needs_reference: bool) -> tuple[Component, ...]:
    """Each component's bytes of host memory on one node (T ranks a node, the rest as in
    `memory_plan`), all counted at once (the reference and the optimizer's host state are
    allocated while the policy is still being moved off the host: an upper bound):

    the policy at load N·b on each of the node's T ranks, once a node when it loads
    partitioned (`loads_partitioned`; transformers 5 reads it on rank 0 only, so other nodes
    hold none); the reference at load the same (partitioned only when "sharded"), T·N·b kept
    with reference_device "cpu"; the offloaded optimizer (8 + 4·[b < 4])·N / W on each rank;
    a vLLM engine's copy of the weights (rollout.backend "vllm") N·b on each rank: on a GPU
    its sleep moves them to the host, on a CPU it holds them there."""
    t, model = config.training, config.model
    res = config.slurm.train
    ranks, per_node = res.nodes * res.ntasks_per_node, res.ntasks_per_node
    n, b = arch.params, BYTES[model.dtype]
    partitioned = loads_partitioned(config, ranks)
    at_load = n * b * (1 if partitioned else per_node)
    ref_load = n * b * (1 if partitioned and model.reference_device == "sharded" else per_node)
    master = 4 if b < 4 else 0
    reference = needs_reference and model.reference_device != "cpu"
    return (
        Component("policy at load", "load", at_load,
                  "training.zero_stage = 3 (it then loads partitioned: once a node)"),
        Component("reference at load", "load", ref_load if reference else 0.0,
                  'model.reference_device = "sharded" (ZeRO-3)'),
        Component("reference on host", "always",
                  per_node * n * b if needs_reference and model.reference_device == "cpu"
                  else 0.0, 'model.reference_device = "sharded" (ZeRO-3) or "policy"'),
        Component("offloaded optimizer", "always",
                  per_node * (8 + master) * n / ranks if t.offload_optimizer else 0.0,
                  "training.offload_optimizer = false, or more nodes"),
        Component("vLLM weights", "always",
                  per_node * n * b if config.rollout.backend == "vllm" else 0.0,
                  'rollout.backend = "hf", or fewer ranks a node'),
    )


def slurm_mem_bytes(mem: str) -> float:
    """Slurm's --mem value in bytes (a bare number is megabytes)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if mem[-1:] in units:
        return float(mem[:-1]) * units[mem[-1]]
    return float(mem) * 2**20


def host_refusal(components: tuple[Component, ...], mem: str) -> str | None:
    """One line when the host components of a node exceed `slurm.train.mem`, naming the
    biggest and the setting that shrinks it; None when they fit."""
    total = sum(c.bytes for c in components)
    if total <= slurm_mem_bytes(mem):
        return None
    big = max(components, key=lambda c: c.bytes)
    return (f"the training job needs about {size(total)} of host memory a node, over "
            f"slurm.train.mem = {mem}: the biggest part is {big.name} ({size(big.bytes)}); "
            f"{big.fix}")


def plan_lines(plan: MemoryPlan, arch: Architecture,
               host: tuple[Component, ...] = ()) -> list[str]:
    """The plan as printed by `hargo config check`: one line a component, then the peak."""
    lines = [f"model: {arch.params / 1e9:.3f} B parameters (h {arch.hidden}, {arch.layers} "
             f"layers, vocab {arch.vocab}); {plan.ranks} rank(s)",
             f"{'component':<17} {'phase':<11} {'a GPU':>10}"]
    lines += [f"{c.name:<17} {c.phase:<11} {size(c.bytes):>10}" for c in plan.components]
    lines.append(f"peak: {size(plan.peak)} a GPU, in {plan.peak_phase} "
                 f"(biggest: {plan.biggest.name})")
    if host:
        lines.append(f"{'host memory':<19} {'phase':<9} {'a node':>10}")
        lines += [f"{c.name:<19} {c.phase:<9} {size(c.bytes):>10}" for c in host]
        lines.append(f"host: {size(sum(c.bytes for c in host))} a node at most")
    return lines


def size(n: float) -> str:
    """Bytes as GiB, or MiB below a tenth of one."""
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"
