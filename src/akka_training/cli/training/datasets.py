"""`akka training datasets`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Register and inspect datasets.", no_args_is_help=True)
