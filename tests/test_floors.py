"""The floors in pyproject.toml hold: each is at least the release that introduced every
version-dependent API of its package that hargo_hpc calls.

`CALLED` lists those APIs: the distribution, the API (`module.attribute` or
`module.function(keyword=)` for a keyword argument), the release it arrived in, and the file of
hargo_hpc calling it. `GUARDED` lists APIs the code uses only when they are there (it falls back
otherwise), so they set no floor. The tests check that every floor covers its package's rows,
that each file named still mentions its API (a row does not outlive its call), that the
installed packages have the APIs and meet the floors. Adding a row: docs/setup.md.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
KEYWORD = re.compile(r"(?P<function>[\w.]+)\((?P<keyword>\w+)=\)")


class Api(NamedTuple):
    package: str  # the distribution, as pyproject.toml spells it
    api: str  # "module.attribute" or "module.function(keyword=)"
    since: str  # the release that introduced it (a comment says where that is only a bound)
    file: str  # the file calling it, relative to hargo_hpc/


DIST = "train/backend/distributed.py"
ENGINE = "train/backend/engine.py"
GENERATE = "train/rollout/generate.py"
LOGPROBS = "train/model/logprobs.py"
MODELS = "train/model/models.py"
WINRATE = "tasks/winrate.py"

CALLED: tuple[Api, ...] = (
    # torch.accelerator is new in 2.6 (pytorch#132204); the `*_index` spellings went into the
    # 2.6 release branch (pytorch#143186). All five are in the 2.6.0 wheel.
    Api("torch", "torch.accelerator.current_accelerator", "2.6", DIST),
    Api("torch", "torch.accelerator.current_device_index", "2.6", DIST),
    Api("torch", "torch.accelerator.device_count", "2.6", DIST),
    Api("torch", "torch.accelerator.is_available", "2.6", DIST),
    Api("torch", "torch.accelerator.set_device_index", "2.6", DIST),
    # In the 2.6.0 wheel; the first release with each was not established (an upper bound).
    Api("torch", "torch.get_device_module", "2.6", GENERATE),
    Api("torch", "torch.random.fork_rng(device_type=)", "2.6", GENERATE),
    Api("torch", "torch.nn.Module.load_state_dict(assign=)", "2.6", MODELS),
    # `dtype` replaced `torch_dtype` in 4.56 (transformers#39782); before, `dtype` is passed on
    # unread and the model loads in fp32. `logits_to_keep` replaced `num_logits_to_keep` in
    # 4.49 (modeling_llama.py of the 4.48.3 and 4.49.0 wheels); before, every logit is kept.
    Api("transformers", "transformers.AutoModelForCausalLM.from_pretrained(dtype=)", "4.56",
        MODELS),
    Api("transformers", "transformers.AutoModelForCausalLM.from_pretrained(dtype=)", "4.56",
        WINRATE),
    Api("transformers", "transformers.AutoModelForCausalLM.from_config(dtype=)", "4.56",
        MODELS),
    Api("transformers", "transformers.LlamaForCausalLM.forward(logits_to_keep=)", "4.49",
        LOGPROBS),
    # DeepSpeed's git history (the first tag holding the commit). The hook re-registration is
    # looked up with hasattr, but without it ZeRO-3's hooks stay on inside the gather.
    Api("deepspeed", "deepspeed.runtime.zero.parameter_offload.DeepSpeedZeRoOffload"
        "._register_deepspeed_module", "0.16.4", ENGINE),
    Api("deepspeed", "deepspeed.zero.GatheredParameters", "0.3.12", ENGINE),
    Api("deepspeed", "deepspeed.init_distributed(auto_mpi_discovery=)", "0.3.9", ENGINE),
    Api("deepspeed", "deepspeed.init_distributed(world_size=)", "0.8.2", ENGINE),
    Api("deepspeed", "deepspeed.accelerator.get_accelerator", "0.7.6", ENGINE),
    Api("deepspeed", "deepspeed.runtime.engine.DeepSpeedEngine.backward(scale_wrt_gas=)",
        "0.7.0", ENGINE),
    Api("deepspeed", "deepspeed.runtime.engine.DeepSpeedEngine"
        "._zero3_consolidated_16bit_state_dict", "0.6.0", ENGINE),
    Api("deepspeed", "deepspeed.runtime.engine.DeepSpeedEngine.save_checkpoint(save_latest=)",
        "0.3.8", ENGINE),
    # scipy's git history.
    Api("scipy", "scipy.stats.bootstrap(method=)", "1.7.0", "eval/intervals.py"),
    Api("scipy", "scipy.stats.bootstrap(vectorized=)", "1.7.0", "eval/intervals.py"),
    Api("scipy", "scipy.stats.DegenerateDataWarning", "1.9.0", "eval/intervals.py"),
    Api("numpy", "numpy.random.default_rng", "1.17.0", "eval/intervals.py"),
    # pydantic v2's own API (in the v2.0 tag).
    Api("pydantic", "pydantic.model_validator", "2.0", "config/experiment.py"),
    Api("pydantic", "pydantic.AfterValidator", "2.0", "algorithms/registry.py"),
    Api("pydantic", "pydantic.BeforeValidator", "2.0", "algorithms/hargo_params.py"),
    Api("pydantic", "pydantic.Field(allow_inf_nan=)", "2.0", "algorithms/hargo_params.py"),
    # click's git history.
    Api("click", "click.Group.command_class", "8.0.0", "cli/support.py"),
    Api("click", "click.Group.group_class", "8.0.0", "cli/support.py"),
    Api("click", "click.FloatRange(min_open=)", "8.0.0", "cli/handoff.py"),
    # submitit's git history.
    Api("submitit", "submitit.helpers.TorchDistributedEnvironment", "1.4.5", DIST),
    Api("submitit", "submitit.LocalExecutor(python=)", "1.5.0", "slurm/executor.py"),
    Api("submitit", "submitit.helpers.Checkpointable", "1.0.0", "slurm/entrypoints.py"),
    # peft's git history.
    Api("peft", "peft.get_peft_model", "0.0.1", MODELS),
    Api("peft", "peft.tuners.lora.LoraModel.merge_and_unload", "0.3.0", MODELS),
    # sentence-transformers' git history.
    Api("sentence-transformers", "sentence_transformers.SentenceTransformer(local_files_only=)",
        "3.0.0", "tasks/similarity.py"),
    Api("sentence-transformers",
        "sentence_transformers.SentenceTransformer.encode(normalize_embeddings=)", "1.0.0",
        "tasks/similarity.py"),
    # datasets' git history.
    Api("datasets", "datasets.Dataset.to_list", "2.11.0", "tasks/data.py"),
)

GUARDED: tuple[Api, ...] = (
    # The outputs' `past_key_values` became `cache` in 5.24 (modeling_outputs.py of the 5.23.0
    # and 5.24.0 wheels), and so did generate's keyword. `_shared_prefill` passes the cache
    # under the name the output gave it (the vLLM extras pin transformers below 5.20).
    Api("transformers", "transformers.modeling_outputs.CausalLMOutputWithPast.cache", "5.24",
        GENERATE),
)

MISSING = object()


def _floors() -> dict[str, Version]:
    """The `>=` bound of each dependency in pyproject.toml, by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors: dict[str, Version] = {}
    for line in project["dependencies"]:
        requirement = Requirement(line)
        lows = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        if lows:
            floors[canonicalize_name(requirement.name)] = max(lows)
    return floors


