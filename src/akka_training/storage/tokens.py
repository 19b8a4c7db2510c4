"""Minting tokens: the first admin token, the token of each job attempt and of each task. The request path
(`server/services/tokens.py`) and the controller (`controller/launch.py`) both mint, so the
minting lives here, beside the rows it writes, and so does the revocation of an attempt's tokens
when the attempt ends (its end report, or the controller seeing its job gone), and of a task's
tokens when the task ends.

A job is launched with a bootstrap credential only (`create_bootstrap_token`): a short-lived row
of kind ``bootstrap``, tied to one attempt or one task, that works on one route, once
(``POST /v1/jobs/bootstrap``, `server/services/job_credentials.py`), which mints the job's or the
task's real token then. So what a cluster records of a job's environment (Ray's logs, its
dashboard, a launch file) holds nothing that still works once the job has started."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from akka_training.storage.ids import hash_secret, new_id, new_secret
from akka_training.storage.models import Token


def _mint(session: Session, prefix: str, name: str, kind: str, **fields: Any) -> str:
    """A new token row of `kind` (its id starting with `prefix`); the secret, which is stored
    only as its hash."""
    secret = new_secret()
    session.add(Token(id=new_id(prefix), name=name, kind=kind, hash=hash_secret(secret), **fields))
    return secret


def create_admin_token(session: Session, name: str) -> str:
    return _mint(session, "t", name, "admin")


def create_job_token(session: Session, run_id: str, attempt: int, project: str) -> str:
    return _mint(
        session,
        "j",
        f"job {run_id}/{attempt}",
        "job",
        projects=[project],
        run_id=run_id,
        attempt=attempt,
    )


def create_task_token(session: Session, task_id: str, project: str) -> str:
    """A token that reports for one task and does nothing else."""
    return _mint(session, "k", f"task {task_id}", "task", projects=[project], task_id=task_id)


def create_bootstrap_token(
    session: Session,
    project: str,
    now: datetime,
    lifetime: timedelta,
    *,
    run_id: str | None = None,
    attempt: int | None = None,
    task_id: str | None = None,
) -> str:
    """A one-time credential that a job (one attempt of a run) or a task exchanges for its token
    at its start, within `lifetime` of `now`."""
    what = f"job {run_id}/{attempt}" if task_id is None else f"task {task_id}"
    return _mint(
        session,
        "b",
        f"bootstrap of {what}",
        "bootstrap",
        projects=[project],
        run_id=run_id,
        attempt=attempt,
        task_id=task_id,
        created_at=now,
        expires_at=now + lifetime,
    )


def revoke_attempt_tokens(session: Session, run_id: str, attempt: int, now: datetime) -> None:
    """The tokens of one ended attempt stop working (every launch try minted one), and so does
    any bootstrap credential of it not yet exchanged."""
    session.execute(
        update(Token)
        .where(
            Token.kind.in_(("job", "bootstrap")),
            Token.run_id == run_id,
            Token.attempt == attempt,
            Token.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )


def revoke_task_tokens(session: Session, task_id: str, now: datetime) -> None:
    """The tokens of one ended task stop working, and so does its bootstrap credential."""
    session.execute(
        update(Token)
        .where(
            Token.kind.in_(("task", "bootstrap")),
            Token.task_id == task_id,
            Token.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )
