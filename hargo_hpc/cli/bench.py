"""`hargo bench ...`: benchmark one completion, calibrate the machine's roof, or list the
sandbox's defences in force (doctor).

Registered by hargo_hpc/cli.py (`main.add_command(bench)`); logic lives in runner/calibrate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hargo_hpc.bench.calibrate import Calibration, calibrate
from hargo_hpc.bench.defences import DEFENCES, JUDGE_DEFENCES
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.bench.runner import BenchRequest, BenchResult, Problem, run_bench
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.cli.support import CONTEXT, UsageFailure, group

REPS_HELP = "exactly this many timed pairs (default: 5 to 63 within 150 ms of the kernel's calls)"


def _settings(size: int | None, reps: int | None, threads: int | None) -> BenchSettings:
    update = {k: v for k, v in (("size", size), ("repetitions", reps), ("threads", threads)) if v}
    if reps:  # exactly that many timed pairs
        update["timed_budget_ms"] = 0
    return BenchSettings(**update)


@group()
def bench() -> None:
    """Compile and time generated DGEMM kernels in a sandbox (see docs/bench.md)."""


@bench.command("run", context_settings=CONTEXT)
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--size", type=click.IntRange(1, 8192), help="M = N = K (default: settings, 256)")
@click.option("--reps", type=click.IntRange(1, 1000), help=REPS_HELP)
@click.option("--threads", type=click.IntRange(1, 1024), help="OpenMP threads")
@click.option("--forbid", multiple=True, help="SQD: forbid a technique (openmp, simd, ...)")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="compile cache directory")
@click.option("--json", "as_json", is_flag=True, help="print the full JSON record")
def run_cmd(
    file: str,
    size: int | None,
    reps: int | None,
    threads: int | None,
    forbid: tuple[str, ...],
    cache_dir: str | None,
    as_json: bool,
) -> None:
    """Benchmark one completion or C file (FILE, or - for stdin) and print its record."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageFailure(f"cannot read {file}: {err}") from None
    settings = _settings(size, reps, threads)
    req = BenchRequest(
        id=file, completion=text, problem=Problem.from_dict(None, settings), forbidden=list(forbid)
    )
    res = run_bench(req, settings, cache_dir=cache_dir)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=1))
        return
    g = res.gflops
    perf = f"  {g['median']:.2f} GFLOPS (min {g['min']:.2f}, max {g['max']:.2f})" if g else ""
    reward = "n/a" if res.reward is None else f"{res.reward:.2f}"
    click.echo(f"{res.status}{perf}  reward {reward}" + (f"  ({res.reason})" if res.reason else ""))
    if res.reference_gflops:
        click.echo(f"  reference {res.reference}: {res.reference_gflops['median']:.2f} GFLOPS on "
                   f"{res.reference_threads} of {res.threads} thread(s) in the same run, ratio "
                   f"{res.ratio:.3f}")  # fmt: skip
    overhead = res.call_overhead_us
    if overhead and overhead.get("reference") is not None:
        click.echo(f"  empty call {overhead['candidate']:.1f} us, the reference's "
                   f"{overhead['reference']:.1f} us (subtracted: reward.speed_ratio)")
    click.echo(
        f"  size {'x'.join(map(str, res.size))}, threads {res.threads}, "
        f"techniques [{', '.join(res.techniques)}], cache {'hit' if res.cache_hit else 'miss'}, "
        f"sandbox [{', '.join(res.sandbox)}]"
    )


@bench.command("calibrate", context_settings=CONTEXT)
@click.option("--size", type=click.IntRange(1, 8192), help="M = N = K (default: settings, 256)")
@click.option("--reps", type=click.IntRange(1, 1000), help=REPS_HELP)
@click.option("--threads", type=click.IntRange(1, 1024), help="OpenMP threads")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="compile cache directory")
def calibrate_cmd(
    size: int | None, reps: int | None, threads: int | None, cache_dir: str | None
) -> None:
    """Time the shipped kernels against the reference DGEMM (OpenBLAS); store the roof."""
    settings = _settings(size, reps, threads)
    done = calibrate(settings, Problem.from_dict(None, settings), cache_dir=cache_dir)
    for line in calibration_lines(done):
        click.echo(line)


def _cell(value: float | None, width: int, fmt: str = ".2f") -> str:
    return f"{value:{width}{fmt}}" if value is not None else f"{'-':>{width}}"


def calibration_lines(done: Calibration) -> list[str]:
    """The calibration table (GFLOPS, percent of the reference, reward of each row), then the
    node's peak bound and the stored roof."""
    lines = [f"{'kernel':<22} {'status':<14} {'GFLOPS med':>10} {'best':>8} {'% ref':>7} "
             f"{'reward':>8}"]  # fmt: skip
    for r in done.rows:
        pct = f"{r.percent_of_reference:6.1f}%" if r.percent_of_reference is not None else "-"
        lines.append(f"{r.kernel:<22} {r.status:<14} {_cell(r.median, 10)} {_cell(r.best, 8)} "
                     f"{pct:>7} {_cell(r.reward, 8)}")  # fmt: skip
    p = done.peak
    if p:
        lines.append(f"peak bound {p['bound']:.1f} GFLOPS ({p['margin']:g} x peak "
                     f"{p['gflops']:.1f} = {p['cpus']} CPU(s) x {p['ghz']:g} GHz x "
                     f"{p['flop_per_cycle']} FLOP/cycle, {p['isa']}; {p['clock_source']}): a run "
                     "above it is suspicious")  # fmt: skip
    lines.append(f"roof {done.roof:.2f} GFLOPS (the reference's best call; for reports, never "
                 f"for rewards) stored in {done.path}")  # fmt: skip
    return lines


@bench.command("doctor", context_settings=CONTEXT)
@click.option("--cache-dir", type=click.Path(file_okay=False), help="compile cache directory")
def doctor_cmd(cache_dir: str | None) -> None:
    """Judge the shipped naive kernel and print which sandbox defences were in force."""
    settings = BenchSettings(size=32, check_size=7, warmup=0, repetitions=1, timed_budget_ms=0)
    req = BenchRequest(id="doctor", completion=kernel_source("naive"),
                       problem=Problem.from_dict(None, settings))  # fmt: skip
    res = run_bench(req, settings, cache_dir=cache_dir)
    for line in doctor_lines(res):
        click.echo(line)
    if res.status != "ok":
        raise UsageFailure(f"the naive kernel did not run: {res.status}: {res.reason}")


def doctor_lines(res: BenchResult) -> list[str]:
    """Each defence with what it needs, then the record's in-force and unavailable lists."""
    lines = [f"{'defence':<20} needs"]
    lines += [f"{d.name:<20} {d.needs}" for d in DEFENCES]
    lines += [f"{d.name + ' (judge)':<20} {d.needs}" for d in JUDGE_DEFENCES]
    lines.append(f"in force: {', '.join(res.sandbox) or '-'}")
    lines += ["unavailable: " + why for why in res.sandbox_unavailable] or ["unavailable: -"]
    return lines
