"""`akka training tasks`: jobs the trainer runs on its cluster that are not training runs (the
merges of `runs export --merged`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from akka_training.cli.arguments import TASK
from akka_training.cli.output import confirm, details, emit, table, when
from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.api.tasks import TaskRecord

app = typer.Typer(help="Follow the trainer's tasks (merges, regrades).", no_args_is_help=True)


@app.command("list")
def list_tasks(
    project: str = typer.Option(None, "--project"),
    run: str = typer.Option(None, "--run", help="Only the tasks of this run."),
    limit: int = typer.Option(100, "--limit", min=1),
) -> None:
    """Tasks, newest first (-q: their ids only)."""
    emit(state.client().tasks(project, run, limit), _print_list)


@app.command("get")
def get(task: str = TASK) -> None:
    """A task: its state, progress, result or failure."""
    emit(state.client().task(task), _print_task)


@app.command("cancel")
def cancel(task: str = TASK) -> None:
    """Cancel a task (its job is stopped). On a terminal it asks first; --force does not."""
    confirm(f"Cancel task {task}?")
    emit(
        state.client().cancel_task(task), lambda t: print(f"Task {t.id}: {t.requested or t.state}.")
    )


def _print_list(rows: list[TaskRecord]) -> None:
    if state.quiet:
        for t in rows:
            print(t.id)
        return
    table(
        ["TASK", "KIND", "PROJECT", "RUN", "STATE", "PROGRESS", "CREATED"],
        [
            [
                t.id,
                t.kind,
                t.project,
                t.run,
                t.state,
                t.progress.message if t.progress else None,
                when(t.created_at),
            ]
            for t in rows
        ],
    )


def _print_task(t: TaskRecord) -> None:
    rows = [
        ("Task", t.id),
        ("Kind", t.kind),
        ("Project", t.project),
        ("Run", t.run),
        ("State", t.state + (f" ({t.requested} requested)" if t.requested else "")),
        ("Pool", t.pool),
        ("Progress", t.progress.message if t.progress else None),
        ("Created", when(t.created_at)),
        ("Started", when(t.started_at)),
        ("Ended", when(t.ended_at)),
    ]
    if t.failure:
        rows.append(("Failure", t.failure))
    if t.failure_detail:
        rows.append(("Detail", t.failure_detail))
    details(rows)