FLOORS = _floors()


def _floor(package: str) -> Version | None:
    return FLOORS.get(canonicalize_name(package))


def _resolve(dotted: str) -> Any:
    """The object a dotted name names, attribute by attribute from the top package, importing
    a submodule where no attribute has the name. MISSING when neither exists."""
    parts = dotted.split(".")
    found: Any = importlib.import_module(parts[0])
    for depth, name in enumerate(parts[1:], start=2):
        step = getattr(found, name, MISSING)
        if step is MISSING and inspect.ismodule(found):
            try:
                step = importlib.import_module(".".join(parts[:depth]))
            except ImportError:
                return MISSING
        if step is MISSING:
            return MISSING
        found = step
    return found


def _ids(rows: tuple[Api, ...]) -> list[str]:
    return [f"{row.api}@{row.file}" for row in rows]


@pytest.mark.parametrize("row", CALLED, ids=_ids(CALLED))
def test_floor_covers_the_api(row: Api) -> None:
    floor = _floor(row.package)
    assert floor is not None, f"{row.api} needs {row.package}>={row.since}: no floor set"
    assert floor >= Version(row.since), (
        f"{row.api} needs {row.package}>={row.since}, pyproject.toml says >={floor}")


@pytest.mark.parametrize("row", GUARDED, ids=_ids(GUARDED))
def test_guarded_api_is_above_its_floor(row: Api) -> None:
    """Once the floor reaches a guarded API, the row belongs in CALLED (and its fallback can
    go)."""
    floor = _floor(row.package)
    assert floor is None or floor < Version(row.since), (
        f"{row.package}>={floor} already has {row.api} ({row.since}): move it to CALLED")


@pytest.mark.parametrize("row", CALLED + GUARDED, ids=_ids(CALLED + GUARDED))
def test_file_still_uses_the_api(row: Api) -> None:
    match = KEYWORD.fullmatch(row.api)
    # a keyword as `keyword=` or as a dict key, "keyword"; an attribute as its last name
    pattern = (rf"\b{match['keyword']}\s*=|[\"']{match['keyword']}[\"']" if match
               else rf"\b{row.api.rsplit('.', 1)[-1]}\b")
    text = (ROOT / "hargo_hpc" / row.file).read_text()
    assert re.search(pattern, text), f"hargo_hpc/{row.file} no longer uses {row.api}"


@pytest.mark.parametrize("row", CALLED + GUARDED, ids=_ids(CALLED + GUARDED))
def test_installed_package_has_the_api(row: Api) -> None:
    """Every called API, and a guarded one where the installed release is past its `since`
    (below it, the guard's fallback runs: the suite tests that path then)."""
    installed = importlib.metadata.version(row.package)
    if row in GUARDED and Version(installed) < Version(row.since):
        return
    match = KEYWORD.fullmatch(row.api)
    target = _resolve(match["function"] if match else row.api)
    assert target is not MISSING, f"{row.api}: not in the installed {row.package} {installed}"
    if match is None:
        return
    parameters = inspect.signature(target).parameters
    if match["keyword"] in parameters:
        return
    # A function taking **kwargs (from_pretrained, from_config) accepts any keyword: its
    # signature cannot tell whether it reads this one, so only the floor test speaks for it.
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()), (
        f"{row.api}: the installed {row.package} {installed} takes no {match['keyword']}=")


@pytest.mark.parametrize("package", sorted({row.package for row in CALLED + GUARDED}))
def test_installed_version_meets_the_floor(package: str) -> None:
    floor = _floor(package)
    installed = Version(importlib.metadata.version(package))
    assert floor is None or installed >= floor, (
        f"installed {package} {installed} is below its floor {floor}")
