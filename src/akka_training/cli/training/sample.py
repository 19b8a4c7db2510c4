"""`akka training sample MODEL -f prompts.jsonl --out out.jsonl`: batch generation from a
model an endpoint serves, every row's completions kept beside its prompt, resumable
(docs/talk-to-your-adapter.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from akka_training.cli.state import state
from akka_training.core.errors import InvalidRequest


def sample(
    model: str = typer.Argument(
        ..., help="A base model, a run, a run's modelName or RUN:step-N an endpoint serves."
    ),
    prompts: Path = typer.Option(
        ...,
        "--file",
        "-f",
        help='JSON lines: {"prompt": TEXT} or {"messages": [...]}, other keys kept.',
    ),
    out: Path = typer.Option(..., "--out", help="Where the rows go, with their outputs."),
    n: int = typer.Option(1, "--n", min=1, max=16, help="Completions per prompt."),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="0 is greedy."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="The longest completion."),
) -> None:
    """Complete every row of a prompts file; a second run goes on after the rows already out.

    Each line of --out is the row as given with "outputs" (its n completions) and "usage"."""
    rows = _rows(prompts)
    done = _done(out)
    if done > len(rows):
        raise InvalidRequest(
            f"{out} holds {done} rows, more than the {len(rows)} of {prompts}: it is the output "
            "of another prompts file; choose another --out."
        )
    client = state.client()

    def waiting(why: str) -> None:
        print(f"{why} Waiting.", file=sys.stderr)

    with out.open("a") as sink:
        for number, row in enumerate(rows[done:], start=done + 1):
            got = client.sample(model, row, n, temperature, max_tokens, waiting)
            usage = {"promptTokens": got.prompt_tokens, "completionTokens": got.completion_tokens}
            sink.write(json.dumps({**row, "outputs": got.outputs, "usage": usage}) + "\n")
            sink.flush()
            if not state.quiet:
                print(f"{number}/{len(rows)} rows", file=sys.stderr)
    if not state.quiet:
        print(f"{len(rows)} rows in {out} ({len(rows) - done} new).")


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InvalidRequest(f"{path} cannot be read: {exc.strerror}.") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InvalidRequest(f"Line {number} of {path} is not JSON.") from None
        if not isinstance(row, dict) or not (
            isinstance(row.get("prompt"), str) or isinstance(row.get("messages"), list)
        ):
            raise InvalidRequest(
                f'Line {number} of {path} has neither "prompt" (text) nor "messages" (a list).'
            )
        rows.append(row)
    return rows


def _done(out: Path) -> int:
    """Rows already written: the complete lines of `out` (a last, torn line is dropped)."""
    if not out.exists():
        return 0
    text = out.read_text()
    complete = text[: text.rfind("\n") + 1]
    if complete != text:
        out.write_text(complete)
    return len(complete.splitlines())
