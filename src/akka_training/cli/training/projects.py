"""`akka training projects`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from akka_training.cli.output import details, emit, section, table, when
from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.api.projects import Project, ProjectDetail

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
        lambda p: print(
            f"Project {p.name} created (quota: {'none' if p.quota is None else p.quota})."
        ),
    )


@app.command("list")
def list_projects() -> None:
    """Projects you can see."""
    emit(state.client().projects(), _print_projects)


@app.command("get")
def get(name: str) -> None:
    """A project's quota, use and members."""
    emit(state.client().project(name), _print_project)


def _print_projects(rows: list[Project]) -> None:
    table(
        ["PROJECT", "QUOTA", "HELD", "QUEUED", "CREATED"],
        [
            [
                p.name,
                "none" if p.quota is None else p.quota,
                p.held,
                p.queued,
                when(p.created_at, "T"),
            ]
            for p in rows
        ],
    )


def _print_project(p: ProjectDetail) -> None:
    details(
        [
            ("Project", p.name),
            ("Description", p.description),
            ("Quota", "none" if p.quota is None else f"{p.quota} device(s)"),
            ("Held", f"{p.held} device(s)"),
            ("Queued", f"{p.queued} claim(s)"),
        ]
    )
    print()
    section("Members")
    table(
        ["TOKEN", "NAME", "KIND"],
        [[m.token, m.name, m.kind] for m in p.members],
        indent="  ",
    )
