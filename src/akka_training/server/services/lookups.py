"""Finding rows by what users type: ids and unambiguous id prefixes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import InvalidRequest, NotFound
from akka_training.server.auth import Principal
from akka_training.storage.models import Pipeline, Run


def find_run(session: Session, run_ref: str) -> Run:
    """A run by id or by an unambiguous prefix of its id."""
    run = session.get(Run, run_ref)
    if run is not None:
        return run
    if len(run_ref) < 3:
        raise InvalidRequest("Give at least 3 characters of a run id.")
    matches = session.scalars(select(Run).where(Run.id.startswith(run_ref)).limit(3)).all()
    if not matches:
        raise NotFound(f"There is no run {run_ref!r}.")
    if len(matches) > 1:
        ids = ", ".join(r.id for r in matches)
        raise InvalidRequest(f"{run_ref!r} matches several runs ({ids}); give more of the id.")
    return matches[0]


def run_for(session: Session, principal: Principal, run_ref: str) -> Run:
    run = find_run(session, run_ref)
    principal.require(run.project)
    return run


def pipeline_for(session: Session, principal: Principal, ref: str) -> Pipeline:
    pipeline = session.get(Pipeline, ref)
    if pipeline is None and len(ref) >= 3:
        matches = session.scalars(
            select(Pipeline).where(Pipeline.id.startswith(ref)).limit(3)
        ).all()
        if len(matches) > 1:
            raise InvalidRequest(f"{ref!r} matches several pipelines; give more of the id.")
        pipeline = matches[0] if matches else None
    if pipeline is None:
        raise NotFound(f"There is no pipeline {ref!r}.")
    principal.require(pipeline.project)
    return pipeline
