"""Minting tokens: the first admin token, the token of each job attempt and of each task. The request path
(`server/services/tokens.py`) and the controller (`controller/launch.py`) both mint, so the
minting lives here, beside the rows it writes, and so does the revocation of an attempt's tokens
when the attempt ends (its end report, or the controller seeing its job gone), and of a task's
tokens when the task ends."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from akka_training.storage.ids import hash_secret, new_id, new_secret
from akka_training.storage.models import Token


def create_admin_token(session: Session, name: str) -> str:
    secret = new_secret()
    session.add(Token(id=new_id("t"), name=name, kind="admin", hash=hash_secret(secret)))
    return secret


def create_job_token(session: Session, run_id: str, attempt: int, project: str) -> str:
    secret = new_secret()
    session.add(
        Token(
            id=new_id("j"),
            name=f"job {run_id}/{attempt}",
            kind="job",
            hash=hash_secret(secret),
            projects=[project],
            run_id=run_id,
            attempt=attempt,
        )
    )
    return secret


def create_task_token(session: Session, task_id: str, project: str) -> str:
    """A token that reports for one task and does nothing else."""
    secret = new_secret()
    session.add(
        Token(
            id=new_id("k"),
            name=f"task {task_id}",
            kind="task",
            hash=hash_secret(secret),
            projects=[project],
            task_id=task_id,
        )
    )
    return secret


def revoke_attempt_tokens(session: Session, run_id: str, attempt: int, now: datetime) -> None:
    """The tokens of one ended attempt stop working (every launch try minted one)."""
    session.execute(
        update(Token)
        .where(
            Token.kind == "job",
            Token.run_id == run_id,
            Token.attempt == attempt,
            Token.revoked_at.is_(None),
        )
        .values(revoked_at=now)
    )


def revoke_task_tokens(session: Session, task_id: str, now: datetime) -> None:
    """The tokens of one ended task stop working."""
    session.execute(
        update(Token)
        .where(Token.kind == "task", Token.task_id == task_id, Token.revoked_at.is_(None))
        .values(revoked_at=now)
    )
