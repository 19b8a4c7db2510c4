"""`akka training`: the trainer's nouns, one module each, imported when a command names it."""

from __future__ import annotations

import typer

from akka_training.cli.lazy import Lazy, lazy_group
from akka_training.cli.training import chat, info, sample

_PACKAGE = "akka_training.cli.training"

# (plural, singular, module, help): nouns are plural and also answer to the singular.
_NOUNS = [
    ("base-models", "base-model", "base_models", "Base models the deployment admits."),
    ("projects", "project", "projects", "Projects and their device quotas."),
    ("datasets", "dataset", "datasets", "Register and inspect datasets."),
    ("runs", "run", "runs", "Start, watch, pause, resume and branch runs."),
    (
        "pipelines",
        "pipeline",
        "pipelines",
        "Pipelines: ordered train stages (each a linked run) and evaluate stages.",
    ),
    ("bundles", "bundle", "bundles", "Scoring bundles: code for rule reward terms and tools."),
    ("tasks", "task", "tasks", "Follow the trainer's tasks (merges, regrades)."),
    (
        "evaluations",
        "evaluation",
        "evaluations",
        "Score adapters on held-out datasets and compare the scores.",
    ),
    (
        "endpoints",
        "endpoint",
        "endpoints",
        "Serve a base model and adapters over the OpenAI API.",
    ),
]

NOUNS: dict[str, Lazy] = {}
for _plural, _singular, _module, _help in _NOUNS:
    # The runs group also holds commands kept in other modules (see `runs_app`).
    _attr = "runs_app" if _module == "runs" else "app"
    _where = _PACKAGE if _module == "runs" else f"{_PACKAGE}.{_module}"
    NOUNS[_plural] = Lazy(_where, _help, attr=_attr)
    NOUNS[_singular] = Lazy(_where, _help, attr=_attr, hidden=True)

app = typer.Typer(
    help="Train adapters: datasets, runs, pipelines, capacity.",
    no_args_is_help=True,
    cls=lazy_group(NOUNS),
)
app.command("info")(info.info)
app.command("capacity")(info.capacity)
app.command("chat")(chat.chat)
app.command("sample")(sample.sample)


def runs_app() -> typer.Typer:
    """`akka training runs`, with the commands kept beside it: a run's adapter leaves the
    trainer through `runs download` and `runs export --merged`, and `runs regrade` scores a
    run's kept rollouts again with another reward (a task on the cluster)."""
    from akka_training.cli.training import adapters, regrade, runs

    if not any(c.name == "download" for c in runs.app.registered_commands):
        runs.app.command("download")(adapters.download)
        runs.app.command("export")(adapters.export)
        runs.app.command("regrade")(regrade.regrade)
    return runs.app
