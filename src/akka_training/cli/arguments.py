"""Positional arguments that several commands share, with the help that says what they take."""

from __future__ import annotations

import typer

PREFIX_HELP = "or an unambiguous prefix of it (3 characters or more)"

RUN = typer.Argument(..., metavar="RUN", help=f"The run's id, {PREFIX_HELP}.", show_default=False)
PIPELINE = typer.Argument(
    ..., metavar="PIPELINE", help=f"The pipeline's id, {PREFIX_HELP}.", show_default=False
)
TASK = typer.Argument(
    ..., metavar="TASK", help=f"The task's id, {PREFIX_HELP}.", show_default=False
)
EVALUATION = typer.Argument(
    ..., metavar="EVALUATION", help=f"The evaluation's id, {PREFIX_HELP}.", show_default=False
)
