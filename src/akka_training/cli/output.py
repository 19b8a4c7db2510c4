"""Printing: aligned tables and detail rows for people, JSON and YAML for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from akka_training.cli.state import state


def emit(data: Any, text: Callable[[Any], None]) -> None:
    """Print `data` as the chosen output format; `text` prints it for people."""
    fmt = state.output
    if fmt == "json":
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    elif fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        text(data)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> None:
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    line = "   ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()
    print(indent + line)
    for row in cells:
        print(indent + "   ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip())


def details(rows: Sequence[tuple[str, Any]], indent: str = "") -> None:
    if not rows:
        return
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        text = cell(value)
        lines = text.splitlines() or [""]
        print(f"{indent}{key.ljust(width)}   {lines[0]}")
        for extra in lines[1:]:
            print(f"{indent}{' ' * width}   {extra}")


def section(title: str) -> None:
    print(f"{title}:")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def ago(iso: str | None) -> str:
    if not iso:
        return "-"
    then = datetime.fromisoformat(iso)
    seconds = max(0, (datetime.now(UTC) - then).total_seconds())
    return duration(seconds) + " ago"


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
