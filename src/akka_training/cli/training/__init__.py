"""`akka training`: the trainer's nouns, one module each."""

from __future__ import annotations

import typer

from akka_training.cli.training import (
    adapters,
    base_models,
    bundles,
    datasets,
    info,
    pipelines,
    projects,
    runs,
    tasks,
)

app = typer.Typer(help="Train adapters: datasets, runs, pipelines, capacity.", no_args_is_help=True)
app.command("info")(info.info)
app.command("capacity")(info.capacity)


def add_noun(sub: typer.Typer, plural: str, singular: str) -> None:
    """Nouns are plural and also answer to the singular."""
    app.add_typer(sub, name=plural)
    app.add_typer(sub, name=singular, hidden=True)


add_noun(base_models.app, "base-models", "base-model")
add_noun(projects.app, "projects", "project")
add_noun(datasets.app, "datasets", "dataset")
# A run's adapter leaves the trainer through `runs download` and `runs export --merged`.
runs.app.command("download")(adapters.download)
runs.app.command("export")(adapters.export)
add_noun(runs.app, "runs", "run")
add_noun(pipelines.app, "pipelines", "pipeline")
add_noun(bundles.app, "bundles", "bundle")
add_noun(tasks.app, "tasks", "task")
