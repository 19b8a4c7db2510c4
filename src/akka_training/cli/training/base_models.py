"""`akka training base-models`: the catalog."""

from __future__ import annotations

from typing import Any

import typer

from akka_training.cli.output import details, emit, gib, section, table
from akka_training.cli.state import state

app = typer.Typer(help="Base models the deployment admits.", no_args_is_help=True)


@app.command("list")
def list_models() -> None:
    """Models with their status and the methods this deployment offers."""
    rows = state.client().base_models()
    emit(
        rows,
        lambda rs: table(
            ["ID", "STATUS", "METHODS"], [[r["id"], r["status"], r["methods"]] for r in rs]
        ),
    )


@app.command("get")
def get_model(model: str) -> None:
    """A model's details and the runs this deployment admits for it."""
    emit(state.client().base_model(model), _print_model)


@app.command("envelopes")
def envelopes() -> None:
    """Every envelope of every model, and whether this deployment admits it."""
    rows = state.client().envelopes()
    emit(
        rows,
        lambda rs: table(
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
                    r["model"],
                    r["method"],
                    r["engine"],
                    r["gpus"],
                    r["precision"],
                    gib(r["gpuMemoryGib"]),
                    gib(r["hostMemoryGib"]),
                    r["admitted"],
                ]
                for r in rs
            ],
        ),
    )


def _print_model(d: dict[str, Any]) -> None:
    details(
        [
            ("ID", d["id"]),
            ("Status", d["status"]),
            ("Path", d["path"]),
            ("Revision", d["revision"]),
            ("Context length", d["contextLength"]),
            ("Modality", d["modality"]),
            ("Engine", d["engine"]),
            ("Methods", d["methods"]),
        ]
    )
    print()
    section("Methods by engine")
    table(["ENGINE", "METHODS"], [[e, m] for e, m in d["methodsByEngine"].items()], indent="  ")
    print()
    section("Runs this deployment admits")
    if not d["admitted"]:
        print("  none")
        return
    table(
        ["METHOD", "ENGINE", "GPUS", "PRECISION", "GPU MEMORY PER GPU", "HOST MEMORY PER NODE"],
        [
            [
                e["method"],
                e["engine"],
                e["gpus"],
                e["precision"],
                gib(e["gpuMemoryGib"]),
                gib(e["hostMemoryGib"]),
            ]
            for e in d["admitted"]
        ],
        indent="  ",
    )
