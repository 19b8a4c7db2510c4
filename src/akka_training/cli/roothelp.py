"""The root help page (`akka`, `akka --help`), written without typer or rich.

`akka --help` is the command a newcomer runs first and a shell runs on every completion probe;
typer renders it with rich (about 0.14 s of CPU for the import and the layout alone). This module
holds what the page says (the root's help, the global flags, each group's one-line help, which
`cli/root.py` builds the typer app from) and draws the same page typer draws: the same lines,
panels and padding, without colour. Where the terminal is narrower than the page's widest line,
typer renders it (rich wraps lines; this module does not), so `page` answers None.
"""

from __future__ import annotations

import os

ROOT_HELP = "akka training: fine-tune LoRA adapters with SFT, DPO, GRPO and GSPO."

GLOBAL_HELP = """
Global flags (anywhere on the line): --context NAME (or AKKA_CONTEXT), -o text|json|yaml,
--trainer-url URL (or TRAINER_URL), --no-color (or NO_COLOR), --force (skip a confirmation),
-q (only the essential answer), --debug (or AKKA_DEBUG: a traceback with an unexpected error).
Exit status: 0 done, 1 failed or refused, 2 usage, 3 trainer unreachable, 4 not found,
5 credentials refused. Run and dataset ids take any unambiguous prefix of 3 characters or more.
"""

COMPLETION_HELP = "Print the shell completion script for bash, zsh or fish."

# Each group's module and the help the root lists for it (`cli/root.py` loads them lazily).
GROUPS = {
    "auth": ("akka_training.cli.auth", "Log in to a trainer and manage tokens."),
    "config": ("akka_training.cli.config", "Contexts: which trainer, which login."),
    "trainer": ("akka_training.cli.trainer", "Run the trainer service."),
    "training": (
        "akka_training.cli.training",
        "Train adapters: datasets, runs, pipelines, capacity.",
    ),
}

# The variable through which a shell asks `akka` for completions (`akka completion SHELL`'s
# scripts set it): such a call is never a request for the help page.
COMPLETE_VAR = "_AKKA_COMPLETE"

# Command lines that print the root page: nothing, or only a request for help.
_HELP_LINES: tuple[list[str], ...] = ([], ["--help"], ["-h"])
_USAGE = "Usage: akka [OPTIONS] COMMAND [ARGS]..."
_OPTIONS = [("--help        <bool>", "Show this message and exit.")]


def asks_for_root_help(argv: list[str]) -> bool:
    """Whether `argv` asks for the root page and nothing else (a global flag that changes
    nothing on the page, --no-color, may stand with it)."""
    return [a for a in argv if a != "--no-color"] in _HELP_LINES


def page(width: int) -> str | None:
    """The root help page as typer draws it `width` columns wide, or None where a line would
    not fit (typer wraps it then)."""
    commands = [("completion", COMPLETION_HELP), *((n, h) for n, (_, h) in GROUPS.items())]
    name_width = max(len(name) for name, _ in commands)
    option_rows = [f"{name}  {text}" for name, text in _OPTIONS]
    command_rows = [f"{name.ljust(name_width)}  {text}" for name, text in commands]
    widest = max(len(row) for row in [*option_rows, *command_rows]) + 4
    if width < max(widest, len(ROOT_HELP) + 2, len(_USAGE) + 2):
        return None
    blank = " " * width
    lines = [
        GLOBAL_HELP.strip(),
        blank,
        f" {_USAGE}".ljust(width),
        blank,
        f" {ROOT_HELP}".ljust(width),
        blank,
        *_panel("Options", option_rows, width),
        *_panel("Commands", command_rows, width),
        "",
    ]
    return "\n".join(lines) + "\n"


def terminal_width() -> int:
    """The width rich gives typer's help: TERMINAL_WIDTH, then COLUMNS, then the terminal's
    (stdin, stdout or stderr), else 80."""
    for variable in ("TERMINAL_WIDTH", "COLUMNS"):
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    if os.environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return 80
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns
        except OSError:
            continue
    return 80


def _panel(title: str, rows: list[str], width: int) -> list[str]:
    top = f"╭─ {title} "
    return [
        top + "─" * (width - len(top) - 1) + "╮",
        *(f"│ {row.ljust(width - 4)} │" for row in rows),
        "╰" + "─" * (width - 2) + "╯",
    ]
