"""`akka training chat MODEL`: a conversation with a base model or an adapter an endpoint
serves, streamed as it is generated (docs/talk-to-your-adapter.md)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from akka_training.cli.state import state


def chat(
    model: str = typer.Argument(
        ..., help="A base model, a run, a run's modelName or RUN:step-N an endpoint serves."
    ),
    message: str = typer.Option(
        None, "--message", "-m", help="Ask this, print the answer and stop."
    ),
    system: str = typer.Option(None, "--system", help="A system message to start with."),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="0 is greedy."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="The longest answer."),
) -> None:
    """Talk to a model an endpoint serves; each answer streams as it is generated.

    Without -m it asks for a line at a time until an empty line or end of input."""
    client = state.client()
    history: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []

    def waiting(why: str) -> None:
        print(f"{why} Waiting.", file=sys.stderr)

    def ask(text: str) -> None:
        history.append({"role": "user", "content": text})
        pieces = []
        for piece in client.chat_stream(model, history, temperature, max_tokens, waiting):
            pieces.append(piece.text)
            print(piece.text, end="", flush=True)
        print()
        history.append({"role": "assistant", "content": "".join(pieces)})

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
