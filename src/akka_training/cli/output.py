"""Printing: aligned tables and detail rows for people, JSON and YAML for programs.

Tables and detail rows are rendered by rich, imported when one is printed (the CLI's start time
matters)."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from akka_training.cli.state import state

# Spaces between two columns of a table (and between a detail's key and its value).
COLUMN_GAP = 3
# The width a table may take when stdout is not a terminal: no row is ever wrapped.
PIPE_WIDTH = 1_000_000

T = TypeVar("T")


def emit(data: T, text: Callable[[T], object]) -> None:
    """Print `data` (an answer of the trainer: a model of `akka_training.api`, or a list of
    them) as the chosen output format; `text` prints it for people."""
    fmt = state.output
    if fmt == "json":
        # A non-finite figure (a NaN loss) as the service sent it, "NaN": JSON has no NaN.
        from akka_training.core.figures import json_safe

        sys.stdout.write(json.dumps(json_safe(plain(data)), indent=2, default=str) + "\n")
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=False))
    else:
        text(data)


def say(text: str, quiet: str | None = None) -> None:
    """A confirmation for people; with -q only `quiet` (the id of what changed), or nothing."""
    if not state.quiet:
        print(text)
    elif quiet is not None:
        print(quiet)


def confirm(question: str) -> None:
    """Ask before something that cannot be undone, on a terminal only; --force answers yes.
    A no ends the command with ``Aborted.`` and exit status 1."""
    if state.force or not sys.stdin.isatty():
        return
    import typer

    typer.confirm(question, abort=True)


def plain(data: Any) -> Any:
    """What ``-o json|yaml`` prints: each model as the service sent it
    (``model_dump(mode="json", by_alias=True)``), inside lists and mappings too."""
    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json", by_alias=True)
    if isinstance(data, list | tuple):
        return [plain(item) for item in data]
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    return data


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> None:
    """Print `rows` under `headers`: left-aligned columns three spaces apart, no borders."""
    _grid([list(headers), *([cell(v) for v in row] for row in rows)], indent, header=True)


def details(rows: Sequence[tuple[str, Any]], indent: str = "") -> None:
    """Print `(key, value)` rows: keys in one column, values three spaces after the longest
    key; a value of several lines continues in the value column."""
    if not rows:
        return
    _grid([[key, cell(value)] for key, value in rows], indent, header=False)


def section(title: str) -> None:
    print(f"{title}:")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):  # as JSON readers spell it, and as -o json prints it
            return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def ago(then: datetime | None) -> str:
    if then is None:
        return "-"
    seconds = max(0, (datetime.now(UTC) - then).total_seconds())
    return duration(seconds) + " ago"


def when(moment: datetime | None, sep: str = " ") -> str:
    """A timestamp to the second, as tables show it: ``2026-03-01 12:00:05``."""
    return "-" if moment is None else moment.isoformat(sep)[:19]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def gib(value: float | None) -> str:
    return "-" if value is None else f"{value:g} GiB"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _grid(grid: list[list[str]], indent: str, header: bool) -> None:
    """Print the rows of `grid` (the first one the headers, bold on a terminal, when `header`)
    as columns. rich renders them, unless `plain_lines` can write the very same lines: then
    they come some 0.07 s sooner (rich's import and its layout of each cell)."""
    terminal = sys.stdout.isatty()
    styled = terminal and _styled()
    lines = None
    if not terminal:
        lines = plain_lines(grid)
    elif sys.platform != "win32" and "IPython" not in sys.modules and not _dumb_terminal():
        # What rich renders on such a terminal: the headers in bold (escape codes) when
        # styled, every cell as written; elsewhere (Windows, Jupyter, TERM=dumb) rich
        # decides alone.
        width = shutil.get_terminal_size().columns - len(indent)
        lines = plain_lines(grid, width, bold_header=header and styled)
    if lines is None:
        _print(rich_grid(grid, header), indent)
    else:
        _write(lines, indent)


def plain_lines(
    grid: list[list[str]], width: int = PIPE_WIDTH, bold_header: bool = False
) -> list[str] | None:
    """The lines rich renders `grid` as (left-aligned columns `COLUMN_GAP` spaces apart, each
    row on one line), when each cell is printable ASCII on one line (one column a character,
    no control codes: nothing rich measures or strips otherwise) and the rows fit in `width`;
    else None. `bold_header`: the first row in bold, as rich writes it on a terminal."""
    columns = len(grid[0])
    if any(len(row) != columns for row in grid):
        return None
    if not all(text.isascii() and text.isprintable() for row in grid for text in row):
        return None
    widths = [max(len(row[i]) for row in grid) for i in range(columns)]
    if sum(widths) + COLUMN_GAP * (columns - 1) > width:
        return None
    gap = " " * COLUMN_GAP
    lines = [gap.join(text.ljust(w) for text, w in zip(row, widths, strict=True)) for row in grid]
    if bold_header:
        if not all(grid[0]):
            return None
        # rich styles each header cell (padded to its column) and each gap apart.
        bold = [f"{_BOLD}{text.ljust(w)}{_RESET}" for text, w in zip(grid[0], widths, strict=True)]
        lines[0] = f"{_BOLD}{gap}{_RESET}".join(bold)
    return lines


_BOLD = "\x1b[1m"
_RESET = "\x1b[0m"


def _styled() -> bool:
    """Whether a terminal gets styling: unless colour is off (``--no-color``, ``NO_COLOR``)."""
    return not (state.no_color or os.environ.get("NO_COLOR"))


def _dumb_terminal() -> bool:
    # rich writes no styling at all to these (its `Console.is_dumb_terminal`).
    return os.environ.get("TERM", "").lower() in ("dumb", "unknown")


def rich_grid(grid: list[list[str]], header: bool) -> Any:
    """`grid` as a rich table without borders (`header`: its first row as bold headers)."""
    from rich.table import Table

    if header:
        rendered = Table(
            box=None,
            show_edge=False,
            pad_edge=False,
            padding=(0, COLUMN_GAP, 0, 0),
            header_style="bold",
        )
        for title in grid[0]:
            rendered.add_column(_text(title), justify="left")
        rows = grid[1:]
    else:
        rendered = Table.grid(padding=(0, COLUMN_GAP, 0, 0))
        for _ in grid[0]:
            rendered.add_column(justify="left")
        rows = grid
    for row in rows:
        rendered.add_row(*(_text(text) for text in row))
    return rendered


def _text(value: str) -> Any:
    # A Text is printed as it is: no markup (`[1, 2)` stays), no emoji codes, no highlighting.
    from rich.text import Text

    return Text(value)


def _print(renderable: Any, indent: str) -> None:
    """Render `renderable` for this stdout and print it line by line after `indent`.

    A terminal gets its own width and, unless colour is off (``--no-color``, ``NO_COLOR``),
    styling; anything else (a pipe, a file) gets plain text as wide as the rows are, so that a
    program reading the output finds each row on one line."""
    from rich.console import Console

    terminal = sys.stdout.isatty()
    styled = terminal and _styled()
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=shutil.get_terminal_size().columns - len(indent) if terminal else PIPE_WIDTH,
        force_terminal=styled,
        no_color=not styled,
        color_system="auto" if styled else None,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(renderable)
    _write(buffer.getvalue().splitlines(), indent)


def _write(lines: Sequence[str], indent: str) -> None:
    for line in lines:
        sys.stdout.write(f"{indent}{line}".rstrip() + "\n")
