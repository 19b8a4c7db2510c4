"""Every help page as a person reads it: a command's one-line summary (what the listing of its
group shows) is one sentence that the page does not break mid-way, and usage lines name a
required argument as the help does (RUN, not {RUN})."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer
from typer._click.core import Context

from akka_training.cli.root import app


def commands() -> Iterator[tuple[str, Any, Context]]:
    root = typer.main.get_group(app)

    def walk(command: Any, path: str, ctx: Context) -> Iterator[tuple[str, Any, Context]]:
        yield path, command, ctx
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                yield from walk(sub, f"{path} {name}", Context(sub, parent=ctx, info_name=name))

    yield from walk(root, "akka", Context(root, info_name="akka"))


def test_every_command_has_a_summary_on_one_line() -> None:
    seen = list(commands())
    assert len(seen) > 100  # the lazy groups were walked too
    broken = [
        path
        for path, command, _ in seen
        if "\n" in inspect.cleandoc(command.help or "").split("\n\n")[0]
    ]
    assert broken == []


def test_no_usage_line_wraps_an_argument_in_braces() -> None:
    usage = {path: " ".join(command.collect_usage_pieces(ctx)) for path, command, ctx in commands()}
    assert usage["akka training runs get"] == "[OPTIONS] RUN"
    assert usage["akka training evaluations compare"] == "[OPTIONS] EVALUATION EVALUATION"
    assert [path for path, line in usage.items() if "{" in line] == []
