"""Scoring bundles: Python code for `rule` reward terms and tools, registered like datasets
(``PROJECT/NAME``, versions by content, the hash pinned by the runs that use it). The service
stores and hashes bundles but never imports their code; only training jobs do."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import desc, func, select
from sqlalchemy.orm import Session

from akka_training.api.bundles import Bundle as BundleRecord
from akka_training.core.blobkeys import bundle_key
from akka_training.core.errors import InvalidRequest, NotFound, PayloadTooLarge
from akka_training.core.refs import BadReference, parse_ref
from akka_training.deployment.context import AppContext
from akka_training.rewards.bundles import pack_bundle
from akka_training.server.auth import Principal
from akka_training.server.services.projects import get_project_row
from akka_training.storage.models import Bundle


def register(
    session: Session, ctx: AppContext, principal: Principal, ref_text: str, data: bytes
) -> BundleRecord:
    ref = _parse(ref_text)
    if ref.version or ref.alias or ref.digest:
        raise InvalidRequest("Register a bundle as PROJECT/NAME; versions are numbered for you.")
    principal.require(ref.project)
    get_project_row(session, ref.project)
    limit = ctx.settings.trainer.bundles.max_bytes
    if len(data) > limit:
        raise PayloadTooLarge(
            f"The bundle is larger than this trainer's limit of {limit} bytes "
            "(trainer.bundles.max-bytes)."
        )
    # Re-pack what arrived: the stored bundle is canonical whatever zip tool made the upload.
    with tempfile.TemporaryDirectory() as tmp:
        upload = Path(tmp) / "upload.zip"
        upload.write_bytes(data)
        packed = pack_bundle(upload, limit)
    existing = session.scalar(
        select(Bundle).where(
            Bundle.project == ref.project, Bundle.name == ref.name, Bundle.sha256 == packed.sha256
        )
    )
    if existing is not None:
        return bundle_record(existing, existing=True)
    blob = bundle_key(packed.sha256)
    if not ctx.blobs.exists(blob):
        ctx.blobs.put_bytes(blob, packed.data)
    latest = session.scalar(
        select(func.max(Bundle.version)).where(
            Bundle.project == ref.project, Bundle.name == ref.name
        )
    )
    row = Bundle(
        project=ref.project,
        name=ref.name,
        version=(latest or 0) + 1,
        sha256=packed.sha256,
        blob=blob,
        bytes=len(packed.data),
        files=packed.files,
    )
    session.add(row)
    session.flush()
    return bundle_record(row)


def resolve_bundle(session: Session, ref_text: str, principal: Principal) -> Bundle:
    """The bundle `ref_text` names. A project `principal` may not read is refused before
    anything is looked up, so the answer is the same whether the bundle exists or not."""
    ref = _parse(ref_text)
    principal.require(ref.project)
    query = select(Bundle).where(Bundle.project == ref.project, Bundle.name == ref.name)
    if ref.version is not None:
        query = query.where(Bundle.version == ref.version)
    elif ref.digest:
        query = query.where(Bundle.sha256.startswith(ref.digest))
    elif ref.alias:
        raise NotFound(f"Bundles have no aliases; write {ref.full_name} or {ref.full_name}:vN.")
    row = session.scalar(query.order_by(desc(Bundle.version)).limit(1))
    if row is None:
        versions = session.scalars(
            select(Bundle.version).where(Bundle.project == ref.project, Bundle.name == ref.name)
        ).all()
        have = ", ".join(f"v{v}" for v in versions) or "none"
        raise NotFound(
            f"There is no bundle {ref_text}; versions of {ref.full_name}: {have}. Register one "
            f"with `akka training bundles register {ref.full_name} -f DIR`."
        )
    return row


def list_bundles(session: Session, principal: Principal, project: str | None) -> list[BundleRecord]:
    query = select(Bundle).order_by(Bundle.project, Bundle.name, Bundle.version)
    if project:
        principal.require(project)
        query = query.where(Bundle.project == project)
    return [bundle_record(b) for b in session.scalars(query) if principal.can(b.project)]


def get(session: Session, principal: Principal, ref_text: str) -> BundleRecord:
    return bundle_record(resolve_bundle(session, ref_text, principal))


def bundle_record(row: Bundle, existing: bool = False) -> BundleRecord:
    """The bundle as users read it; `existing`: the answer to a registration of content it
    already held."""
    return BundleRecord(
        ref=f"{row.project}/{row.name}:v{row.version}",
        project=row.project,
        name=row.name,
        version=row.version,
        sha256=row.sha256,
        bytes=row.bytes,
        files=row.files,
        created_at=row.created_at,
        existing=existing,
    )


def _parse(text: str) -> Any:
    try:
        return parse_ref(text)
    except BadReference as exc:
        raise InvalidRequest(str(exc)) from exc
