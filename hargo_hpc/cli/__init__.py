"""The `hargo` command line: one module per command group, each parsing arguments, calling
the library and formatting its output; this module only mounts them.
"""

from __future__ import annotations

import sys

import click

from hargo_hpc import __version__
from hargo_hpc.cli.bench import bench
from hargo_hpc.cli.config import config
from hargo_hpc.cli.data import data
from hargo_hpc.cli.doctor import doctor
from hargo_hpc.cli.eval import eval_group
from hargo_hpc.cli.handoff import handoff, worker
from hargo_hpc.cli.init import init
from hargo_hpc.cli.report import report
from hargo_hpc.cli.sqd import sqd
from hargo_hpc.cli.submit import render, submit
from hargo_hpc.cli.support import group
from hargo_hpc.cli.train import sft, train
from hargo_hpc.cli.watch import cancel, logs, status


@group()
@click.version_option(__version__, "-V", "--version", prog_name="hargo")
def main() -> None:
    """hargo-hpc: RL post-training of LLMs on HPC tasks, on Slurm.

    Write an experiment file (`hargo init DIR` copies the examples into DIR/jobs/), check it
    with `hargo config validate`, then run it.
    """


for each in (submit, render, status, logs, cancel, train, sft, sqd, config, bench, worker,
                handoff, init, data, eval_group, report, doctor):
    main.add_command(each)


def run() -> None:
    """The `hargo` program: `main`, ended by `distributed.end_process` where a command ran as a
    rank of a process group (train, sft), so that the group's threads cannot abort it."""
    try:
        main()
    except SystemExit as done:
        if "torch.distributed" in sys.modules:  # only a command that loaded torch
            from hargo_hpc.train.backend.distributed import end_process

            end_process(done.code)
        raise
