"""`hargo doctor gpu`: a GPU node's first check, one line each (the checks: hargo_hpc.doctor)."""

from __future__ import annotations

import click

from hargo_hpc.cli.support import CONTEXT, group


@group("doctor")
def doctor() -> None:
    """Check that this machine can run the pipeline, in the Python you run it with."""


@doctor.command("gpu", context_settings=CONTEXT)
@click.option("--cpu", is_flag=True,
              help="run the same checks on the CPU (gloo, fp32), skipping the CUDA ones: "
                   "keeps the path working on a machine without a GPU")
def gpu(cpu: bool) -> None:
    """CUDA and the driver, NCCL, bf16, where this rank lands, one RL step under ZeRO-2 and
    ZeRO-3, `hargo eval` of its export, an all-reduce across the GPUs; one line each.

    Needs nothing but a Python that imports hargo-hpc: no root, no network, no new
    environment. Run it on a GPU node (`srun -p gpu --gres=gpu:2 -c 8 hargo doctor gpu`), or
    in every task of a step (`srun -n 2 ...`: then the ranks and the all-reduce are checked
    across the tasks). Exits 1 when any check failed.
    """
    from hargo_hpc.doctor import doctor_gpu

    if not doctor_gpu(cpu=cpu, out=click.echo):
        raise SystemExit(1)
