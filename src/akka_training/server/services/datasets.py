"""Datasets: immutable, content-hashed versions of JSONL rows, numbered per name, with movable
aliases.

A reference is ``PROJECT/NAME`` (the newest version), ``PROJECT/NAME:vN``,
``PROJECT/NAME:ALIAS`` or ``PROJECT/NAME@sha256:PREFIX`` (any unambiguous prefix of six or more
hex digits). `resolve_dataset` turns one into the version it names; runs call it to pin the
version they are admitted with. A version's content lives in the blob store under its hash
(`core.blobkeys.dataset_key`), so the same bytes are stored once however many names point at them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from akka_training.api import datasets as answers
from akka_training.core.blobkeys import dataset_key
from akka_training.core.errors import AkkaError, Conflict, InvalidRequest, NotFound, storage_full
from akka_training.core.refs import BadReference, Ref, parse_ref, valid_name
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal
from akka_training.server.dataset_intake import Intake, receive_dataset
from akka_training.server.errors import full_storage
from akka_training.server.services.projects import get_project_row
from akka_training.storage.models import DatasetAlias, DatasetVersion
from akka_training.telemetry import catalog as names

log = logging.getLogger(__name__)

_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VERSION_TAG_RE = re.compile(r"^v[0-9]+$")
# Concurrent registrations of one name race for the next version number; the loser retries.
_COMMIT_TRIES = 5
_LISTED = 10  # versions or aliases named in a not-found message


def resolve_dataset(session: Session, ref_text: str, principal: Principal) -> DatasetVersion:
    """The version `ref_text` names. Raises InvalidRequest for a malformed reference, Forbidden
    for a project `principal` may not read (before anything is looked up, so that the answer
    is the same whether the name exists or not) and NotFound, naming what exists, for an unknown
    project, dataset, version, alias or hash."""
    ref = parse_dataset_ref(ref_text)
    principal.require(ref.project)
    get_project_row(session, ref.project)
    versions = _versions(session, ref.project, ref.name)
    if not versions:
        raise NotFound(_no_dataset(session, ref))
    if ref.version is not None:
        for v in versions:
            if v.version == ref.version:
                return v
        raise NotFound(
            f"{ref.full_name} has no v{ref.version}; its versions: {_version_list(versions)}."
        )
    if ref.alias is not None:
        row = session.get(DatasetAlias, (ref.project, ref.name, ref.alias))
        if row is None:
            aliases = _aliases(session, ref.project, ref.name)
            known = (
                "its aliases: " + ", ".join(f"{a} (v{n})" for a, n in aliases[:_LISTED])
                if aliases
                else f"it has none; set one with `akka training datasets alias {ref.full_name}:vN "
                f"{ref.alias}`"
            )
            raise NotFound(f"{ref.full_name} has no alias {ref.alias!r}; {known}.")
        return next(v for v in versions if v.version == row.version)
    if ref.digest is not None:
        matches = [v for v in versions if v.sha256.startswith(ref.digest)]
        if len(matches) == 1:
            return matches[0]
        hashes = ", ".join(f"v{v.version} sha256:{v.sha256[:12]}" for v in versions[-_LISTED:])
        if not matches:
            raise NotFound(
                f"No version of {ref.full_name} has a hash starting {ref.digest}; its versions: "
                f"{hashes}."
            )
        raise InvalidRequest(
            f"sha256:{ref.digest} matches {len(matches)} versions of {ref.full_name} "
            f"({', '.join(f'v{v.version}' for v in matches)}); give more of the hash."
        )
    return versions[-1]


def parse_dataset_ref(text: str) -> Ref:
    try:
        return parse_ref(text)
    except BadReference as exc:
        raise InvalidRequest(str(exc)) from None


def version_ref(version: DatasetVersion) -> str:
    """The pinned reference of a version: ``PROJECT/NAME:vN``."""
    return f"{version.project}/{version.name}:v{version.version}"


async def register_dataset(
    ctx: AppContext,
    principal: Principal,
    project: str,
    name: str,
    alias: str | None,
    body: AsyncIterator[bytes],
    declared_bytes: int | None,
) -> answers.Registered:
    """Stream `body` into a new version of PROJECT/NAME, or find the version that already holds
    the same content; `alias`, when given, then points at it. Everything is checked before the
    body is read, so a refusal costs the client no upload."""
    principal.require(project)
    if not valid_name(name):
        raise InvalidRequest(
            f"{name!r} is not a dataset name; use lower-case letters, digits, '.', '_' and '-'."
        )
    if alias is not None:
        check_alias(alias)
    if ctx.telemetry is None:
        return await _register(ctx, project, name, alias, body, declared_bytes)
    with ctx.telemetry.operation("dataset.register", **{names.PROJECT: project}) as span:
        result = await _register(ctx, project, name, alias, body, declared_bytes)
        span.set_attribute(names.DATASET, result.ref)
        return result


async def _register(
    ctx: AppContext,
    project: str,
    name: str,
    alias: str | None,
    body: AsyncIterator[bytes],
    declared_bytes: int | None,
) -> answers.Registered:
    await run_in_threadpool(_require_project, ctx, project)
    try:
        intake = await receive_dataset(
            body, ctx.blobs, ctx.settings.trainer.datasets.max_bytes, declared_bytes
        )
    except AkkaError as exc:
        log.info("refused an upload to %s/%s: %s", project, name, exc.message.splitlines()[0])
        raise
    except OSError as exc:
        full = storage_full(exc)
        if full is None:
            raise
        log.error("an upload to %s/%s found the storage full: %s", project, name, full)
        raise full_storage(full) from exc
    try:
        result = await run_in_threadpool(_commit, ctx, project, name, alias, intake)
    finally:
        ctx.blobs.delete(intake.staged_key)
    log.info(
        "%s %s (%d rows, %d bytes, sha256:%s)",
        "registered" if result.created else "already held",
        result.ref,
        intake.rows,
        intake.bytes,
        intake.sha256[:12],
    )
    return result


def list_datasets(
    session: Session, principal: Principal, project: str | None
) -> list[answers.DatasetSummary]:
    """One entry per dataset name, with its newest version."""
    if project is not None:
        principal.require(project)
        get_project_row(session, project)
    newest = (
        select(
            DatasetVersion.project,
            DatasetVersion.name,
            func.max(DatasetVersion.version).label("newest"),
            func.count().label("count"),
        )
        .group_by(DatasetVersion.project, DatasetVersion.name)
        .subquery()
    )
    query = (
        select(DatasetVersion, newest.c.count)
        .join(
            newest,
            (DatasetVersion.project == newest.c.project)
            & (DatasetVersion.name == newest.c.name)
            & (DatasetVersion.version == newest.c.newest),
        )
        .order_by(DatasetVersion.project, DatasetVersion.name)
    )
    if project is not None:
        query = query.where(DatasetVersion.project == project)
    out = []
    for version, count in session.execute(query):
        if not principal.can(version.project):
            continue
        aliases = _aliases(session, version.project, version.name)
        out.append(
            answers.DatasetSummary(
                dataset=f"{version.project}/{version.name}",
                project=version.project,
                name=version.name,
                latest=version.version,
                versions=int(count),
                rows=version.rows,
                bytes=version.bytes,
                format=version.format,
                has_images=version.has_images,
                sha256=version.sha256,
                aliases={a: n for a, n in aliases},
                updated_at=version.created_at,
            )
        )
    return out


def get_dataset(session: Session, principal: Principal, ref_text: str) -> answers.DatasetDetail:
    """The version a reference names, with every version of its name."""
    ref = parse_dataset_ref(ref_text)
    version = resolve_dataset(session, ref_text, principal)
    return answers.DatasetDetail(
        **dict(version_record(session, version)),
        versions=list_versions(session, principal, ref.full_name),
    )


def list_versions(
    session: Session, principal: Principal, ref_text: str
) -> list[answers.DatasetVersion]:
    """Every version of a name, oldest first (a tag in the reference is ignored)."""
    ref = parse_dataset_ref(ref_text)
    principal.require(ref.project)
    get_project_row(session, ref.project)
    versions = _versions(session, ref.project, ref.name)
    if not versions:
        raise NotFound(_no_dataset(session, ref))
    aliases = _aliases(session, ref.project, ref.name)
    return [_version_record(v, aliases, versions[-1].version) for v in versions]


def set_alias(
    session: Session, principal: Principal, ref_text: str, alias: str
) -> answers.AliasSet:
    """Point `alias` at the version `ref_text` names; returns that version and where the alias
    pointed before (`previous`, a version number or None)."""
    ref = parse_dataset_ref(ref_text)
    principal.require(ref.project)
    check_alias(alias)
    version = resolve_dataset(session, ref_text, principal)
    previous = _point_alias(session, version, alias)
    return answers.AliasSet(
        **dict(version_record(session, version)), alias=alias, previous=previous
    )


def check_alias(alias: str) -> None:
    if _VERSION_TAG_RE.match(alias):
        raise InvalidRequest(
            f"{alias!r} cannot be an alias: it reads as a version number; choose a name such as "
            "prod or best."
        )
    if not _ALIAS_RE.match(alias):
        raise InvalidRequest(
            f"{alias!r} is not an alias; use letters, digits, '.', '_' and '-' (at most 64)."
        )


def version_record(session: Session, version: DatasetVersion) -> answers.DatasetVersion:
    aliases = _aliases(session, version.project, version.name)
    newest = session.scalar(
        select(func.max(DatasetVersion.version)).where(
            DatasetVersion.project == version.project, DatasetVersion.name == version.name
        )
    )
    return _version_record(version, aliases, int(newest or version.version))


# --- helpers -------------------------------------------------------------------------------------


def _require_project(ctx: AppContext, project: str) -> None:
    with ctx.db.session() as session:
        get_project_row(session, project)


def _commit(
    ctx: AppContext, project: str, name: str, alias: str | None, intake: Intake
) -> answers.Registered:
    """Keep the staged content under its hash and record the version (or find the existing
    one). The row is written only once the blob is in place, so a row always has its blob."""
    key = dataset_key(intake.sha256)
    moved = False
    if not ctx.blobs.exists(key):
        ctx.blobs.move(intake.staged_key, key)
        moved = True
    try:
        return _record(ctx, project, name, alias, intake, key)
    except BaseException:
        if moved:
            _drop_unreferenced(ctx, key)
        raise


def _record(
    ctx: AppContext, project: str, name: str, alias: str | None, intake: Intake, key: str
) -> answers.Registered:
    for attempt in range(_COMMIT_TRIES):
        try:
            with ctx.db.session() as session:
                version = session.scalar(
                    select(DatasetVersion).where(
                        DatasetVersion.project == project,
                        DatasetVersion.name == name,
                        DatasetVersion.sha256 == intake.sha256,
                    )
                )
                created = version is None
                if version is None:
                    newest = session.scalar(
                        select(func.max(DatasetVersion.version)).where(
                            DatasetVersion.project == project, DatasetVersion.name == name
                        )
                    )
                    version = DatasetVersion(
                        project=project,
                        name=name,
                        version=int(newest or 0) + 1,
                        sha256=intake.sha256,
                        blob=key,
                        bytes=intake.bytes,
                        rows=intake.rows,
                        format=intake.format,
                        has_images=intake.has_images,
                    )
                    session.add(version)
                    session.flush()
                previous = _point_alias(session, version, alias) if alias else None
                return answers.Registered(
                    **dict(version_record(session, version)),
                    created=created,
                    alias=alias,
                    previous=previous,
                )
        except IntegrityError:
            if attempt == _COMMIT_TRIES - 1:
                raise Conflict(
                    f"{project}/{name} is being registered by others at the same time; try again."
                ) from None
    raise AssertionError("unreachable")


def _drop_unreferenced(ctx: AppContext, key: str) -> None:
    with ctx.db.session() as session:
        used = session.scalar(select(DatasetVersion.id).where(DatasetVersion.blob == key).limit(1))
    if used is None:
        ctx.blobs.delete(key)


def _point_alias(session: Session, version: DatasetVersion, alias: str) -> int | None:
    row = session.get(DatasetAlias, (version.project, version.name, alias))
    if row is None:
        session.add(
            DatasetAlias(
                project=version.project, name=version.name, alias=alias, version=version.version
            )
        )
        session.flush()
        return None
    previous = row.version
    row.version = version.version
    session.flush()
    return previous


def _versions(session: Session, project: str, name: str) -> list[DatasetVersion]:
    return list(
        session.scalars(
            select(DatasetVersion)
            .where(DatasetVersion.project == project, DatasetVersion.name == name)
            .order_by(DatasetVersion.version)
        )
    )


def _aliases(session: Session, project: str, name: str) -> list[tuple[str, int]]:
    rows = session.scalars(
        select(DatasetAlias)
        .where(DatasetAlias.project == project, DatasetAlias.name == name)
        .order_by(DatasetAlias.alias)
    )
    return [(a.alias, a.version) for a in rows]


def _version_record(
    v: DatasetVersion, aliases: list[tuple[str, int]], newest: int
) -> answers.DatasetVersion:
    return answers.DatasetVersion(
        ref=version_ref(v),
        dataset=f"{v.project}/{v.name}",
        project=v.project,
        name=v.name,
        version=v.version,
        latest=v.version == newest,
        sha256=v.sha256,
        rows=v.rows,
        bytes=v.bytes,
        format=v.format,
        has_images=v.has_images,
        aliases=[a for a, n in aliases if n == v.version],
        blob=v.blob,
        created_at=v.created_at,
    )


def _no_dataset(session: Session, ref: Ref) -> str:
    names = list(
        session.scalars(
            select(DatasetVersion.name)
            .where(DatasetVersion.project == ref.project)
            .group_by(DatasetVersion.name)
            .order_by(DatasetVersion.name)
        )
    )
    if not names:
        return (
            f"There is no dataset {ref.full_name}: project {ref.project} has no datasets yet; "
            f"register one with `akka training datasets register {ref.full_name} -f FILE`."
        )
    shown = ", ".join(names[:_LISTED]) + (", …" if len(names) > _LISTED else "")
    return f"There is no dataset {ref.full_name}; datasets in {ref.project}: {shown}."


def _version_list(versions: list[DatasetVersion]) -> str:
    shown = [f"v{v.version}" for v in versions[-_LISTED:]]
    more = "…, " if len(versions) > _LISTED else ""
    return more + ", ".join(shown)
