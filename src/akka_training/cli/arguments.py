"""Positional arguments that several commands share, with the help that says what they take.
An id shorter than a prefix may be is a usage error (exit status 2), refused before the trainer
is asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

PREFIX_HELP = "or an unambiguous prefix of it (3 characters or more)"
SHORTEST_PREFIX = 3


def _prefix(noun: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value is not None and len(value) < SHORTEST_PREFIX:
            raise typer.BadParameter(
                f"give the {noun}'s id or at least {SHORTEST_PREFIX} characters of it, "
                f"not {value!r}."
            )
        return value

    return check


def _id(metavar: str, noun: str) -> Any:
    return typer.Argument(
        ...,
        metavar=metavar,
        help=f"The {noun}'s id, {PREFIX_HELP}.",
        show_default=False,
        callback=_prefix(noun),
    )


RUN = _id("RUN", "run")
PIPELINE = _id("PIPELINE", "pipeline")
TASK = _id("TASK", "task")
EVALUATION = _id("EVALUATION", "evaluation")
