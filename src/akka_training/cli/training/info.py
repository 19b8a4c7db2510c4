"""`akka training info` and `akka training capacity`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from akka_training.cli.output import details, emit, gib, section, table, when
from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.api.capacity import Capacity


def info() -> None:
    """The trainer's configuration and build, one row each."""
    emit(
        state.client().info(),
        lambda i: details(
            [
                ("Version", i.version),
                ("Engine", i.engine),
                ("Methods", ", ".join(f"{m} on {e}" for m, e in i.engines.items()) or "-"),
                ("Backend", i.backend),
                ("Database", i.database),
                ("Storage", i.storage),
                ("Telemetry", i.telemetry),
                ("Startup", i.startup),
            ]
        ),
    )


def capacity(project: str = typer.Option(None, "--project", help="Only this project.")) -> None:
    """Pools, claims and projects at this moment."""
    emit(state.client().capacity(project), _print_capacity)


def _print_capacity(c: Capacity) -> None:
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
                p.pool,
                p.accelerator,
                p.free,
                p.granted,
                p.outside,
                p.declared,
                "unreachable" if p.observed is None else p.observed,
                p.queued,
                p.max_claim,
                gib(p.host_ram_gib),
            ]
            for p in c.pools
        ],
        indent="  ",
    )
    print()
    section("Claims")
    if c.claims:
        table(
            ["KIND", "FOR", "PROJECT", "DEVICES", "POOL", "STATE", "SINCE"],
            [
                [
                    claim.kind,
                    claim.for_,
                    claim.project,
                    claim.devices,
                    claim.pool,
                    claim.state,
                    when(claim.since),
                ]
                for claim in c.claims
            ],
            indent="  ",
        )
    else:
        print("  none")
    print()
    section("Projects")
    table(
        ["PROJECT", "QUOTA", "HELD", "QUEUED"],
        [[p.project, "none" if p.quota is None else p.quota, p.held, p.queued] for p in c.projects],
        indent="  ",
    )
