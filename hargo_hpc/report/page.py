"""The report as one self-contained HTML page: the method table (each cell the value, its 95 %
interval and n, like report.md), the changes against the baseline, the methods against the
reference method, the column legend, the notes and every plot embedded as a base64
`data:image/png` URI. No external CSS, scripts or fonts:
the file can be mailed or opened from a shared filesystem as it is. Every text from a run
(names, paths, notes) is escaped."""

from __future__ import annotations

import base64
import datetime
import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from hargo_hpc.report.table import Grid, MethodTable, change_grid, value_grid

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; }
figcaption, .meta { color: #555; font-size: 0.9em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def grid_html(grid: Grid) -> str:
    """A table of the report (`report.table.Grid`) as an HTML <table>: the same cells as its
    markdown ("—" for a missing value, <strong> where markdown is bold); each header carries
    its column's description as a tooltip, each run its directory."""
    head = "".join(f'<th title="{_e(c.description)}">{_e(c.header)}</th>'
                   for c in grid.columns)
    lines = [f"<table>\n<tr><th>method</th><th>seed</th><th>run</th>{head}</tr>"]
    for line in grid.lines:
        cells = "".join(f'<td class="num">{_strong(_e(c.text), c.strong)}</td>'
                        for c in line.cells)
        lines.append(f'<tr><td>{_e(line.method)}</td><td class="num">{_e(line.seed)}</td>'
                     f'<td title="{_e(line.path)}">{_e(line.run)}</td>{cells}</tr>')
    lines.append("</table>")
    return "\n".join(lines)


def _strong(text: str, strong: bool) -> str:
    return f"<strong>{text}</strong>" if strong else text


def table_html(table: MethodTable) -> str:
    """The method table as an HTML <table>: each cell the value, with its interval and n
    where it has one (`report.table.value_grid`)."""
    return grid_html(value_grid(table))


def section_html(heading: str, grid: Grid | None) -> str:
    """`grid` under an <h2> `heading` and its sentence (markdown bold as <strong>); '' for
    no grid."""
    if grid is None:
        return ""
    intro = _e(grid.intro).replace("**bold**", "<strong>bold</strong>")
    return f"<h2>{_e(heading)}</h2>\n<p>{intro}</p>\n{grid_html(grid)}\n"


def image_html(png: Path, caption: str = "") -> str:
    """`png` as an <img> with its bytes inline, in a <figure> with `caption`."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{_e(png.name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(png.name)}: {_e(caption)}</figcaption></figure>")


def render_page(
    table: MethodTable, images: Sequence[Path], *, title: str = "hargo report",
    captions: Mapping[str, str] | None = None, when: datetime.datetime | None = None,
    sections: Sequence[tuple[str, Grid | None]] = (),
) -> str:
    """The whole page: `title`, the date (`when`, default now), the table, the legend of the
    columns, the notes, the changes against the baseline, each of `sections` ((heading,
    grid): the methods against the reference), then each PNG of `images` embedded,
    captioned by `captions[name]`."""
    when = when or datetime.datetime.now().astimezone()
    captions = captions or {}
    legend = "".join(f"<dt>{_e(c.header)}</dt><dd>{_e(c.description)}</dd>"
                     for c in table.columns)
    notes = "".join(f"<li>{_e(note)}</li>" for note in table.notes)
    figures = "\n".join(image_html(png, captions.get(png.name, "")) for png in images)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{_e(title)}</h1>\n"
        f'<p class="meta">{_e(when.strftime("%Y-%m-%d %H:%M %Z").strip())}, '
        f"{len(table.rows)} run{'s' if len(table.rows) != 1 else ''}</p>\n"
        f"<h2>Method table</h2>\n{table_html(table)}\n"
        f"<h3>Columns</h3>\n<dl>{legend}</dl>\n"
        + (f"<h3>Notes</h3>\n<ul>{notes}</ul>\n" if notes else "")
        + section_html("Change against the baseline", change_grid(table))
        + "".join(section_html(heading, grid) for heading, grid in sections)
        + (f"<h2>Training curves</h2>\n{figures}\n" if figures else "")
        + "</body>\n</html>\n"
    )
