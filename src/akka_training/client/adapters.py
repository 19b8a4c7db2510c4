"""A run's adapter and merged model, downloaded in the Hugging Face layout: the manifest first
(every file with its size and sha256), then each file streamed to disk and checked against it.
A download that fails, or whose checksum does not match, leaves nothing of itself behind."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from akka_training import api
from akka_training.client.runs import RunsApi
from akka_training.client.tasks import TASK_ENDED, TasksApi
from akka_training.core.downloads import download_directory
from akka_training.core.errors import AkkaError, InvalidRequest

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.adapters
    import akka_training.api.tasks  # noqa: F401


class AdaptersApi(RunsApi, TasksApi):
    # A merge is a task: `export_merged` follows it with `wait_task` (and names the directory
    # after the run's record).

    def adapter_manifest(
        self, run_ref: str, snapshot: str | None = None
    ) -> api.adapters.AdapterManifest:
        """The files of the run's final adapter (or of one snapshot's weights)."""
        params = {"snapshot": snapshot}
        return self.call(
            api.adapters.AdapterManifest, "GET", f"/v1/runs/{run_ref}/adapter", params=params
        )

    def merged_manifest(
        self, run_ref: str, snapshot: str | None = None
    ) -> api.adapters.AdapterManifest:
        """The files of the merged model a merge made (`merge_run`)."""
        params = {"snapshot": snapshot}
        return self.call(
            api.adapters.AdapterManifest, "GET", f"/v1/runs/{run_ref}/merged", params=params
        )

    def merge_run(self, run_ref: str, snapshot: str | None = None) -> api.tasks.TaskRecord:
        """Start merging the run's adapter (or a snapshot's weights) into its base model, as a
        task on the trainer's cluster; the task (the one already asked for, if any)."""
        body = api.adapters.MergeRequest(snapshot=snapshot).to_json()
        return self.call(api.tasks.TaskRecord, "POST", f"/v1/runs/{run_ref}/merged", json=body)

    def download_adapter(
        self,
        run: str,
        dest: str | Path | None = None,
        snapshot: str | None = None,
        *,
        overwrite: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> api.adapters.Downloaded:
        """Write the run's final adapter (or a snapshot's weights) into `dest` (default: a
        directory named after the run's modelName or id, in the working directory):
        ``adapter_config.json``, ``adapter_model.safetensors``, the tokenizer files, the model
        card ``README.md`` and ``training_settings.json``, each checked against its sha256.
        A non-empty `dest` is refused unless `overwrite`; `progress` is called with each
        chunk's length."""
        manifest = self.adapter_manifest(run, snapshot)
        return self.download_manifest(manifest, dest, overwrite=overwrite, progress=progress)

    def export_merged(
        self,
        run: str,
        dest: str | Path | None = None,
        snapshot: str | None = None,
        *,
        overwrite: bool = False,
        progress: Callable[[int], None] | None = None,
        on_update: Callable[[api.tasks.TaskRecord], None] | None = None,
        timeout: float | None = None,
    ) -> api.adapters.Downloaded:
        """Merge the run's adapter into its base model on the trainer's cluster (or reuse the
        merge done before), wait for it, and write the merged model (safetensors, config,
        tokenizer, card, settings) into `dest` (default: ``<name>-merged``). `on_update` sees
        the merge task each time it changes. A merge that fails raises with its reason."""
        if dest is None:
            record = self.run(run)
            dest = Path.cwd() / download_directory(record.model_name or record.id, snapshot, True)
        # Refused before the merge, not after it.
        _check_dest(Path(dest), overwrite)
        task = self.merge_run(run, snapshot)
        for update in self.wait_task(task.id, timeout=timeout):
            task = update
            if on_update is not None:
                on_update(update)
        if task.state != "SUCCEEDED":
            if task.state in TASK_ENDED:
                reason = task.failure or f"the task was {task.state}"
                raise AkkaError(f"The merge of run {run} {task.state}: {reason}")
            raise AkkaError(
                f"The merge of run {run} is still {task.state} after {timeout} s; follow it with "
                f"`akka training tasks get {task.id}`."
            )
        manifest = self.merged_manifest(run, snapshot)
        return self.download_manifest(
            manifest, dest, overwrite=overwrite, progress=progress, task=task.id
        )

    def download_manifest(
        self,
        manifest: api.adapters.AdapterManifest,
        dest: str | Path | None = None,
        *,
        overwrite: bool = False,
        progress: Callable[[int], None] | None = None,
        task: str | None = None,
    ) -> api.adapters.Downloaded:
        """Write the files `manifest` lists into `dest`, checking each one's size and sha256."""
        target = Path(dest) if dest is not None else Path.cwd() / manifest.directory
        fresh = _check_dest(target, overwrite)
        written: list[Path] = []
        try:
            target.mkdir(parents=True, exist_ok=True)
            for entry in manifest.files:
                written.append(self._fetch(manifest, entry, target, progress))
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            if fresh:
                _remove_empty_dirs(target)
            raise
        return api.adapters.Downloaded(
            run=manifest.run,
            kind=manifest.kind,
            snapshot=manifest.snapshot,
            step=manifest.step,
            directory=str(target.resolve()),
            base_model_name_or_path=manifest.base_model_name_or_path,
            files=manifest.files,
            total_bytes=manifest.total_bytes,
            task=task,
        )

    def _fetch(
        self,
        manifest: api.adapters.AdapterManifest,
        entry: api.adapters.AdapterFile,
        target: Path,
        progress: Callable[[int], None] | None,
    ) -> Path:
        final = target / _relative(entry.path)
        final.parent.mkdir(parents=True, exist_ok=True)
        part = final.with_name(final.name + ".part")
        digest = hashlib.sha256()
        size = 0
        url = f"/v1/runs/{manifest.run}/{manifest.kind}/files/{quote(entry.path)}"
        try:
            with open(part, "wb") as out:
                for chunk in self.stream_bytes(url, {"snapshot": manifest.snapshot}):
                    out.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    if progress is not None:
                        progress(len(chunk))
            got = digest.hexdigest()
            if size != entry.bytes or got != entry.sha256:
                raise AkkaError(
                    f"{entry.path} arrived with {size} bytes and sha256 {got}; the trainer's "
                    f"manifest says {entry.bytes} bytes and sha256 {entry.sha256}. Nothing of "
                    "this download was kept: download it again."
                )
            os.replace(part, final)
        finally:
            part.unlink(missing_ok=True)
        return final


def _check_dest(target: Path | None, overwrite: bool) -> bool:
    """Refuse a file, or a non-empty directory unless `overwrite`; whether `target` is new."""
    if target is None or not target.exists():
        return True
    if not target.is_dir():
        raise InvalidRequest(f"{target} is a file; download into a directory.")
    if any(target.iterdir()) and not overwrite:
        raise InvalidRequest(
            f"{target} is not empty; download into a new or empty directory, or pass "
            "overwrite=True to write over the files of the same names."
        )
    return not any(target.iterdir())


def _relative(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise AkkaError(f"The trainer's manifest names {path!r}, which leaves the directory.")
    return relative


def _remove_empty_dirs(root: Path) -> None:
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()
