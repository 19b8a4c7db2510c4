"""The `tinker` SDK's ``RestClient`` reads, answered from our runs and snapshots.

- A **training run** is an interactive run (method ``tinker``) of a project the key may use;
  its **training checkpoints** are its snapshots (``save_state``), ``tinker://RUN/weights/NAME``
  with the checkpoint id ``weights/NAME``.
- **Downloads.** A snapshot's weights in the Hugging Face layout (the PEFT adapter, as
  ``akka training runs download RUN --snapshot NAME`` writes it) are the *external weights*
  ``tinker://RUN/external_weights/NAME``: ``get_external_weights_urls`` answers a URL a file, signed
  by this service process and valid for an hour, that needs no key (as the SDK's
  ``tinker checkpoint download`` expects).
- Sampler weights live in their run's job and are not listed; the reads and writes the trainer
  has no counterpart for (publishing, TTLs, copying, deleting checkpoints, moving sessions,
  traces, search) are refused with a sentence saying what to use instead.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from akka_training.core.errors import Forbidden, InvalidRequest, NotFound
from akka_training.core.interactive import INTERACTIVE_METHOD, InteractiveSettings
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.services import adapters
from akka_training.server.services.tinker import Sessions
from akka_training.storage.models import Run, Snapshot

URL_SECONDS = 3600
MAX_LIMIT = 1000


def _utc(moment: datetime) -> datetime:
    """A stored time as UTC (SQLite gives it back without its zone)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return _utc(moment).isoformat()


def _page(limit: int, offset: int) -> tuple[int, int]:
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise InvalidRequest(f"limit is 1 to {MAX_LIMIT} and offset 0 or more.")
    return limit, offset


def _projects(principal: Principal, project: str | None) -> tuple[str, ...] | None:
    """The projects a listing covers: `project` if given (and the key may use it), else every
    project of the key (None: all)."""
    if project:
        principal.require(project)
        return (project,)
    principal.refuse_reporters()
    return principal.projects


def _run(db: Session, principal: Principal, sessions: Sessions, run_id: str) -> Run:
    run = db.get(Run, sessions.run_of(db, run_id))
    if run is None or run.method != INTERACTIVE_METHOD:
        raise NotFound(f"There is no training run {run_id!r} on this trainer.")
    if not principal.can(run.project):
        raise Forbidden(
            f"This key has no access to project {run.project!r}; use a key of that project."
        )
    return run


def _snapshots(db: Session, run_ids: list[str]) -> list[Snapshot]:
    if not run_ids:
        return []
    return list(
        db.scalars(
            select(Snapshot)
            .where(Snapshot.run_id.in_(run_ids), Snapshot.swept_at.is_(None))
            .order_by(Snapshot.created_at.desc(), Snapshot.name)
        )
    )


def _checkpoint(snapshot: Snapshot) -> dict[str, Any]:
    size = (snapshot.weights_bytes or 0) + (snapshot.training_state_bytes or 0)
    return {
        "checkpoint_id": f"weights/{snapshot.name}",
        "checkpoint_type": "training",
        "time": _iso(snapshot.created_at),
        "tinker_path": f"tinker://{snapshot.run_id}/weights/{snapshot.name}",
        "size_bytes": size or None,
        "public": False,
        "training_run_id": snapshot.run_id,
    }


def _training_run(db: Session, run: Run) -> dict[str, Any]:
    settings = InteractiveSettings.model_validate(run.settings)
    saved = _snapshots(db, [run.id])
    last = max([_utc(run.phase_since), *(_utc(s.created_at) for s in saved)])
    return {
        "training_run_id": run.id,
        "base_model": settings.base_model.id,
        "model_owner": run.project,
        "is_lora": True,
        "corrupted": False,
        "lora_rank": settings.lora.rank,
        "last_request_time": _iso(last),
        "last_checkpoint": _checkpoint(saved[0]) if saved else None,
        "last_sampler_checkpoint": None,
        "user_metadata": {"project": run.project, "phase": run.phase.lower()},
    }


