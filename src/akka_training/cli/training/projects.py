"""`akka training projects`."""

from __future__ import annotations

from typing import Any

import typer

from akka_training.cli.output import details, emit, section, table
from akka_training.cli.state import state

app = typer.Typer(help="Projects and their device quotas.", no_args_is_help=True)


@app.command("create")
def create(
    name: str,
    quota: int = typer.Option(None, "--quota", help="Devices the project may hold at once."),
    description: str = typer.Option(None, "--description"),
) -> None:
    """Create a project (admin)."""
    project = state.client().create_project(name, quota, description)
    emit(
        project,
        lambda d: print(
            f"Project {d['name']} created (quota: {'none' if d['quota'] is None else d['quota']})."
        ),
    )


@app.command("list")
def list_projects() -> None:
    """Projects you can see."""
    rows = state.client().projects()
    emit(
        rows,
        lambda rs: table(
            ["PROJECT", "QUOTA", "HELD", "QUEUED", "CREATED"],
            [
                [
                    r["name"],
                    "none" if r["quota"] is None else r["quota"],
                    r["held"],
                    r["queued"],
                    r["createdAt"][:19],
                ]
                for r in rs
            ],
        ),
    )


@app.command("get")
def get(name: str) -> None:
    """A project's quota, use and members."""
    emit(state.client().project(name), _print_project)


def _print_project(d: dict[str, Any]) -> None:
    details(
        [
            ("Project", d["name"]),
            ("Description", d["description"]),
            ("Quota", "none" if d["quota"] is None else f"{d['quota']} device(s)"),
            ("Held", f"{d['held']} device(s)"),
            ("Queued", f"{d['queued']} claim(s)"),
        ]
    )
    print()
    section("Members")
    table(
        ["TOKEN", "NAME", "KIND"],
        [[m["token"], m["name"], m["kind"]] for m in d["members"]],
        indent="  ",
    )
