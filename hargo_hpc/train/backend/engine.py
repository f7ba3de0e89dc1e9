"""The DeepSpeed engine: ZeRO stage 0-3, precision, optimizer, LR schedule, checkpoints, export.

The only module of the project that imports deepspeed. `build_engine` turns the trainer's
settings into a DeepSpeed config (saved as `<run dir>/deepspeed_config.json`, or a user's own
JSON file instead), a Torch AdamW client optimizer and a warmup schedule (`WarmupSchedule`),
and wraps `deepspeed.initialize` in an `Engine` with the handful of calls the loop needs: per
micro-batch `engine.backward(loss)` (its docstring: how the loss is scaled) then
`engine.step()`. docs/engine.md explains each choice.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic
from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.backend import distributed

Precision = Literal["fp32", "bf16", "fp16"]
Schedule = Literal["constant", "cosine"]
CONFIG_NAME = "deepspeed_config.json"
BATCH_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


class EngineError(HargoError, ValueError):
    """Settings DeepSpeed cannot run (one line naming the setting)."""


# ---------------------------------------------------------------- LR schedule


@dataclass
class WarmupSchedule:
    """The LR factor λ(s), s = optimizer steps taken so far, lr = base · λ(s):

        s < S:          λ = lr_S / base              (the SFT warm start, at its own lr)
        s' < W_u:       λ = (s' + 1) / (W_u + 1)     (linear warmup; no step at lr 0)
        constant:       λ = 1
        cosine:         λ = m + (1 − m) · ½ (1 + cos(π · min(1, (s' − W_u) / (T − W_u))))

    with s' = s − S, S = sft_steps (0 without a warm start in this engine), lr_S = sft_lr,
    W_u = warmup_steps, T = total_steps (optimizer steps after the warm start),
    m = min_lr_ratio. A callable object, so LambdaLR checkpoints its settings."""

    warmup_steps: int
    total_steps: int
    kind: Schedule = "constant"
    min_lr_ratio: float = 0.0
    sft_steps: int = 0
    sft_ratio: float = 1.0  # lr_S / base

    def __call__(self, s: int) -> float:
        if s < self.sft_steps:
            return self.sft_ratio
        s -= self.sft_steps
        if s < self.warmup_steps:
            return (s + 1) / (self.warmup_steps + 1)
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (s - self.warmup_steps) / span)
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine


# ---------------------------------------------------------------- the DeepSpeed config


def deepspeed_config(
    *, zero_stage: int, precision: Precision, grad_clip: float, grad_accum: int,
    micro_batch_size: int, world_size: int, offload_optimizer: bool,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The generated DeepSpeed JSON (a dict); `overrides` are merged in, nested dicts key by key."""
    if zero_stage not in (0, 1, 2, 3):
        raise EngineError(f"training.zero_stage must be 0, 1, 2 or 3, not {zero_stage}")
    if precision not in ("fp32", "bf16", "fp16"):
        raise EngineError(f"training.precision must be fp32, bf16 or fp16, not {precision!r}")
    if offload_optimizer and zero_stage == 0:
        raise EngineError("training.offload_optimizer needs training.zero_stage 1, 2 or 3")
    zero: dict[str, Any] = {"stage": zero_stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch_size * grad_accum * world_size,
        "gradient_clipping": grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        # Torch AdamW is the client optimizer: let ZeRO (and offload) run it as it is.
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    return _merge(config, overrides or {})


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_user_config(
    path: Path, *, grad_accum: int, micro_batch_size: int, world_size: int
) -> dict[str, Any]:
    """A user's DeepSpeed JSON, with the batch keys it lacks filled from the trainer's settings.

    Batch keys it has must agree with them: the loop slices its batches from the trainer's
    settings, and a disagreeing file would silently change what one optimizer step means.
    """
    try:
        config = json.loads(path.read_text())
    except OSError as err:
        raise EngineError(
            f"training.deepspeed_config: cannot read {path}: {err.strerror}"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise EngineError(f"training.deepspeed_config: {path} is not valid JSON: {err}") from None
    if not isinstance(config, dict):
        raise EngineError(f"training.deepspeed_config: {path} must hold a JSON object")
    wanted = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch_size * grad_accum * world_size,
    }
    for key, value in wanted.items():
        if key in config and config[key] != value:
            raise EngineError(
                f"training.deepspeed_config: {path} sets {key}={config[key]!r}, the trainer's "
                f"settings give {value} (micro_batch_size x grad_accum x {world_size} ranks)"
            )
        config.setdefault(key, value)
    return config


# ---------------------------------------------------------------- building


def _optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices (ndim ≥ 2) only; norms and biases are not decayed. A parameter
    created partitioned (`partitioned_loading`) holds an empty shard: its `ds_shape` is its own."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            ndim = len(getattr(param, "ds_shape", param.shape))
            (decay if ndim >= 2 else no_decay).append(param)
    if not decay and not no_decay:
        raise EngineError("the model has no trainable parameters")
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _skip_unused_cpu_comm_op() -> None:
    """On the CPU accelerator DeepSpeed JIT-compiles a shared-memory all-reduce op at the first
    distributed init (~34 s per machine, and again in every fresh cache); only DeepSpeed's
    inference all-reduce uses it, never training. Marking it incompatible skips the build."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":
        with contextlib.suppress(Exception):
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def ensure_distributed() -> None:
    """The variables and process group DeepSpeed needs (one process when nothing is set), and
    DeepSpeed's own view of a group the trainer created (`zero.Init` reads the world size from
    it before any `deepspeed.initialize`)."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if deepspeed.comm.is_initialized():
        return
    ranks: dict[str, int] = {}
    if not dist.is_initialized():
        env = distributed.detect()
        env.export()
        ranks = {"rank": env.rank, "world_size": env.world_size}
    deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name(),
                               auto_mpi_discovery=False, **ranks)


@contextlib.contextmanager
def partitioned_loading(*, precision: Precision, micro_batch_size: int) -> Iterator[None]:
    """Models `from_pretrained` loads inside are created already partitioned by ZeRO-3 over the
    ranks (transformers' DeepSpeed integration: `zero.Init` while the model is built, then the
    checkpoint copied in one gathered layer at a time), so no rank holds the whole model in host
    memory: transformers 5 reads the checkpoint's values on rank 0 only, 4.56 maps its
    safetensors on every rank (the page cache: one copy per node). `build_engine` and
    `shard_reference` then take the partitioned model as it is. Every rank calls it together
    (the process group must exist); only for ZeRO-3 and the generated config."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    _skip_unused_cpu_comm_op()
    ensure_distributed()
    config = deepspeed_config(zero_stage=3, precision=precision, grad_clip=0.0, grad_accum=1,
                              micro_batch_size=micro_batch_size,
                              world_size=dist.get_world_size(), offload_optimizer=False)
    active = HfDeepSpeedConfig(config)  # transformers keeps only a weak reference to it
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del active


def build_engine(
    model: torch.nn.Module,
    *,
    zero_stage: int = 2,
    precision: Precision = "fp32",
    lr: float = 1e-6,
    weight_decay: float = 0.0,
    grad_clip: float = 1.0,
    grad_accum: int = 1,
    micro_batch_size: int = 1,
    warmup_steps: int = 0,
    total_steps: int = 0,
    offload_optimizer: bool = False,
    lr_schedule: Schedule = "constant",
    min_lr_ratio: float = 0.0,
    sft_steps: int = 0,
    sft_lr: float | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    user_config: Path | None = None,
    run_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Engine:
    """A DeepSpeed engine over `model` (module doc). Every rank calls it.

    `user_config` (a JSON file) replaces the generated config; when it has an "optimizer" or
    "scheduler" section DeepSpeed builds those from it instead of AdamW / the warmup schedule.
    The config used is written to `run_dir/deepspeed_config.json` (rank 0). `overrides` are
    merged into the generated config (not into a user's file). The first `sft_steps`
    optimizer steps run at `sft_lr` (the module doc's schedule).
    """
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if grad_accum < 1 or micro_batch_size < 1:
        raise EngineError("training.grad_accum and training.micro_batch_size must be >= 1")
    if lr_schedule not in ("constant", "cosine"):
        raise EngineError(f"training.lr_schedule must be constant or cosine, not {lr_schedule!r}")
    if lr_schedule == "cosine" and total_steps <= warmup_steps:
        raise EngineError(
            f"a cosine schedule needs total_steps ({total_steps}) > warmup_steps ({warmup_steps})"
        )
    accelerator = get_accelerator()
    supported = {"bf16": accelerator.is_bf16_supported, "fp16": accelerator.is_fp16_supported}
    if precision in supported and not supported[precision]():
        raise EngineError(
            f"training.precision {precision} is not supported on {accelerator.device_name()}"
        )
    _skip_unused_cpu_comm_op()
    ensure_distributed()
    world = dist.get_world_size()
    if user_config is not None:
        config = read_user_config(
            Path(user_config), grad_accum=grad_accum, micro_batch_size=micro_batch_size,
            world_size=world,
        )
    else:
        config = deepspeed_config(
            zero_stage=zero_stage, precision=precision, grad_clip=grad_clip,
            grad_accum=grad_accum, micro_batch_size=micro_batch_size, world_size=world,
            offload_optimizer=offload_optimizer, overrides=overrides,
        )
    if run_dir is not None and dist.get_rank() == 0:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(run_dir) / CONFIG_NAME, json.dumps(config, indent=2) + "\n")

    optimizer = scheduler = None
    if "optimizer" not in config:
        optimizer = torch.optim.AdamW(
            _optimizer_groups(model, weight_decay), lr=lr, betas=betas, eps=eps
        )
        if "scheduler" not in config:
            schedule = WarmupSchedule(warmup_steps, total_steps, lr_schedule, min_lr_ratio,
                                      sft_steps, 1.0 if sft_lr is None else sft_lr / lr)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        ds_engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config,
            model_parameters=params if optimizer is None else None,
        )
    except (ValueError, AssertionError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EngineError(f"DeepSpeed refused the config: {first}") from None
    return Engine(ds_engine)


def shard_reference(model: torch.nn.Module, *, precision: Precision,
                    micro_batch_size: int) -> torch.nn.Module:
    """`model` (frozen, no optimizer) partitioned by ZeRO-3 over the ranks, for
    `model.reference_device = "sharded"`: each rank keeps 1/W of every parameter, and a
    forward pass gathers a layer's parameters just before the layer runs and frees them
    after, so the reference never stands whole in one rank's memory. Its forward passes are
    collective: every rank must make the same calls, which equal rows per rank and equal
    log-prob micro-batches give. Call it after `build_engine` (the process group exists)."""
    import deepspeed

    config = deepspeed_config(zero_stage=3, precision=precision, grad_clip=0.0, grad_accum=1,
                              micro_batch_size=micro_batch_size,
                              world_size=dist.get_world_size(), offload_optimizer=False)
    ds_engine, _, _, _ = deepspeed.initialize(model=model, config=config)
    ds_engine.eval()
    return ds_engine.module


# ---------------------------------------------------------------- the engine


class Engine:
    """The loop's view of a DeepSpeed engine."""

    def __init__(self, ds_engine: Any) -> None:
        self._ds = ds_engine
        self._own_grad_norm: float | None = None

    @property
    def module(self) -> torch.nn.Module:
        return self._ds.module

    @property
    def device(self) -> torch.device:
        return torch.device(self._ds.device)

    @property
    def deepspeed(self) -> Any:
        """The wrapped `DeepSpeedEngine` (for what this class does not cover)."""
        return self._ds

    @property
    def zero_stage(self) -> int:
        return int(self._ds.zero_optimization_stage())

    @property
    def grad_accum(self) -> int:
        return int(self._ds.gradient_accumulation_steps())

    @property
    def micro_batch_size(self) -> int:
        return int(self._ds.train_micro_batch_size_per_gpu())

    @property
    def world_size(self) -> int:
        return int(self._ds.world_size)

    @property
    def rank(self) -> int:
        return int(self._ds.global_rank)

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps taken (DeepSpeed's global_steps; restored by load_checkpoint)."""
        return int(self._ds.global_steps)

    @property
    def lr(self) -> float:
        """The learning rate the next optimizer step uses."""
        return float(self._ds.get_lr()[0])

    @property
    def grad_norm(self) -> float | None:
        """Global gradient norm of the last optimizer step (before clipping), when known."""
        norm = self._ds.get_global_grad_norm()
        norm = self._own_grad_norm if norm is None else norm
        return None if norm is None else float(norm)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Forward through the DeepSpeed engine (ZeRO-3 fetches parameters as needed)."""
        return self._ds(*args, **kwargs)

    def train(self) -> None:
        self._ds.train()

    def eval(self) -> None:
        self._ds.eval()

    def backward(self, loss: torch.Tensor) -> float:
        """Accumulate ∇loss of one micro-batch; returns the loss as a float. The loop's
        micro-batch losses use the whole optimizer step's denominators (the token or sequence
        count over A = grad_accum micro-batches on each of W ranks), so they sum to the
        full-batch loss, L_full = Σ_{r=1..W} Σ_{m=1..A} L_{r,m}. DeepSpeed would divide each by
        A (`scale_wrt_gas`) and average gradients over the ranks; passing W · loss without that
        division leaves exactly ∇L_full in the optimizer:

            (1/W) Σ_r ∇(W · Σ_m L_{r,m}) = ∇L_full."""
        self._ds.backward(loss * self.world_size, scale_wrt_gas=False)
        return float(loss.detach())

    def step(self) -> bool:
        """Call after every micro-batch's backward; True when this call stepped the optimizer
        (every grad_accum-th call) and the LR schedule."""
        boundary = bool(self._ds.is_gradient_accumulation_boundary())
        own_norm = boundary and not hasattr(self._ds.optimizer, "_global_grad_norm")
        norm = self._plain_grad_norm() if own_norm else None
        self._ds.step()
        if own_norm:
            self._own_grad_norm = norm
        return boundary

    def _plain_grad_norm(self) -> float:
        """‖g‖₂ over the module's (already all-reduced) gradients: the ZeRO-0 fp32 path, where
        DeepSpeed runs the client optimizer bare and keeps no norm."""
        norms = [p.grad.detach().float().norm() for p in self.module.parameters()
                 if p.grad is not None]
        return float(torch.stack(norms).norm()) if norms else 0.0

    def gathered_parameters(self) -> contextlib.AbstractContextManager[Any]:
        """Under ZeRO-3: every parameter gathered whole on every rank for the `with`, once, and
        ZeRO-3's per-module hooks taken off meanwhile (with them each forward releases and
        re-gathers the parameters of every module, token after token during generation).
        For generation, log-probs without gradient and export: read-only, no backward inside.
        Otherwise a no-op."""
        if self.zero_stage != 3:
            return contextlib.nullcontext()
        return self._gathered_zero3()

    @contextlib.contextmanager
    def _gathered_zero3(self) -> Iterator[None]:
        import deepspeed

        params = list(self.module.parameters())
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            offload = getattr(self._ds.optimizer, "parameter_offload", None)
            hooks_off = offload is not None and hasattr(offload, "_register_deepspeed_module")
            if hooks_off:
                _remove_zero3_hooks(offload, params)
            try:
                yield
            finally:
                if hooks_off:
                    offload._register_deepspeed_module(offload.module)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer, whole, as CPU copies, on every rank."""
        with self.gathered_parameters():
            return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    # ------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self, root: str | os.PathLike[str], tag: str, client_state: dict[str, Any],
        loop_state: dict[str, Any] | None = None,
    ) -> Path:
        """Save engine, `client_state` (JSON), every rank's RNG states and, when given, this
        rank's `loop_state` (tensors; `checkpoint.read_loop_state`) as `root/<tag>`.
        Every rank calls it. Written under `.partial-<tag>` and renamed into place, then
        `latest` is replaced atomically (checkpoint.py). Returns the checkpoint's path."""
        root = Path(root)
        ckpt.check_tag(tag)
        partial = ckpt.partial_dir(root, tag)
        if self.rank == 0:
            ckpt.prepare_partial(root, tag)
        distributed.barrier()
        self._ds.save_checkpoint(str(root), tag=partial.name, client_state={}, save_latest=False)
        ckpt.write_rng(partial, self.rank)
        if loop_state is not None:
            ckpt.write_loop_state(partial, self.rank, loop_state)
        if self.rank == 0:
            ckpt.write_state(
                partial, tag=tag, world_size=self.world_size, zero_stage=self.zero_stage,
                client_state=client_state,
            )
        distributed.barrier()
        final = ckpt.publish(root, tag) if self.rank == 0 else None
        return Path(distributed.broadcast_object(str(final)))

    def load_checkpoint(
        self, root: str | os.PathLike[str], tag: str | None = None, *, restore_rng: bool = True
    ) -> dict[str, Any]:
        """Load `root/<tag>` (default: the latest complete one) into this engine: module,
        optimizer, LR schedule, step counters and (restore_rng) this rank's RNG states. Returns
        the client state. Load into a freshly built engine, not one that has trained."""
        root = Path(root)
        path = ckpt.latest_checkpoint(root) if tag is None else root / ckpt.check_tag(tag)
        if path is None:
            raise ckpt.CheckpointError(f"no complete checkpoint in {root}")
        record = ckpt.read_state(path)
        if record["world_size"] != self.world_size:
            raise ckpt.CheckpointError(
                f"{path} was written by {record['world_size']} ranks; this run has "
                f"{self.world_size}"
            )
        if record["zero_stage"] != self.zero_stage:
            raise ckpt.CheckpointError(
                f"{path} was written with ZeRO stage {record['zero_stage']}; this engine "
                f"runs stage {self.zero_stage}"
            )
        loaded, _ = self._ds.load_checkpoint(
            str(root), tag=path.name, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if loaded is None:
            raise ckpt.CheckpointError(f"DeepSpeed could not load {path}")
        if restore_rng:
            ckpt.load_rng(path, self.rank)
        return dict(record["client_state"])

    # ------------------------------------------------------------ export

    def export_hf(self, out_dir: str | os.PathLike[str], tokenizer: Any = None) -> Path:
        """A `from_pretrained`-loadable directory (safetensors) of the current weights, in the
        engine's dtype (fp32, or bf16 / fp16 under those precisions). Under ZeRO-3 the weights
        are gathered layer by layer onto rank 0. Every rank calls it; rank 0 writes, into a
        private directory renamed over `out_dir` (an old export is replaced)."""
        out = Path(out_dir)
        if self.zero_stage == 3:
            state = self._ds._zero3_consolidated_16bit_state_dict()
        else:
            state = self.module.state_dict() if self.rank == 0 else None
        if self.rank == 0:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out.name[:12]}-", dir=out.parent))
            try:
                self.module.save_pretrained(tmp, state_dict=state)
                if tokenizer is not None:
                    tokenizer.save_pretrained(tmp)
                os.chmod(tmp, 0o755)
                _replace_directory(tmp, out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        distributed.barrier()
        return out


def _remove_zero3_hooks(offload: Any, params: list[torch.nn.Parameter]) -> None:
    """Take ZeRO-3's per-module fetch/release hooks off (DeepSpeed's `DeepSpeedZeRoOffload`;
    `_register_deepspeed_module` puts them back and invalidates the prefetch trace)."""
    for param in params:
        param.ds_active_sub_modules.clear()
    for hook in [*offload.forward_hooks, *offload.backward_hooks]:
        hook.remove()
    offload.forward_hooks, offload.backward_hooks = [], []


def _replace_directory(new: Path, final: Path) -> None:
    """Put directory `new` at `final`; an existing `final` is moved aside first, then removed."""
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".old-{final.name[:12]}-", dir=final.parent))
        os.rename(final, old / final.name)
    os.rename(new, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
