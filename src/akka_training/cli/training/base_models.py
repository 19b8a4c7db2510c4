"""`akka training base-models`: the catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from akka_training.cli.output import details, emit, gib, section, table
from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.api.catalog import BaseModelDetail, BaseModelSummary, CatalogEnvelope

app = typer.Typer(help="Base models the deployment admits.", no_args_is_help=True)


@app.command("list")
def list_models() -> None:
    """Models with their status and the methods this deployment offers."""
    emit(state.client().base_models(), _print_models)


@app.command("get")
def get_model(model: str) -> None:
    """A model's details and the runs this deployment admits for it."""
    emit(state.client().base_model(model), _print_model)


@app.command("envelopes")
def envelopes() -> None:
    """Every envelope of every model, and whether this deployment admits it."""
    emit(state.client().envelopes(), _print_envelopes)


def _print_models(rows: list[BaseModelSummary]) -> None:
    table(["ID", "STATUS", "METHODS"], [[m.id, m.status, m.methods] for m in rows])


def _print_envelopes(rows: list[CatalogEnvelope]) -> None:
    table(
        [
            "MODEL",
            "METHOD",
            "ENGINE",
            "GPUS",
            "PRECISION",
            "GPU MEMORY PER GPU",
            "HOST MEMORY PER NODE",
            "ADMITTED",
        ],
        [
            [
                e.model,
                e.method,
                e.engine,
                e.gpus,
                e.precision,
                gib(e.gpu_memory_gib),
                gib(e.host_memory_gib),
                e.admitted,
            ]
            for e in rows
        ],
    )


def _print_model(m: BaseModelDetail) -> None:
    rows: list[tuple[str, Any]] = [
        ("ID", m.id),
        ("Status", m.status),
        ("Path", m.path),
        ("Revision", m.revision),
    ]
    if m.hub_id:
        rows.append(
            ("Hub id", m.hub_id + (f" (revision {m.hub_revision})" if m.hub_revision else ""))
        )
    rows += [
        ("Context length", m.context_length),
        ("Modality", m.modality),
        ("Engine", m.engine),
        ("Methods", m.methods),
    ]
    details(rows)
    print()
    section("Methods by engine")
    table(["ENGINE", "METHODS"], [[e, ms] for e, ms in m.methods_by_engine.items()], indent="  ")
    print()
    section("Runs this deployment admits")
    if not m.admitted:
        print("  none")
        return
    table(
        ["METHOD", "ENGINE", "GPUS", "PRECISION", "GPU MEMORY PER GPU", "HOST MEMORY PER NODE"],
        [
            [
                e.method,
                e.engine,
                e.gpus,
                e.precision,
                gib(e.gpu_memory_gib),
                gib(e.host_memory_gib),
            ]
            for e in m.admitted
        ],
        indent="  ",
    )
