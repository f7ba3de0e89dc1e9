"""`rollout.backend = "vllm"` where it cannot run: one line naming the setting and the way
out, before any step. No vLLM needed: its absence is what is tested (the module hidden)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hargo_hpc.config import ConfigError, validate_config
from hargo_hpc.train import loop
from hargo_hpc.train.run import TrainError


def config(tmp_path: Path, **rollout: object) -> object:
    return validate_config({
        "run": {"name": "v", "dir": str(tmp_path), "seed": 0}, "model": {"path": "tiny"},
        "data": {"tasks": [{"name": "data_race_c", "max_items": 8}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 4,
                    "backend": "vllm", **rollout},
        "training": {"steps": 1, "micro_batch_size": 2}})


def test_without_vllm_the_run_stops_at_start_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(TrainError) as caught:
        loop.train(config(tmp_path), log=lambda _: None, progress=False)
    message = str(caught.value)
    assert message.startswith('rollout.backend = "vllm": ') and "\n" not in message
    assert "pip install 'hargo-hpc[vllm]'" in message
    assert not (tmp_path / "v" / "metrics.jsonl").exists()


@pytest.mark.parametrize(("field", "value"), [("backend", "sglang"),
                                              ("vllm_gpu_memory_utilization", 1.5),
                                              ("vllm_kv_cache_gib", 0),
                                              ("importance_sampling_cap", 0.5)])
def test_bad_vllm_settings_are_refused_with_their_names(
        tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"rollout.{field}"):
        config(tmp_path, **{field: value})
