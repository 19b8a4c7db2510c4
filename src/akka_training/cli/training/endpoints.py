"""`akka training endpoints`: a base model and a project's adapters served over the OpenAI API
at the trainer's ``/openai/v1`` (docs/talk-to-your-adapter.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from akka_training.cli.output import confirm, details, emit, table, when
from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.api.endpoints import EndpointRecord

app = typer.Typer(help="Serve a base model and adapters over the OpenAI API.", no_args_is_help=True)

NAME = typer.Argument(..., help="The endpoint's name (lower case, digits, dashes).")
PROJECT = typer.Option(None, "--project", help="The endpoint's project (default: the context's).")


@app.command("create")
def create(
    name: str = NAME,
    base: str = typer.Option(..., "--base", help="The base model to serve."),
    adapter: list[str] = typer.Option(
        [], "--adapter", help="RUN (its final adapter), RUN:SNAPSHOT or a modelName; repeatable."
    ),
    gpus: int = typer.Option(1, "--gpus", min=1, help="Devices the endpoint claims."),
    pool: str = typer.Option(None, "--pool", help="The pool it claims them from."),
    idle_minutes: float = typer.Option(
        None,
        "--idle-minutes",
        min=0,
        help="Give the devices back after this long without a request (0: never); the next "
        "request starts it again. Default: trainer.endpoints.idle-minutes.",
    ),
    project: str = PROJECT,
) -> None:
    """Start an endpoint; it serves once its phase is READY."""
    answer = state.client().create_endpoint(
        state.project(project), name, base, adapter, gpus, pool, idle_minutes
    )
    emit(answer, _print_endpoint)


@app.command("list")
def list_endpoints(
    project: str = typer.Option(None, "--project", help="Only this project."),
    all: bool = typer.Option(False, "--all", help="Stopped and failed endpoints too."),
) -> None:
    """Endpoints, newest first (-q: their names only)."""
    emit(state.client().endpoints(project, all), _print_list)


@app.command("get")
def get(name: str = NAME, project: str = PROJECT) -> None:
    """An endpoint: its phase, model, adapters and devices."""
    emit(state.client().endpoint(state.project(project), name), _print_endpoint)


@app.command("add-adapter")
def add_adapter(
    name: str = NAME,
    adapter: str = typer.Argument(..., help="RUN, RUN:SNAPSHOT or a modelName."),
    project: str = PROJECT,
) -> None:
    """Serve one more adapter; the endpoint loads it without a restart."""
    emit(
        state.client().add_endpoint_adapter(state.project(project), name, adapter),
        _print_endpoint,
    )


@app.command("remove-adapter")
def remove_adapter(
    name: str = NAME,
    adapter: str = typer.Argument(..., help="The adapter's name or alias, as `get` lists."),
    project: str = PROJECT,
) -> None:
    """Stop serving an adapter; the endpoint drops it without a restart."""
    emit(
        state.client().remove_endpoint_adapter(state.project(project), name, adapter),
        _print_endpoint,
    )


@app.command("delete")
def delete(name: str = NAME, project: str = PROJECT) -> None:
    """Stop an endpoint; its devices go back to the pool. On a terminal it asks first."""
    confirm(f"Delete endpoint {name}?")
    emit(
        state.client().delete_endpoint(state.project(project), name),
        lambda e: print(f"Endpoint {e.name}: stopping."),
    )


def _print_list(rows: list[EndpointRecord]) -> None:
    if state.quiet:
        for e in rows:
            print(e.name)
        return
    table(
        ["NAME", "PROJECT", "PHASE", "BASE MODEL", "ADAPTERS", "GPUS", "CREATED"],
        [
            [
                e.name,
                e.project,
                e.phase,
                e.base_model,
                ", ".join(a.name for a in e.adapters) or "-",
                e.gpus,
                when(e.created_at),
            ]
            for e in rows
        ],
    )


def _print_endpoint(e: EndpointRecord) -> None:
    details(
        [
            ("Name", e.name),
            ("Project", e.project),
            ("Phase", e.phase),
            ("Base model", e.base_model),
            ("Adapters", ", ".join(a.name for a in e.adapters) or "-"),
            ("Devices", f"{e.gpus} of pool {e.pool}"),
            ("Engine", e.engine or "- (said once it starts)"),
            ("Idle after", f"{e.idle_minutes:g} minutes" if e.idle_minutes else "never"),
            ("Created", when(e.created_at)),
            *([("Failure", e.failure)] if e.failure else []),
        ]
    )
