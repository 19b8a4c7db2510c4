"""`akka config`: contexts in ~/.akka/config.yaml (or AKKA_CONFIG)."""

from __future__ import annotations

import typer

from akka_training.cli.output import emit, table
from akka_training.cli.state import state
from akka_training.client.contexts import Context
from akka_training.core.errors import InvalidRequest

app = typer.Typer(help="Contexts: which trainer, which login.", no_args_is_help=True)


@app.command("get-context", hidden=True)
@app.command("get-contexts")
def get_contexts() -> None:
    """Every context in the file; the current one is marked."""
    config = state.config
    rows = [
        {
            "name": c.name,
            "current": c.name == config.current,
            "apiHost": c.api_host,
            "trainerUrl": c.url,
            "project": c.project,
            "loggedIn": bool(c.login),
        }
        for c in config.contexts.values()
    ]
    emit(
        rows,
        lambda rs: table(
            ["CURRENT", "NAME", "API HOST", "TRAINER", "PROJECT", "LOGIN"],
            [
                [
                    "*" if r["current"] else "",
                    r["name"],
                    r["apiHost"],
                    r["trainerUrl"],
                    r["project"],
                    "yes" if r["loggedIn"] else "no",
                ]
                for r in rs
            ],
        ),
    )


@app.command("current-context")
def current_context() -> None:
    """The name of the current context."""
    name = state.config.current
    if not name:
        raise InvalidRequest("No context is current; pick one with `akka config use-context NAME`.")
    emit({"name": name}, lambda d: print(d["name"]))


@app.command("use-context")
def use_context(name: str) -> None:
    """Make NAME the current context."""
    config = state.config
    config.context(name)
    config.current = name
    config.save()
    print(f"Switched to context {name}.")


@app.command("set-context")
def set_context(
    name: str,
    api_host: str = typer.Option(None, "--api-host", help="Where logins are exchanged."),
    project: str = typer.Option(None, "--project", help="Default project."),
) -> None:
    """Create or change a context."""
    config = state.config
    ctx = config.contexts.get(name)
    if ctx is None:
        if not api_host:
            raise InvalidRequest("A new context needs --api-host URL.")
        ctx = Context(name, api_host=api_host)
        config.contexts[name] = ctx
    if api_host:
        ctx.api_host = api_host
    if project:
        ctx.project = project
    config.current = config.current or name
    config.save()
    print(f"Context {name} set.")
