"""Command line of the trainer: `hargo train` and `hargo sft`.

Registered by `hargo_hpc.cli` (`main.add_command(train)`, `main.add_command(sft)`). Thin: load
the config, call `train.loop`, print one progress line per step and where the outputs are. The
ML stack is imported only when a command runs (`hargo --help` stays light).

Exit codes: 0 done; 2 bad input (`error: <one line>`, nothing overwritten); 75 (EX_TEMPFAIL)
stopped by SIGUSR1/SIGUSR2/SIGTERM after writing a checkpoint: run the same command with
`--resume` (a batch script or submitit requeues on it).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from hargo_hpc.cli.support import command
from hargo_hpc.config import ExperimentConfig, load_config
from hargo_hpc.train import early_stop


def _config(job: str, overrides: tuple[str, ...]) -> ExperimentConfig:
    config = load_config(job, list(overrides))
    if config.sweep:  # the sweep is `hargo submit`'s: one run here, the file's own values
        click.echo(f"note: {job}: [sweep] ignored ({', '.join(config.sweep)}); this trains "
                   "the file's own values (hargo submit trains every point)", err=True)
        config = config.model_copy(update={"sweep": {}})
    return config


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def progress_line(record: dict[str, Any], steps: int) -> str:
    """`step 3/10  reward 0.412±0.310  kl 0.0012  loss -0.0132  len 21.4  1.23 s`."""
    return (f"step {record['step']}/{steps}  reward {_fmt(record.get('reward'))}"
            f"±{_fmt(record.get('reward_std'))}  kl {_fmt(record.get('kl'), '.4f')}  "
            f"loss {_fmt(record.get('loss'), '.4f')}  "
            f"len {_fmt(record.get('completions/mean_length'), '.1f')}  "
            f"{_fmt(record.get('timing_s/step'), '.2f')} s")


def _log(text: str) -> None:
    click.echo(text, err=True)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[Callable[[str], None]]:
    """For the `with`: what the ML libraries print on stdout (DeepSpeed's logger, which binds
    stdout when first imported) goes to stderr, and their progress bars are off; the command's
    own lines go to the real stdout through the function yielded."""
    real: TextIO = sys.stdout
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with contextlib.redirect_stdout(sys.stderr):
        yield lambda line: click.echo(line, file=real)


@command("train")
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--resume", is_flag=True,
              help="continue the run in the run directory from its latest checkpoint")
def train(job: str, overrides: tuple[str, ...], resume: bool) -> None:
    """Train JOB (jobs/*.toml) after OVERRIDES (section.key=value ...).

    Writes <run.dir>/<run.name>/: metrics.jsonl, rollouts/, checkpoints/, export/ (an HF
    directory). Exit 75 after SIGUSR1/SIGUSR2/SIGTERM: a checkpoint is written, rerun with
    --resume.
    """
    early_stop.catch()  # a stop while torch loads: remembered (train.early_stop)
    cfg = _config(job, overrides)
    from hargo_hpc.train import loop
    from hargo_hpc.train.deadline import REASON as DEADLINE_REASON

    steps, every = cfg.training.steps, cfg.training.log_every
    with _quiet_stdout() as echo:
        def show(record: dict[str, Any]) -> None:
            if record["step"] % every == 0 or record["step"] == steps:
                echo(progress_line(record, steps))

        result = loop.train(cfg, resume=resume, log=_log, on_step=show,
                            progress=sys.stderr.isatty())
    if result.already_finished:
        click.echo(f"run {result.run_dir} finished already at step {result.step}")
    click.echo(f"metrics: {result.metrics}")
    click.echo(f"checkpoint: {result.checkpoint}")
    if result.interrupted:
        again = " ".join(["hargo", "train", job, *overrides, "--resume"])
        click.echo(f"stopped at step {result.step}; continue with: {again}")
        sys.exit(loop.EXIT_DEADLINE if result.stopped_by == DEADLINE_REASON
                 else loop.EXIT_REQUEUE)
    click.echo(f"export: {result.export}")


@command("sft")
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--resume", is_flag=True,
              help="continue a stopped SFT from its checkpoint (<run dir>/sft/checkpoints/); a "
              "finished one ends at once; a fresh directory starts at step 0")
def sft(job: str, overrides: tuple[str, ...], resume: bool) -> None:
    """Supervised fine-tuning of JOB's model on its tasks' reference answers (GEMM: the SFT
    corpus) for sft.steps steps at sft.lr, into <run dir>/sft/ (metrics.jsonl, export/).
    Start RL from it with model.path=<run dir>/sft/export. Exit 75 after SIGUSR1/SIGUSR2/
    SIGTERM: a checkpoint is written, rerun with --resume."""
    early_stop.catch()  # a stop while torch loads: remembered (train.early_stop)
    cfg = _config(job, overrides)
    from hargo_hpc.train import loop

    steps = cfg.sft.steps
    with _quiet_stdout() as echo:
        result = loop.sft_run(cfg, resume=resume, log=_log, on_step=lambda r: echo(
            f"sft step {r['step']}/{steps}  loss {r['loss']:.4f}  "
            f"tokens {int(r['tokens'])}  {r['timing_s/step']:.2f} s"))
    if result.already_finished:
        click.echo(f"{result.run_dir}: SFT finished already; nothing to do")
        return
    click.echo(f"metrics: {result.metrics}")
    if result.interrupted:
        click.echo(f"stopped after step {result.step}: checkpoint {result.checkpoint}; "
                   f"continue with `hargo sft {job} {' '.join(overrides)} --resume`")
        sys.exit(loop.EXIT_REQUEUE)
    click.echo(f"export: {result.export}")
    from hargo_hpc.train.backend import distributed

    if cfg.sft.check_examples and distributed.detect().is_main:  # one rank checks
        _check_form(result.run_dir, cfg.sft.check_examples)


def _check_form(sft_dir: Path, examples: int) -> None:
    """The form figures after SFT (`eval.form_check`), one line per task and metric."""
    from hargo_hpc.eval.form_check import check_form, form_lines, stage_names
    from hargo_hpc.eval.plans import EvalError

    click.echo(f"form check: at most {examples} held-out examples per task, the SFT model "
               "against its start (sft.check_examples)")
    try:
        metrics = check_form(sft_dir, examples, log=_log)
    except EvalError as err:
        click.echo(f"form check skipped: {err}")
        return
    for line in form_lines(metrics):
        click.echo(line)
    for stage in stage_names(sft_dir):  # the stage prompts it was taught (sft.stage_prompts)
        try:
            staged = check_form(sft_dir, examples, stage=stage, log=_log)
        except EvalError as err:
            click.echo(f"form check under stage {stage} skipped: {err}")
            continue
        for line in form_lines(staged, stage):
            click.echo(line)
