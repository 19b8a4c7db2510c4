"""`akka training datasets`: register (streamed, with a progress bar), list, get, versions,
alias."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import typer

from akka_training.cli.output import ago, details, emit, human_bytes, say, section, table, when
from akka_training.cli.state import state
from akka_training.cli.transfer import transfer_bar
from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.datasets import (
        AliasSet,
        DatasetDetail,
        DatasetSummary,
        DatasetVersion,
        Registered,
    )

app = typer.Typer(help="Register and inspect datasets.", no_args_is_help=True)

# Smaller uploads finish before a bar would be worth drawing.


@app.command("register")
def register(
    name: str = typer.Argument(..., metavar="PROJECT/NAME"),
    file: str = typer.Option(..., "-f", "--file", help="A JSONL file, or - for stdin."),
    alias: str = typer.Option(None, "--alias", help="Point this alias at the version."),
) -> None:
    """Stream a JSONL file into a new version of PROJECT/NAME (the same content: one version)."""
    source, size = _open(file)
    # A streamed body cannot be sent twice: make sure the token is good before streaming.
    state.client().whoami()
    try:
        with transfer_bar(size, "uploading") as advance:
            result = state.client().register_dataset(
                name, source, alias=alias, size=size, progress=advance
            )
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    emit(result, _print_registered)


@app.command("list")
def list_datasets(
    project: str = typer.Option(None, "--project", help="Only this project."),
) -> None:
    """Datasets you can see, with their newest version."""
    emit(state.client().datasets(project), _print_datasets)


@app.command("get")
def get(ref: str = typer.Argument(..., metavar="PROJECT/NAME[:vN|:ALIAS|@sha256:HASH]")) -> None:
    """A version's rows, bytes, format, hash and image flag, and every version of its name."""
    emit(state.client().dataset(ref), _print_dataset)


@app.command("versions")
def versions(name: str = typer.Argument(..., metavar="PROJECT/NAME")) -> None:
    """Every version of a dataset, oldest first."""
    emit(state.client().dataset_versions(name), _print_versions)


@app.command("alias")
def set_alias(
    ref: str = typer.Argument(..., metavar="PROJECT/NAME:vN"),
    alias: str = typer.Argument(..., metavar="ALIAS"),
) -> None:
    """Point ALIAS at a version (creating the alias or moving it)."""
    result = state.client().set_dataset_alias(ref, alias)
    emit(result, _print_alias)


# --- reading and progress ------------------------------------------------------------------------


def _open(file: str) -> tuple[BinaryIO, int | None]:
    """The file to send and its size when known (a size lets the trainer refuse an over-limit
    file before any of it is sent)."""
    if file == "-":
        stdin = sys.stdin.buffer
        info = os.fstat(stdin.fileno())
        if stat.S_ISREG(info.st_mode):
            return stdin, info.st_size - stdin.tell()
        return stdin, None
    path = Path(file)
    if not path.is_file():
        raise InvalidRequest(f"There is no file {file}; give a JSONL file with -f, or - for stdin.")
    f = open(path, "rb")  # noqa: SIM115 - closed by the caller after the upload
    return f, os.fstat(f.fileno()).st_size


# --- text output ---------------------------------------------------------------------------------


def _print_datasets(rows: list[DatasetSummary]) -> None:
    table(
        [
            "DATASET",
            "LATEST",
            "VERSIONS",
            "ROWS",
            "BYTES",
            "FORMAT",
            "IMAGES",
            "ALIASES",
            "UPDATED",
        ],
        [
            [
                d.dataset,
                f"v{d.latest}",
                d.versions,
                d.rows,
                human_bytes(d.bytes),
                d.format,
                d.has_images,
                [f"{a}→v{n}" for a, n in d.aliases.items()],
                ago(d.updated_at),
            ]
            for d in rows
        ],
    )


def _print_registered(d: Registered) -> None:
    summary = f"{d.rows} rows, {human_bytes(d.bytes)}, {d.format}, sha256:{d.sha256[:12]}"
    if d.created:
        say(f"Registered {d.ref} ({summary}).", d.ref)
    else:
        say(f"{d.dataset}: this content is already registered as {d.ref} ({summary}).", d.ref)
    if d.alias:
        _print_alias(d)


def _print_alias(d: Registered | AliasSet) -> None:
    if d.previous is None:
        print(f"Alias {d.alias} now points at {d.ref}.")
    elif d.previous == d.version:
        print(f"Alias {d.alias} already points at {d.ref}.")
    else:
        print(f"Alias {d.alias} moved from v{d.previous} to {d.ref}.")


def _print_dataset(d: DatasetDetail) -> None:
    details(
        [
            ("Dataset", d.ref),
            ("Latest", "yes" if d.latest else "no (a newer version exists)"),
            ("Format", d.format),
            ("Rows", d.rows),
            ("Bytes", f"{human_bytes(d.bytes)} ({d.bytes} bytes)"),
            ("SHA256", d.sha256),
            ("Images", d.has_images),
            ("Aliases", d.aliases),
            ("Created", when(d.created_at)),
        ]
    )
    print()
    section("Versions")
    _print_versions(d.versions, indent="  ")


def _print_versions(rows: list[DatasetVersion], indent: str = "") -> None:
    table(
        ["VERSION", "ROWS", "BYTES", "FORMAT", "IMAGES", "SHA256", "ALIASES", "CREATED"],
        [
            [
                f"v{v.version}",
                v.rows,
                human_bytes(v.bytes),
                v.format,
                v.has_images,
                v.sha256[:12],
                v.aliases,
                when(v.created_at),
            ]
            for v in rows
        ],
        indent=indent,
    )