def list_training_runs(
    db: Session, principal: Principal, limit: int, offset: int, project: str | None
) -> dict[str, Any]:
    limit, offset = _page(limit, offset)
    projects = _projects(principal, project)
    where = [Run.method == INTERACTIVE_METHOD]
    if projects is not None:
        where.append(Run.project.in_(projects))
    total = db.scalar(select(func.count()).select_from(Run).where(*where)) or 0
    runs = db.scalars(
        select(Run)
        .where(*where)
        .order_by(Run.created_at.desc(), Run.id)
        .limit(limit)
        .offset(offset)
    )
    return {
        "training_runs": [_training_run(db, run) for run in runs],
        "cursor": {"offset": offset, "limit": limit, "total_count": total},
    }


def get_training_run(
    db: Session, principal: Principal, sessions: Sessions, run_id: str
) -> dict[str, Any]:
    return _training_run(db, _run(db, principal, sessions, run_id))


def list_checkpoints(
    db: Session, principal: Principal, sessions: Sessions, run_id: str
) -> dict[str, Any]:
    run = _run(db, principal, sessions, run_id)
    return {"checkpoints": [_checkpoint(s) for s in _snapshots(db, [run.id])], "cursor": None}


def list_user_checkpoints(
    db: Session, principal: Principal, limit: int, offset: int
) -> dict[str, Any]:
    limit, offset = _page(limit, offset)
    projects = _projects(principal, None)
    where = [Run.method == INTERACTIVE_METHOD]
    if projects is not None:
        where.append(Run.project.in_(projects))
    run_ids = list(db.scalars(select(Run.id).where(*where)))
    saved = _snapshots(db, run_ids)
    return {
        "checkpoints": [_checkpoint(s) for s in saved[offset : offset + limit]],
        "cursor": {"offset": offset, "limit": limit, "total_count": len(saved)},
    }


def _saved(db: Session, principal: Principal, sessions: Sessions, path: str) -> Snapshot:
    """The snapshot a ``tinker://RUN/weights/NAME`` (or ``external_weights/NAME``) path names."""
    head, _, rest = path.removeprefix("tinker://").partition("/")
    kind, _, name = rest.partition("/")
    if not path.startswith("tinker://") or kind not in ("weights", "external_weights") or not name:
        raise InvalidRequest(
            f"{path!r} is not a path of saved weights (tinker://RUN/weights/NAME, or "
            "tinker://RUN/external_weights/NAME for its files)."
        )
    run = _run(db, principal, sessions, head)
    found = db.get(Snapshot, (run.id, name))
    if found is None or found.swept_at is not None:
        raise NotFound(f"Run {run.id} has no saved weights {name!r}.")
    return found


def weights_info(
    db: Session, principal: Principal, sessions: Sessions, path: str
) -> dict[str, Any]:
    run = _run(db, principal, sessions, _saved(db, principal, sessions, path).run_id)
    settings = InteractiveSettings.model_validate(run.settings)
    lora = settings.lora
    return {
        "base_model": settings.base_model.id,
        "optimizer_config": {"type": "adamw"},
        "is_lora": True,
        "lora_rank": lora.rank,
        "train_unembed": lora.train_unembed,
        "train_mlp": lora.train_mlp,
        "train_attn": lora.train_attn,
    }


# --- downloads ------------------------------------------------------------------------------------


def sign(secret: bytes, run_id: str, name: str, path: str, expires: int) -> str:
    message = f"{run_id}\n{name}\n{path}\n{expires}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def external_weights_urls(
    ctx: AppContext,
    principal: Principal,
    sessions: Sessions,
    run_id: str,
    checkpoint_id: str,
    base_url: str,
) -> dict[str, Any]:
    """A signed URL for each file of the snapshot's weights in the Hugging Face layout."""
    kind, _, name = checkpoint_id.partition("/")
    with ctx.db.session() as db:
        saved = _saved(db, principal, sessions, f"tinker://{run_id}/{kind}/{name}")
    files = adapters.manifest(ctx, principal, saved.run_id, saved.name, "adapter").files
    expires_at = ctx.clock.now() + timedelta(seconds=URL_SECONDS)
    expires = int(expires_at.timestamp())
    root = base_url.rstrip("/") + "/tinker/api/v1/external_weights"
    urls = {}
    for file in files:
        signature = sign(sessions.secret, saved.run_id, saved.name, file.path, expires)
        urls[file.path] = (
            f"{root}/{saved.run_id}/{quote(saved.name)}/files/{quote(file.path)}"
            f"?expires={expires}&signature={signature}"
        )
    return {"urls": urls, "expires": _iso(expires_at)}


