"""A training checkpoint as an HF model directory, for `hargo eval CHECKPOINT`: the checkpoint's
own `hf/` when the trainer wrote one beside it (`training.export_checkpoints`), else its
weights consolidated from the ZeRO shards (DeepSpeed's `zero_to_fp32`) into the run's model,
written once into that `hf/`. docs/training.md, "The run directory".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hargo_hpc.config import ExperimentConfig
from hargo_hpc.errors import HargoError
from hargo_hpc.files import publish_directory

if TYPE_CHECKING:
    import torch

HF = "hf"  # the checkpoint's HF directory
STATE = "hargo_state.json"  # what marks a trainer's checkpoint
ENGINE_STATES = "mp_rank_00_model_states.pt"  # DeepSpeed's module state (ZeRO 0) and metadata


class CheckpointError(HargoError, ValueError):
    """A checkpoint that cannot be turned into a model (one line naming it)."""


def checkpoint_of(path: Path) -> tuple[Path, Path] | None:
    """(run directory, checkpoint directory) when `path` is a run's checkpoint
    (`RUN/checkpoints/step_N`) or its `checkpoints/` directory (its `latest`); else None."""
    if (path / "latest").is_file() and path.name == "checkpoints":
        path = path / (path / "latest").read_text().strip()
    if (path / STATE).is_file() and path.parent.name == "checkpoints":
        return path.parent.parent, path
    return None


def hf_of_checkpoint(checkpoint: Path, config: ExperimentConfig) -> Path:
    """`checkpoint/hf`, consolidated and written first when the trainer did not export it
    (a LoRA run's adapters merged). CheckpointError for shards that do not fit the model."""
    out = checkpoint / HF
    if (out / "config.json").is_file():
        return out
    from hargo_hpc.train.model.models import LoraOptions, export_hf, load_policy

    section = config.model
    lora = (LoraOptions(r=section.lora_r, alpha=section.lora_alpha, dropout=section.lora_dropout,
                        target_modules=tuple(section.lora_target_modules))
            if section.lora_r else None)
    model, tokenizer = load_policy(section.path, dtype=section.dtype, lora=lora,
                                   trust_remote_code=section.trust_remote_code,
                                   cache_dir=section.cache_dir or None,
                                   revision=section.revision)
    state = consolidated(checkpoint)
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - set(
        dict(model.named_parameters()))  # names of tied weights, absent from the shards
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise CheckpointError(
            f"{checkpoint}: its weights do not fit model.path {section.path} ("
            f"{len(missing)} missing, e.g. {missing[:1]}; {len(unexpected)} unexpected, e.g. "
            f"{unexpected[:1]})")
    with publish_directory(out) as tmp:
        export_hf(model, tokenizer, tmp)
    return out


def consolidated(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's whole fp32 weights: gathered from the ZeRO 1-3 shards of every rank
    (`deepspeed.utils.zero_to_fp32`), or the module state of a ZeRO-0 checkpoint."""
    import torch

    shards = list(checkpoint.glob("*_optim_states.pt"))
    if shards and any("zero_pp_rank" in s.name for s in shards):
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        try:
            return dict(get_fp32_state_dict_from_zero_checkpoint(
                str(checkpoint.parent), tag=checkpoint.name))
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise CheckpointError(f"{checkpoint}: cannot consolidate its ZeRO shards "
                                  f"({type(err).__name__}: {err})") from None
    try:
        saved = torch.load(checkpoint / ENGINE_STATES, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError) as err:
        raise CheckpointError(f"{checkpoint}: no readable {ENGINE_STATES} ({err})") from None
    return {k: v.float() for k, v in saved["module"].items()}
