"""How a job gets its credentials: it is launched with a one-time bootstrap credential only
(`storage.tokens.create_bootstrap_token`), and exchanges it at its start, once, for its token
(minted then, for its attempt or its task, only while that is still current) and the store's
credentials. The job keeps both in its own memory and environment; nothing a cluster records of
the launch (Ray's logs, its dashboard, a launch file) still works by then."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from akka_training.api.jobs import JobCredentials
from akka_training.config.settings import Settings
from akka_training.core.errors import Conflict, Unauthorized
from akka_training.core.states import TERMINAL_TASK_STATES
from akka_training.storage.ids import hash_secret
from akka_training.storage.models import Attempt, Token
from akka_training.storage.tokens import create_job_token, create_task_token
from akka_training.storage.transitions import lock_run, lock_task

SPENT = (
    "This bootstrap credential is not known to this trainer, or was already exchanged; a job "
    "exchanges it once, at its start."
)


def exchange(
    session: Session, settings: Settings, secret: str, now: datetime | None = None
) -> JobCredentials:
    """The credentials of the job whose bootstrap credential is `secret`; the credential is
    spent in the same transaction, so a second exchange is refused."""
    now = now or datetime.now(UTC)
    token = session.scalar(
        select(Token).where(Token.hash == hash_secret(secret), Token.kind == "bootstrap")
    )
    if token is None or token.revoked_at is not None:
        raise Unauthorized(SPENT)
    if token.expires_at is not None and token.expires_at <= now:
        raise Unauthorized(
            "This bootstrap credential has expired: the job started later than "
            "trainer.controller.bootstrap-seconds after its launch."
        )
    # Spent at once, and only by the one exchange whose update finds it unspent.
    spent = session.execute(
        update(Token)
        .where(Token.id == token.id, Token.revoked_at.is_(None))
        .values(revoked_at=now, last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    if getattr(spent, "rowcount", 0) != 1:
        raise Unauthorized(SPENT)
    project = (token.projects or [""])[0]
    if token.task_id is not None:
        task = lock_task(session, token.task_id)
        if task is None or task.state in TERMINAL_TASK_STATES or task.reported:
            raise Conflict(f"Task {token.task_id} has ended; stop.")
        job_token = create_task_token(session, task.id, project)
    else:
        assert token.run_id is not None and token.attempt is not None
        run = lock_run(session, token.run_id)
        attempt = session.get(Attempt, (token.run_id, token.attempt))
        if run is None or attempt is None or run.attempt != token.attempt or attempt.outcome:
            raise Conflict(
                f"Attempt {token.attempt} of run {token.run_id} is no longer current; stop."
            )
        job_token = create_job_token(session, run.id, attempt.number, project)
    return JobCredentials(token=job_token, env=settings.trainer.storage.s3.job_env())
