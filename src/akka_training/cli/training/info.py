"""`akka training info` and `akka training capacity`."""

from __future__ import annotations

from typing import Any

import typer

from akka_training.cli.output import details, emit, gib, section, table
from akka_training.cli.state import state


def info() -> None:
    """The trainer's configuration and build, one row each."""
    data = state.client().info()
    emit(
        data,
        lambda d: details(
            [
                ("Version", d["version"]),
                ("Engine", d["engine"]),
                ("Backend", d["backend"]),
                ("Database", d["database"]),
                ("Storage", d["storage"]),
                ("Telemetry", d["telemetry"]),
                ("Startup", d["startup"]),
            ]
        ),
    )


def capacity(project: str = typer.Option(None, "--project", help="Only this project.")) -> None:
    """Pools, claims and projects at this moment."""
    data = state.client().capacity(project)
    emit(data, _print_capacity)


def _print_capacity(d: dict[str, Any]) -> None:
    section("Pools")
    table(
        [
            "POOL",
            "ACCELERATOR",
            "FREE",
            "GRANTED",
            "OUTSIDE",
            "DECLARED",
            "OBSERVED",
            "QUEUED",
            "MAX CLAIM",
            "HOST RAM",
        ],
        [
            [
                p["pool"],
                p["accelerator"],
                p["free"],
                p["granted"],
                p["outside"],
                p["declared"],
                "unreachable" if p["observed"] is None else p["observed"],
                p["queued"],
                p["maxClaim"],
                gib(p["hostRamGib"]),
            ]
            for p in d["pools"]
        ],
        indent="  ",
    )
    print()
    section("Claims")
    if d["claims"]:
        table(
            ["KIND", "FOR", "PROJECT", "DEVICES", "POOL", "STATE", "SINCE"],
            [
                [
                    c["kind"],
                    c["for"],
                    c["project"],
                    c["devices"],
                    c["pool"],
                    c["state"],
                    c["since"][:19].replace("T", " "),
                ]
                for c in d["claims"]
            ],
            indent="  ",
        )
    else:
        print("  none")
    print()
    section("Projects")
    table(
        ["PROJECT", "QUOTA", "HELD", "QUEUED"],
        [
            [p["project"], "none" if p["quota"] is None else p["quota"], p["held"], p["queued"]]
            for p in d["projects"]
        ],
        indent="  ",
    )
