"""Several ranks through submitit on the local Slurm cluster: an executor with
`ntasks_per_node` = 2 starts the entry point once per rank (`srun`), each rank's trainer reads
its rank and the rendezvous from Slurm's variables (train.backend.distributed), and two HARGO
steps under ZeRO-2 end with the same parameters as one process training the same global batch
(completions from `GenerationDouble`, as in test_two_rank_train)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from numerics import assert_same_adam_update
from safetensors.torch import load_file

from hargo_hpc.config import JobResources
from hargo_hpc.slurm.entrypoints import HargoCommand
from hargo_hpc.slurm.executor import make_executor
from hargo_hpc.slurm.options import JOB_ENVIRONMENT
from hargo_hpc.train import loop
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.model.models import tiny_dir

from ._two_rank_train import GenerationDouble, config

torch.set_num_threads(1)
LR, STEPS = 1e-3, 2


@pytest.mark.slurm
def test_two_ranks_through_submitit_train_like_one_process(
        slurm_cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        repo_root: Path, summary_line: Any) -> None:
    monkeypatch.setattr(loop, "HFGenerateBackend", GenerationDouble)
    single = loop.train(config(tmp_path, "one", 2), progress=False, log=lambda _: None)
    assert single.export is not None
    want = load_file(single.export / "model.safetensors")

    for name in STANDARD:  # the ranks take theirs from Slurm, not from this process
        monkeypatch.delenv(name, raising=False)
    resources = JobResources(partition="cpu", ntasks_per_node=2, cpus_per_task=1, mem="2G",
                             time="00:10:00")
    executor = make_executor(resources, tmp_path / "submitit", backend="slurm",
                             job_name="two-ranks", setup=list(JOB_ENVIRONMENT),
                             python=sys.executable)
    script = Path(__file__).with_name("_two_rank_train.py")
    job = executor.submit(HargoCommand([sys.executable, str(script), str(tmp_path), "z2"],
                                       env={"PYTHONPATH": str(repo_root)}))
    # one entry point per rank, each command exited 0 (submitit waits through sacct)
    assert job.results() == [0, 0]
    summary_line(f"two ranks through submitit ({job.job_id}): 2 HARGO steps under ZeRO-2")

    ranks = [torch.load(tmp_path / f"z2_rank{r}.pt") for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys() == want.keys()
    for name, value in ranks[0].items():
        assert torch.equal(value, ranks[1][name]), name
    before = load_file(tiny_dir() / "model.safetensors")
    assert_same_adam_update(ranks[0], want, before, LR, STEPS)
    log = Path(job.paths.stdout).read_text() if Path(job.paths.stdout).is_file() else ""
    assert "hargo: running" in log, log[-2000:]
