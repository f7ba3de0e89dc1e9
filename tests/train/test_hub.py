"""Models by hub id: `model.path = "owner/name"` is its snapshot in the HF cache (HF_HUB_CACHE
honoured), written into the runs' configs at submission; absent and offline, one line naming
the id and how to fetch it. Offline throughout, against a hub-layout cache the tests build from
the tiny model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest

from hargo_hpc.config import load_config
from hargo_hpc.examples import example_jobs
from hargo_hpc.slurm.submission import plan_submission
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.model.hub import BUILT_IN, HubError, is_hub_id, resolve_model
from hargo_hpc.train.model.models import BUILT_IN_DIR, tiny_dir

REPO = "hpc-lab/tiny-coder"
COMMITS = {"main": "a" * 40, "v1": "b" * 40}


def hub_cache(root: Path) -> Path:
    """A cache laid out as huggingface_hub writes one: `models--hpc-lab--tiny-coder` with refs
    main and v1 and a snapshot each (the tiny model's files, v1's with a marker file)."""
    repo = root / f"models--{REPO.replace('/', '--')}"
    for ref, commit in COMMITS.items():
        snapshot = repo / "snapshots" / commit
        shutil.copytree(tiny_dir(root / "built"), snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        (snapshot / f"{ref}.marker").write_text(ref)
    return root


def tiny_toml() -> Path:
    return Path(str(next(job for job in example_jobs() if job.name == "tiny.toml")))


def test_a_hub_id_is_told_from_a_path_and_the_built_in_models(tmp_path: Path) -> None:
    assert is_hub_id("Qwen/Qwen2.5-Coder-0.5B-Instruct") and is_hub_id(REPO)
    assert tuple(BUILT_IN_DIR) == BUILT_IN  # the names hub ids are told from, each with its dir
    for not_an_id in (*BUILT_IN, "/models/qwen", "./qwen", "~/m/q", "model.gguf",
                      "a/b/c", "qwen"):
        assert not is_hub_id(not_an_id), not_an_id
    (tmp_path / "owner" / "name").mkdir(parents=True)
    here = os.getcwd()
    try:
        os.chdir(tmp_path)  # a relative directory of that shape is a directory, not an id
        assert not is_hub_id("owner/name")
        assert not is_hub_id("owner/missing")  # under a directory here: a missing path
    finally:
        os.chdir(here)


def test_a_cached_hub_id_resolves_to_its_snapshot_by_revision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = hub_cache(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    main = Path(resolve_model(REPO))
    assert main.name == COMMITS["main"] and (main / "main.marker").is_file()
    v1 = Path(resolve_model(REPO, "v1"))
    assert v1.name == COMMITS["v1"] and (v1 / "v1.marker").is_file()
    assert resolve_model("tiny") == "tiny"
    with pytest.raises(HubError) as absent:
        resolve_model("hpc-lab/not-here")
    said = str(absent.value)
    assert "\n" not in said and said.startswith("model.path hpc-lab/not-here: not in the Hugging")
    assert str(cache) in said and "`hf download hpc-lab/not-here`" in said
    with pytest.raises(HubError, match="cannot download"):  # offline: HF_HUB_OFFLINE=1
        resolve_model("hpc-lab/not-here", download=True)


def test_a_submission_writes_the_snapshot_into_the_runs_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = hub_cache(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    config = load_config(tiny_toml(), [f"run.dir={tmp_path / 'runs'}", f"model.path={REPO}",
                                       "model.revision=v1"])
    plan = plan_submission(config, "tiny.toml")
    (run,) = plan.runs
    assert Path(run.config.model.path).name == COMMITS["v1"]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(HubError, match=f"model.path {REPO}@v1: not in the Hugging Face cache"):
        plan_submission(config, "tiny.toml")


def hargo(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
    return subprocess.run([sys.executable, "-m", "hargo_hpc", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def test_hargo_train_and_eval_take_a_hub_id_from_the_cache_hf_hub_cache_names(
        tmp_path: Path) -> None:
    cache = hub_cache(tmp_path / "hub")
    overrides = [f"run.dir={tmp_path}", "run.name=hub", f"model.path={REPO}",
                 "training.steps=1", "training.save_every=0", "rollout.max_new_tokens=8",
                 'data.tasks=[{name="data_race_c"}]']
    done = hargo("train", str(tiny_toml()), *overrides, cache=cache)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "hub" / "export" / "model.safetensors").is_file()
    # the run's baseline is its starting model: the hub id, answered from the cache
    evaluated = hargo("eval", "model", str(tmp_path / "hub"), "-n", "2", cache=cache)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert (tmp_path / "hub" / "eval" / "metrics.json").is_file()
    checked = hargo("config", "check", str(tiny_toml()), *overrides, cache=cache)
    assert checked.returncode == 0 and "model: " in checked.stdout, checked.stderr
    absent = hargo("train", str(tiny_toml()), overrides[0], "run.name=absent",
                   "model.path=hpc-lab/absent", cache=cache)
    assert absent.returncode == 2
    (line,) = [x for x in absent.stderr.splitlines() if x.startswith("error:")]
    assert "model.path hpc-lab/absent: not in the Hugging Face cache" in line
    assert str(cache) in line