def open_signed(
    ctx: AppContext,
    sessions: Sessions,
    run_id: str,
    name: str,
    path: str,
    expires: int,
    signature: str,
) -> tuple[Iterator[bytes], int]:
    """The chunks and size of one file a signed URL names, if its signature holds and it has not
    expired."""
    wanted = sign(sessions.secret, run_id, name, path, expires)
    if not hmac.compare_digest(wanted, signature):
        raise Forbidden(
            "This download URL is not valid here (signed by another trainer process, or "
            "changed); ask for new ones with get_external_weights_urls."
        )
    if ctx.clock.now().timestamp() > expires:
        raise Forbidden(
            "This download URL has expired; ask for new ones with get_external_weights_urls."
        )
    with ctx.db.session() as db:
        run = db.get(Run, run_id)
        if run is None:
            raise NotFound(f"There is no training run {run_id!r} on this trainer.")
        project = run.project
    reader = Principal("tinker-download", run_id, "project", (project,))
    return adapters.open_file(ctx, reader, run_id, name, "adapter", path)


# --- sessions -------------------------------------------------------------------------------------


def get_session(
    db: Session, principal: Principal, sessions: Sessions, session_id: str
) -> dict[str, Any]:
    """The session's training runs and the sampling clients it created (each answered by a
    training run's job), with its project, the time of its latest heartbeat, and how it ended
    if it has."""
    found = sessions.get(db, principal, session_id)
    return {
        "training_run_ids": [*found.runs],
        "sampler_ids": [*found.samplers],
        "user_metadata": {
            "project": found.project,
            "heartbeat_at": _iso(found.beat_at),
            **({"ended": found.ended} if found.ended else {}),
        },
    }


def list_sessions(
    db: Session, principal: Principal, sessions: Sessions, limit: int, offset: int
) -> dict[str, Any]:
    limit, offset = _page(limit, offset)
    principal.refuse_reporters()
    return {"sessions": sessions.visible(db, principal, limit, offset)}


# --- what the trainer does not do -----------------------------------------------------------------

UNSUPPORTED = {
    "delete_checkpoint": (
        "Deleting a checkpoint is not supported by this trainer; its snapshots are kept and "
        "swept by the run's retention (`akka training runs snapshots RUN` lists them)."
    ),
    "publish_checkpoint": (
        "Publishing a checkpoint is not supported by this trainer; a snapshot is readable by "
        "every key of its project (download it with get_external_weights_urls)."
    ),
    "checkpoint_ttl": (
        "Checkpoint TTLs are not supported by this trainer; snapshots are kept and swept by "
        "the run's retention."
    ),
    "copy_weights": (
        "Copying weights between projects is not supported by this trainer; start a training "
        "client from the path instead (any project the key may use can read it)."
    ),
    "save_weights_external": (
        "save_weights_external is not supported by this trainer; save_state(NAME), then "
        "download tinker://RUN/external_weights/NAME (the snapshot in the Hugging Face layout)."
    ),
    "session_project": (
        "Moving a session to another project is not supported by this trainer; a session "
        "trains in the project it was created in (project_id= of ServiceClient)."
    ),
    "trace_export": (
        "Session traces are not supported by this trainer; a run's steps and events are in "
        "`akka training runs metrics RUN` and `runs get RUN`."
    ),
    "search_sessions": (
        "Searching sessions is not supported by this trainer; use list_training_runs or "
        "`akka training runs list`."
    ),
}


def unsupported(what: str) -> InvalidRequest:
    return InvalidRequest(UNSUPPORTED[what])
