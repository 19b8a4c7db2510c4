"""Finding rows by what users type: ids and unambiguous id prefixes."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import InvalidRequest, NotFound
from akka_training.server.auth import Principal
from akka_training.storage.models import Pipeline, Run
from akka_training.storage.transitions import lock_pipeline, lock_run


def find_run(session: Session, run_ref: str, principal: Principal | None = None) -> Run:
    """A run by id or by an unambiguous prefix of its id. A prefix matches only the runs of
    the projects `principal` may read, so that a prefix of another project's run answers as
    one that matches nothing (neither a refusal nor an ambiguity naming another's ids tells
    that such a run exists). A whole id is looked up as it is; the caller checks access."""
    run = session.get(Run, run_ref)
    if run is not None:
        return run
    if len(run_ref) < 3:
        raise InvalidRequest("Give at least 3 characters of a run id.")
    query = select(Run).where(Run.id.startswith(run_ref))
    if principal is not None and principal.projects is not None:
        query = query.where(Run.project.in_(principal.projects))
    matches = session.scalars(query.limit(3)).all()
    if not matches:
        raise NotFound(f"There is no run {run_ref!r}.")
    if len(matches) > 1:
        ids = ", ".join(r.id for r in matches)
        raise InvalidRequest(f"{run_ref!r} matches several runs ({ids}); give more of the id.")
    return matches[0]


def run_for(session: Session, principal: Principal, run_ref: str) -> Run:
    run = find_run(session, run_ref, principal)
    principal.require(run.project)
    return run


def locked_run_for(session: Session, principal: Principal, run_ref: str) -> Run:
    """`run_for`, read as stored and locked until the request's transaction ends: what a request
    that changes the run decides on (nothing else moves the run before it commits)."""
    run = run_for(session, principal, run_ref)
    stored = lock_run(session, run.id)
    if stored is None:
        raise NotFound(f"There is no run {run_ref!r}.")
    return stored


def locked_pipeline_for(session: Session, principal: Principal, ref: str) -> Pipeline:
    """`pipeline_for`, read as stored and locked until the request's transaction ends."""
    pipeline = pipeline_for(session, principal, ref)
    stored = lock_pipeline(session, pipeline.id)
    if stored is None:
        raise NotFound(f"There is no pipeline {ref!r}.")
    return stored


def pipeline_for(session: Session, principal: Principal, ref: str) -> Pipeline:
    pipeline = session.get(Pipeline, ref)
    if pipeline is None and len(ref) >= 3:
        # As for runs: a prefix matches the pipelines of the caller's projects only.
        query = select(Pipeline).where(Pipeline.id.startswith(ref))
        if principal.projects is not None:
            query = query.where(Pipeline.project.in_(principal.projects))
        matches = session.scalars(query.limit(3)).all()
        if len(matches) > 1:
            raise InvalidRequest(f"{ref!r} matches several pipelines; give more of the id.")
        pipeline = matches[0] if matches else None
    if pipeline is None:
        raise NotFound(f"There is no pipeline {ref!r}.")
    principal.require(pipeline.project)
    return pipeline
