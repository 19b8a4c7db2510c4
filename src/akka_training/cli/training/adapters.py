"""`akka training runs download` and `runs export --merged`: a run's adapter, or the merged
model a merge task makes on the cluster, written into a directory in the Hugging Face layout
(streamed from the trainer a file at a time, with a progress bar, every sha256 checked).
Registered on the `runs` group."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from akka_training.cli.arguments import RUN
from akka_training.cli.output import emit, human_bytes, table
from akka_training.cli.state import state
from akka_training.cli.training.task_follow import follow_task
from akka_training.cli.transfer import transfer_bar
from akka_training.core.downloads import download_directory
from akka_training.core.errors import InvalidRequest

if TYPE_CHECKING:
    from akka_training.api.adapters import Downloaded

# Smaller downloads finish before a bar would be worth drawing.


def download(
    run: str = RUN,
    snapshot: str = typer.Option(
        None, "--snapshot", help="A snapshot's weights (step-N) instead of the final adapter."
    ),
    directory: str = typer.Option(
        None,
        "-d",
        "--dir",
        help="Where to write (default: ./<modelName or run id>[-<snapshot>]). A non-empty "
        "directory is refused unless --force.",
    ),
) -> None:
    """Download a run's adapter in the Hugging Face layout, for PEFT and vLLM.

    Writes adapter_config.json, adapter_model.safetensors, the tokenizer and chat template the
    run trained with, README.md (the model card) and training_settings.json."""
    client = state.client()
    manifest = client.adapter_manifest(run, snapshot)
    target = Path(directory) if directory else Path.cwd() / manifest.directory
    with (
        writable_directory(target),
        transfer_bar(manifest.total_bytes, "downloading") as advance,
    ):
        written = client.download_manifest(
            manifest, target, overwrite=state.force, progress=advance
        )
    emit(written, print_written)


def export(
    run: str = RUN,
    merged: bool = typer.Option(
        False, "--merged", help="Merge the adapter into the base model (merge_and_unload)."
    ),
    snapshot: str = typer.Option(None, "--snapshot", help="Merge a snapshot's weights (step-N)."),
    directory: str = typer.Option(
        None,
        "-d",
        "--dir",
        help="Where to write (default: ./<modelName or run id>[-<snapshot>]-merged). A "
        "non-empty directory is refused unless --force.",
    ),
    timeout: float = typer.Option(
        None, "--timeout", help="Give up waiting for the merge after this many seconds."
    ),
) -> None:
    """Export a run as a merged full model (--merged), in safetensors.

    The merge runs as a task on the training cluster; its result (weights, config, tokenizer,
    model card) is then downloaded like an adapter."""
    if not merged:
        raise InvalidRequest(
            "runs export writes a merged model: add --merged (`akka training runs download` "
            "gives the adapter itself)."
        )
    client = state.client()
    if directory:
        target = Path(directory)
    else:
        record = client.run(run)
        target = Path.cwd() / download_directory(record.model_name or record.id, snapshot, True)
    with writable_directory(target):
        task = client.merge_run(run, snapshot)
        follow_task(
            client,
            task,
            f"The merge of run {run}",
            timeout,
            lambda p: f"{human_bytes(p.done or 0)} of {human_bytes(p.total or 0)}",
            ", or run this again",
        )
        manifest = client.merged_manifest(run, snapshot)
        with transfer_bar(manifest.total_bytes, "downloading") as advance:
            written = client.download_manifest(
                manifest, target, overwrite=state.force, progress=advance, task=task.id
            )
    emit(written, print_written)


@contextmanager
def writable_directory(target: Path) -> Iterator[None]:
    """`target`, made ready to write into (`refuse_unless_empty`); a directory this made is
    removed again when what follows fails and leaves it empty, so a refused merge or download
    leaves nothing behind."""
    created = not target.exists()
    refuse_unless_empty(target)
    try:
        yield
    except BaseException:
        if created:
            with suppress(OSError):  # only an empty one goes
                target.rmdir()
        raise


def refuse_unless_empty(target: Path) -> None:
    """`--force` is the one way to write into a directory that holds files."""
    if target.exists() and not target.is_dir():
        raise InvalidRequest(f"{target} is a file; give a directory with -d.")
    if target.is_dir() and any(target.iterdir()) and not state.force:
        raise InvalidRequest(
            f"{target} is not empty: give another directory with -d, or add --force to write "
            "over the files of the same names."
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidRequest(
            f"Cannot create {target}: {exc.strerror or exc}; give a directory you can write "
            "with -d."
        ) from None


def print_written(d: Downloaded) -> None:
    if state.quiet:
        print(d.directory)  # -q: where it went, for DIR=$(akka ... -q)
        return
    what = "merged model" if d.kind == "merged" else "adapter"
    source = f"snapshot {d.snapshot}" if d.snapshot else f"final {what}"
    print(
        f"Wrote the {source} of run {d.run} (step {d.step}) to {d.directory}: "
        f"{len(d.files)} files, {human_bytes(d.total_bytes)}, every sha256 checked."
    )
    print(f"Base model: {d.base_model_name_or_path}")
    print()
    table(
        ["FILE", "BYTES", "SHA256"],
        [[f.path, human_bytes(f.bytes), f.sha256[:16]] for f in d.files],
    )
