"""`akka training bundles`: Python code for rule reward terms and tools."""

from __future__ import annotations

from pathlib import Path

import typer

from akka_training.cli.output import details, emit, human_bytes, table
from akka_training.cli.state import state
from akka_training.core.errors import InvalidRequest
from akka_training.rewards.bundles import pack_bundle

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
        lambda d: print(
            f"{'Already registered as' if d.get('existing') else 'Registered'} {d['ref']} "
            f"(sha256 {d['sha256'][:12]}, {len(d['files'])} files, {human_bytes(d['bytes'])})."
        ),
    )


@app.command("list")
def list_bundles(project: str = typer.Option(None, "--project")) -> None:
    """Registered bundles."""
    rows = state.client().bundles(project)
    emit(
        rows,
        lambda rs: table(
            ["BUNDLE", "SHA256", "FILES", "SIZE", "CREATED"],
            [
                [
                    b["ref"],
                    b["sha256"][:12],
                    len(b["files"]),
                    human_bytes(b["bytes"]),
                    b["createdAt"][:19].replace("T", " "),
                ]
                for b in rs
            ],
        ),
    )


@app.command()
def get(ref: str) -> None:
    """A bundle's version, hash and files."""
    emit(
        state.client().bundle(ref),
        lambda d: details(
            [
                ("Bundle", d["ref"]),
                ("SHA256", d["sha256"]),
                ("Size", human_bytes(d["bytes"])),
                ("Files", "\n".join(d["files"])),
            ]
        ),
    )
