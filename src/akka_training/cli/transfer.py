"""The progress bar of an upload or a download: bytes, rate and time left on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from akka_training.cli.state import state

# A transfer smaller than this ends before a bar would help.
PROGRESS_MIN_BYTES = 4 * 1024 * 1024


@contextmanager
def transfer_bar(size: int | None, verb: str) -> Iterator[Callable[[int], None] | None]:
    """A bar for people, labelled `verb` ("uploading", "downloading"): only on a terminal,
    without -q, in text output, and for transfers big enough to take a moment (or of unknown
    size). Yields the function that advances it by a number of bytes, or None without a bar."""
    show = (
        state.output == "text"
        and not state.quiet
        and sys.stderr.isatty()
        and (size is None or size >= PROGRESS_MIN_BYTES)
    )
    if not show:
        yield None
        return
    # Imported here: rich's progress machinery is only worth loading for a long transfer.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True, no_color=state.no_color)
    columns = [
        TextColumn(verb),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(verb, total=size)
        yield lambda n: bar.advance(task, n)
