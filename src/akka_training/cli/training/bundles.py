"""`akka training bundles`: Python code for rule reward terms and tools."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from akka_training.cli.output import details, emit, human_bytes, table, when
from akka_training.cli.state import state
from akka_training.core.errors import InvalidRequest
from akka_training.rewards.bundles import pack_bundle

if TYPE_CHECKING:
    from akka_training.api.bundles import Bundle

app = typer.Typer(
    help="Scoring bundles: code for rule reward terms and tools.", no_args_is_help=True
)

# The service applies the deployment's limit; this only keeps the CLI from packing a huge tree.
PACK_LIMIT = 1 << 30


@app.command()
def register(
    ref: str = typer.Argument(..., help="PROJECT/NAME"),
    file: Path = typer.Option(..., "-f", "--file", help="A directory or a .zip of Python modules."),
) -> None:
    """Pack a directory (or a zip) deterministically and register it."""
    if not file.exists():
        raise InvalidRequest(f"{file} does not exist.")
    packed = pack_bundle(file, PACK_LIMIT)
    result = state.client().register_bundle(ref, packed.data)
    emit(
        result,
        lambda b: print(
            f"{'Already registered as' if b.existing else 'Registered'} {b.ref} "
            f"(sha256 {b.sha256[:12]}, {len(b.files)} files, {human_bytes(b.bytes)})."
        ),
    )


@app.command("list")
def list_bundles(project: str = typer.Option(None, "--project")) -> None:
    """Registered bundles."""
    emit(state.client().bundles(project), _print_bundles)


@app.command()
def get(ref: str) -> None:
    """A bundle's version, hash and files."""
    emit(
        state.client().bundle(ref),
        lambda b: details(
            [
                ("Bundle", b.ref),
                ("SHA256", b.sha256),
                ("Size", human_bytes(b.bytes)),
                ("Files", "\n".join(b.files)),
            ]
        ),
    )


def _print_bundles(rows: list[Bundle]) -> None:
    table(
        ["BUNDLE", "SHA256", "FILES", "SIZE", "CREATED"],
        [
            [b.ref, b.sha256[:12], len(b.files), human_bytes(b.bytes), when(b.created_at)]
            for b in rows
        ],
    )
