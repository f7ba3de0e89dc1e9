"""`hargo report RUN_DIR... [-o DIR] [--json]`: the method table of several runs, their
training curves, and one HTML page of both (docs/report.md).

Writes into DIR (default ./report): report.md, report.json, one PNG per plot that has data
(hargo_hpc.report.plots) and report.html; each file is put in place atomically, and a plot
left from an earlier report that has no data now is removed. Bad input is one line,
`error: ...`, exit 2.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import click

from hargo_hpc.cli.support import UsageFailure, command
from hargo_hpc.files import unlink_quietly, write_atomic
from hargo_hpc.report.table import (
    MethodTable,
    legend_markdown,
    load_runs,
    method_table,
    to_dict,
    to_json,
    to_markdown,
)

MARKDOWN, JSON, PAGE = "report.md", "report.json", "report.html"
TITLE = "hargo report"


def markdown_file(table: MethodTable, images: list[Path], when: datetime.datetime,
                  against: str = "") -> str:
    """report.md: title and date, the table with its notes, the methods against the
    reference method, the column legend, the plots."""
    plots = "".join(f"![{p.name}]({p.name})\n" for p in images)
    return (f"# {TITLE}\n\n{when:%Y-%m-%d %H:%M %Z}, {len(table.rows)} runs\n\n"
            f"{to_markdown(table)}\n" + (f"{against}\n" if against else "")
            + f"## Columns\n\n{legend_markdown(table.columns)}"
            + (f"\n## Plots\n\n{plots}" if plots else ""))


def write_report(run_dirs: list[str], out: Path, against: str | None = None
                 ) -> tuple[MethodTable, list[Path]]:
    """Read the runs, write every file of the report into `out`; return the table (its notes
    include the plots' skips; its pooled rows each method's change over its seeds) and the
    files written."""
    from hargo_hpc.report.differences import against_grid, differences, differences_markdown
    from hargo_hpc.report.page import render_page
    from hargo_hpc.report.plots import DESCRIPTIONS, PLOT_FILES, plot_notes, write_plots
    from hargo_hpc.report.seeds import pooled_vs_baseline, pooled_vs_reference

    runs = load_runs(run_dirs)
    table = method_table(runs)
    table = table._replace(notes=[*table.notes, *plot_notes(runs)],
                           pooled=tuple(pooled_vs_baseline(runs)))
    reference, entries = differences(runs, against)
    pooled = pooled_vs_reference(runs, reference)
    paired = differences_markdown(reference, entries, pooled)
    sections = [(f"Against {reference}", against_grid(reference, entries, pooled))]
    when = datetime.datetime.now().astimezone()
    try:
        out.mkdir(parents=True, exist_ok=True)
        images = write_plots(runs, out)
        for stale in set(PLOT_FILES) - {p.name for p in images}:
            unlink_quietly(out / stale)
        write_atomic(out / MARKDOWN, markdown_file(table, images, when, paired))
        write_atomic(out / JSON, to_json(table))
        write_atomic(out / PAGE, render_page(table, images, title=TITLE, captions=DESCRIPTIONS,
                                             when=when, sections=sections))
    except OSError as err:
        raise UsageFailure(f"{out}: cannot write the report: {err}") from None
    return table, [out / MARKDOWN, out / JSON, *images, out / PAGE]


@command("report")
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True)
@click.option("-o", "--output", "output", default="report", show_default=True,
              type=click.Path(file_okay=False),
              help="the directory to write report.md, report.json, *.png and report.html into")
@click.option("--json", "as_json", is_flag=True,
              help="print the table as one JSON object (with the files written) instead of "
                   "markdown")
@click.option("--against", default=None, metavar="METHOD",
              help="compare every run with this method's run of the same seed, paired on "
                   "the same examples (default: grpo, when the runs hold it and another "
                   "method)")
def report(run_dirs: tuple[str, ...], output: str, as_json: bool, against: str | None
           ) -> None:
    """The method table of the runs in RUN_DIR... and their training curves.

    A RUN_DIR is a run directory (config.toml, metrics.jsonl, eval/metrics.json) or a sweep's
    submission directory, which stands for its runs. One row per run, sorted by method then
    seed; the evaluation columns come from eval/metrics.json (`hargo eval`):

    \b
      WinRate (%)            WinRate against the evaluation's baseline, ties count half
      C F1, C adj. F1 (%)    data race detection in C/C++: F1; F1 x share of parsed answers
      Fortran F1, adj. F1    the same for Fortran
      MLPerf EM, F1 (%)      MLPerf QA: exact match; token F1
      MLPerf >40 chars (%)   MLPerf QA: share of answers over 40 characters
      PLP similarity         PLP QA: mean embedding similarity to the reference (0-1)
      GEMM ok (%)            GEMM: share of scored kernels that compiled, verified and ran
      GEMM fast_0.5 (%)      GEMM: share of scored kernels ok and >= 0.5x the reference
      GEMM log2 speed        GEMM: mean log2 of an ok kernel's speed over the reference's
      GEMM reward            GEMM: mean reward of the scored kernels
      GEMM best GFLOPS       GEMM: the best median GFLOPS of an ok kernel (no interval)
      GEMM best of ref. (%)  GEMM: that speed as a share of the in-run reference DGEMM
      last reward            the mean reward of the last training step (metrics.jsonl)

    Each cell is the value, its 95 % interval over the evaluated examples (each example's
    samples together) and (n); a maximum is a plain value. A second table gives each run's
    paired change against its baseline, and a third each run against the `--against` method
    of its seed; bold where the interval excludes 0. A method with runs of several seeds gets
    a line pooled over them (from 3 seeds an interval over seeds and examples).
    A missing value is "—" (null in JSON); the notes below the table say which runs lack
    which task or evaluation. Plots (one line per run): reward, HARGO weight share and
    completion length per task over steps; GEMM GFLOPS over steps by SQD stage.
    """
    table, files = write_report(list(run_dirs), Path(output), against)
    if as_json:
        click.echo(json.dumps({**to_dict(table), "files": [str(f) for f in files]}, indent=1,
                              ensure_ascii=False))
        return
    click.echo(to_markdown(table), nl=False)
    click.echo("")
    for file in files:
        click.echo(f"wrote {file}")
