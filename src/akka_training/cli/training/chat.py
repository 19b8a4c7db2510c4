"""`akka training chat MODEL`: a conversation with a base model or an adapter an endpoint
serves, streamed as it is generated; when no endpoint of the caller's projects serves MODEL, a
temporary one is started for the chat and deleted when it ends (docs/talk-to-your-adapter.md)."""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from akka_training.cli.state import state

if TYPE_CHECKING:
    from akka_training.client import TrainerClient

# Minutes without a request after which a temporary endpoint whose chat was killed (so that it
# could not delete it) gives its devices back.
TEMPORARY_IDLE_MINUTES = 5.0


@dataclass(frozen=True)
class Temporary:
    """A temporary endpoint started for one chat, and the model name the chat asks it for."""

    project: str
    name: str
    model: str


def chat(
    model: str = typer.Argument(..., help="A base model, a run, a run's modelName or RUN:step-N."),
    message: str = typer.Option(
        None, "--message", "-m", help="Ask this, print the answer and stop."
    ),
    system: str = typer.Option(None, "--system", help="A system message to start with."),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="0 is greedy."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="The longest answer."),
    gpus: int = typer.Option(
        1, "--gpus", min=1, help="Devices a temporary endpoint claims (when none serves MODEL)."
    ),
    pool: str = typer.Option(None, "--pool", help="The pool a temporary endpoint claims from."),
    project: str = typer.Option(
        None,
        "--project",
        help="The project of a temporary endpoint for a base model (default: the context's).",
    ),
) -> None:
    """Talk to a model; each answer streams as it is generated.

    When no endpoint of your projects serves MODEL, a temporary one is started for the chat
    (it says which, and the devices it claims) and deleted when the chat ends. Without -m it
    asks for a line at a time until an empty line or end of input."""
    client = state.client()
    temporary = None
    if model not in {served.id for served in client.served_models()}:
        temporary = _start_temporary(client, model, gpus, pool, project)
    asked = temporary.model if temporary is not None else model
    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    said: set[str] = set()

    def waiting(why: str) -> None:
        if why not in said:  # once each, not every few seconds
            said.add(why)
            print(f"{why} Waiting.", file=sys.stderr)

    def ask(text: str) -> None:
        history.append({"role": "user", "content": text})
        pieces = []
        for piece in client.chat_stream(asked, history, temperature, max_tokens, waiting):
            pieces.append(piece.text)
            print(piece.text, end="", flush=True)
        print()
        history.append({"role": "assistant", "content": "".join(pieces)})

    try:
        if message is not None:
            ask(message)
            return
        while True:
            try:
                line = input("> " if sys.stdin.isatty() else "")
            except EOFError:
                return
            if not line.strip():
                return
            ask(line)
    finally:
        if temporary is not None:
            client.delete_endpoint(temporary.project, temporary.name)
            print(f"Temporary endpoint {temporary.name} deleted.", file=sys.stderr)


def _start_temporary(
    client: TrainerClient, model: str, gpus: int, pool: str | None, project: str | None
) -> Temporary:
    """Start an endpoint serving `model` for this chat, and say so in one line."""

    base, adapter, owner = _resolve(client, model)
    owner = owner or state.project(project)
    name = f"chat-{secrets.token_hex(3)}"
    created = client.create_endpoint(
        owner,
        name,
        base,
        [adapter] if adapter else [],
        gpus,
        pool,
        TEMPORARY_IDLE_MINUTES,
    )
    served = created.adapters[0] if created.adapters else None
    what = f"base {base}" + (f", adapter {served.name}" if served else "")
    print(
        f"No endpoint serves {model}: started temporary endpoint {name} in project {owner} "
        f"({what}; {created.gpus} device(s) of pool {created.pool}); it is deleted when this "
        "chat ends.",
        file=sys.stderr,
    )
    # A run given by a prefix of its id is asked for by the name the endpoint serves it under.
    names = {base} if served is None else {served.name, *served.aliases}
    asked = model if model in names else (base if served is None else served.name)
    return Temporary(owner, name, asked)


def _resolve(client: TrainerClient, model: str) -> tuple[str, str | None, str | None]:
    """(base model, adapter reference or None, the adapter's project or None) for `model`: a
    base model of the catalog, a run (or RUN:SNAPSHOT, RUN:step-N), or a run's modelName."""
    from akka_training.core.errors import InvalidRequest, NotFound

    run_ref, colon, snapshot = model.partition(":")
    if not colon:
        try:
            return client.base_model(model).id, None, None
        except NotFound:
            pass
    try:
        run = client.run(run_ref)
    except (NotFound, InvalidRequest):
        named = [r for r in client.runs(limit=100) if r.model_name == model]
        if not named:
            raise NotFound(
                f"The model {model!r} is not a base model, a run or a run's modelName, and no "
                "endpoint of your projects serves it; `akka training base-models list` and "
                "`akka training runs list` show what there is."
            ) from None
        return named[0].base_model, model, named[0].project
    ref = run.id + (f":{snapshot}" if colon else "")
    return run.base_model, ref, run.project
