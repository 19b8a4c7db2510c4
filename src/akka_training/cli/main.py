"""The `akka` entry point. The root help page is printed from `cli/roothelp.py` without importing
typer or rich (it is the command a shell and a newcomer run most); every other command line goes
to the typer app in `cli/root.py`."""

from __future__ import annotations

import os
import sys

from akka_training.cli import roothelp


def run() -> None:
    code = main(sys.argv[1:])
    if code:
        sys.exit(code)


def main(argv: list[str]) -> int:
    """Run one command line; the exit status (see `cli/exits.py`)."""
    if roothelp.asks_for_root_help(argv) and not os.environ.get(roothelp.COMPLETE_VAR):
        text = roothelp.page(roothelp.terminal_width())
        if text is not None:
            return _write(text)
    from akka_training.cli import root

    return root.main(argv)


def _write(text: str) -> int:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader of a pipe went away (`akka --help | head`): nothing more to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    run()
