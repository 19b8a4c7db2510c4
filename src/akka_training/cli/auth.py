"""`akka auth`: logins and tokens."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from akka_training.cli.output import confirm, details, emit, say, table, when
from akka_training.cli.state import import_httpx, state
from akka_training.client.contexts import Context

if TYPE_CHECKING:
    from akka_training.api.system import Token

app = typer.Typer(help="Log in to a trainer and manage tokens.", no_args_is_help=True)
tokens_app = typer.Typer(help="Create, list and revoke tokens.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")
# Nouns are plural and also answer to the singular, as the `training` nouns do.
app.add_typer(tokens_app, name="token", hidden=True)


@app.command()
def login(
    api_host: str = typer.Option(None, "--api-host", help="Where the login is exchanged."),
    token: str = typer.Option(None, "--token", help="The login; read from stdin when absent."),
    project: str = typer.Option(None, "--project", help="Default project of the context."),
    name: str = typer.Option(None, "--name", help="Context to store the login in."),
) -> None:
    """Store a login in a context (the current one, or --name / --context), after checking it."""
    # Imported here, as every command that needs the trainer does: see `State.connection`.
    import_httpx()
    from akka_training.client.trainer import TrainerClient

    config = state.config
    ctx_name = name or state.context_name() or "default"
    ctx = config.contexts.get(ctx_name)
    host = api_host or (ctx.api_host if ctx else None) or state.url()
    if not token:
        token = (
            sys.stdin.readline().strip()
            if not sys.stdin.isatty()
            else typer.prompt("Login token", hide_input=True)
        )
    with TrainerClient(host) as client:
        answer = client.exchange(token)
    if ctx is None:
        ctx = Context(ctx_name, api_host=host)
        config.contexts[ctx_name] = ctx
    ctx.api_host = host
    ctx.login = token
    if project:
        ctx.project = project
    config.current = config.current or ctx_name
    config.save()
    if not state.quiet:
        print(f"Logged in to {host} as {answer.login.name} (context {ctx_name}).")


@app.command()
def logout() -> None:
    """Forget the login of the current context (or --context)."""
    ctx = state.current_context()
    if ctx is None or not ctx.login:
        print("No login to forget.")
        return
    ctx.login = None
    state.config.save()
    print(f"Logged out of context {ctx.name}.")


@app.command("current-login")
def current_login() -> None:
    """Who the CLI acts as, and where that credential comes from."""
    connection = state.connection()
    who = state.client().whoami()
    ctx = connection.context
    data = {
        "context": ctx.name if ctx else None,
        "apiHost": ctx.api_host if ctx else None,
        "trainerUrl": connection.url,
        "credential": connection.credential,
        **who.to_json(),
    }
    emit(
        data,
        lambda d: details(
            [
                ("Context", d["context"]),
                ("API host", d["apiHost"]),
                ("Trainer", d["trainerUrl"]),
                ("Credential", d["credential"]),
                ("Token", f"{who.name} ({who.token_id})"),
                ("Kind", who.kind),
                ("Projects", "all" if who.projects is None else who.projects),
            ]
        ),
    )


@tokens_app.command("create")
def tokens_create(
    name: str = typer.Argument(..., help="A name that says what the token is for."),
    project: list[str] = typer.Option([], "--project", help="Project the token may use (repeat)."),
    admin: bool = typer.Option(False, "--admin", help="A token for every project."),
    expires_in_days: float = typer.Option(None, "--expires-in-days"),
) -> None:
    """Create a token; its secret is printed once."""
    created = state.client().create_token(name, project, admin, expires_in_days)
    emit(
        created,
        lambda t: (
            print(t.token),
            print(
                f"Token {t.id} ({t.name}) created; keep the secret above, it is not shown again.",
                file=sys.stderr,
            ),
        ),
    )


@tokens_app.command("list")
def tokens_list() -> None:
    """Tokens you can see."""
    emit(state.client().tokens(), _print_tokens)


@tokens_app.command("revoke")
def tokens_revoke(token_id: str) -> None:
    """Revoke a token and the access tokens exchanged from it.

    On a terminal it asks first; --force does not."""
    confirm(f"Revoke token {token_id}? Whoever uses it loses access.")
    revoked = state.client().revoke_token(token_id)
    emit(revoked, lambda t: say(f"Revoked token {t.id} ({t.name}).", t.id))


def _print_tokens(rows: list[Token]) -> None:
    table(
        ["ID", "NAME", "KIND", "PROJECTS", "CREATED", "EXPIRES", "REVOKED"],
        [
            [
                t.id,
                t.name,
                t.kind,
                "all" if t.projects is None else t.projects,
                when(t.created_at, "T"),
                when(t.expires_at, "T"),
                when(t.revoked_at, "T"),
            ]
            for t in rows
        ],
    )
