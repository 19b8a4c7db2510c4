"""Projects: the tenancy unit, with a device quota."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from akka_training.api.projects import Member, ProjectDetail
from akka_training.api.projects import Project as ProjectRecord
from akka_training.config.settings import ProjectQuota
from akka_training.core.errors import Conflict, InvalidRequest, NotFound
from akka_training.core.refs import valid_name
from akka_training.core.states import ClaimState
from akka_training.server.auth import Principal
from akka_training.storage.models import Claim, Project, Token


def create_project(
    session: Session,
    principal: Principal,
    name: str,
    quota: int | None,
    description: str | None = None,
) -> ProjectRecord:
    principal.require_admin()
    if not valid_name(name):
        raise InvalidRequest(
            f"{name!r} is not a project name; use lower-case letters, digits, '.', '_' and '-'."
        )
    _check_quota(quota)
    if session.get(Project, name) is not None:
        raise Conflict(f"Project {name!r} already exists.")
    project = Project(name=name, quota=quota, description=description)
    session.add(project)
    session.flush()
    return project_record(session, project)


def set_quota(
    session: Session, principal: Principal, name: str, quota: int | None
) -> ProjectRecord:
    principal.require_admin()
    project = get_project_row(session, name)
    _check_quota(quota)
    project.quota = quota
    return project_record(session, project)


def _check_quota(quota: int | None) -> None:
    if quota is not None and quota < 0:
        raise InvalidRequest("A quota is a number of devices, 0 or more.")


def list_projects(session: Session, principal: Principal) -> list[ProjectRecord]:
    rows = session.scalars(select(Project).order_by(Project.name))
    return [project_record(session, p) for p in rows if principal.can(p.name)]


def get_project(session: Session, principal: Principal, name: str) -> ProjectDetail:
    principal.require(name)
    project = get_project_row(session, name)
    tokens = session.scalars(
        select(Token)
        .where(Token.kind.in_(("admin", "project")), Token.revoked_at.is_(None))
        .order_by(Token.kind, Token.created_at, Token.id)  # admins first, then oldest first
    )
    members = [
        Member(token=t.id, name=t.name, kind=t.kind)
        for t in tokens
        if t.kind == "admin" or name in (t.projects or [])
    ]
    return ProjectDetail(**dict(project_record(session, project)), members=members)


def get_project_row(session: Session, name: str) -> Project:
    project = session.get(Project, name)
    if project is None:
        raise NotFound(
            f"There is no project {name!r}; create it with `akka training projects create {name}`."
        )
    return project


def apply_configured_quotas(session: Session, quotas: list[ProjectQuota]) -> None:
    """Projects named in the settings exist with the quota the settings give them."""
    for q in quotas:
        project = session.get(Project, q.name)
        if project is None:
            session.add(Project(name=q.name, quota=q.quota))
        else:
            project.quota = q.quota


def held_devices(session: Session, project: str) -> tuple[int, int]:
    """(devices held, claims queued) by a project."""
    held = session.scalar(
        select(func.coalesce(func.sum(Claim.devices), 0)).where(
            Claim.project == project, Claim.state == ClaimState.GRANTED
        )
    )
    queued = session.scalar(
        select(func.count()).where(Claim.project == project, Claim.state == ClaimState.QUEUED)
    )
    return int(held or 0), int(queued or 0)


def project_record(session: Session, project: Project) -> ProjectRecord:
    held, queued = held_devices(session, project.name)
    return ProjectRecord(
        name=project.name,
        description=project.description,
        quota=project.quota,
        held=held,
        queued=queued,
        created_at=project.created_at,
    )
