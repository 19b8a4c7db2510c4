"""Finding rows by what users type: ids and unambiguous id prefixes.

A caller learns nothing of another project's rows: a run, pipeline, task or evaluation of a
project the caller may not read answers exactly as one that does not exist (404, "There is no
run 'ID'."), whether it is named by its whole id or by a prefix. References that name their
project (``PROJECT/NAME`` datasets and bundles) are refused for the project before anything is
looked up, so they answer the same whether the name exists or not."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from akka_training.core.errors import InvalidRequest, NotFound
from akka_training.server.auth import Principal
from akka_training.storage.models import Pipeline, Run
from akka_training.storage.transitions import lock_pipeline, lock_run


def find_run(session: Session, run_ref: str, principal: Principal) -> Run:
    """A run of the projects `principal` may read, by id or by an unambiguous prefix of its id.
    Another project's run, by whole id or by prefix, answers as one that does not exist (neither
    a refusal nor an ambiguity naming another's ids tells that such a run exists)."""
    principal.refuse_reporters()
    run = session.get(Run, run_ref)
    if run is not None and principal.can(run.project):
        return run
    if len(run_ref) < 3:
        raise InvalidRequest("Give at least 3 characters of a run id.")
    query = select(Run).where(Run.id.startswith(run_ref))
    if principal.projects is not None:
        query = query.where(Run.project.in_(principal.projects))
    matches = session.scalars(query.limit(3)).all()
    if not matches:
        raise NotFound(f"There is no run {run_ref!r}.")
    if len(matches) > 1:
        ids = ", ".join(r.id for r in matches)
        raise InvalidRequest(f"{run_ref!r} matches several runs ({ids}); give more of the id.")
    return matches[0]


def run_for(session: Session, principal: Principal, run_ref: str) -> Run:
    return find_run(session, run_ref, principal)


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
    """A pipeline of the projects `principal` may read, by id or prefix; another project's
    answers as one that does not exist."""
    principal.refuse_reporters()
    pipeline = session.get(Pipeline, ref)
    if pipeline is not None and not principal.can(pipeline.project):
        pipeline = None
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
    return pipeline
