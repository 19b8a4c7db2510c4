"""Snapshots past `execution.keepAdapters` are swept: their blobs deleted, their rows kept (marked
swept) so the run's history stays readable. The newest snapshot of a run, any snapshot another
run starts from, and any snapshot a dpo run measures against (its recorded reference, which a
continuation of it keeps), are never swept."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import select

from akka_training.deployment.context import AppContext
from akka_training.storage.models import Run, Snapshot

log = logging.getLogger(__name__)


def sweep_snapshots(ctx: AppContext) -> list[str]:
    doomed: list[tuple[str, str, list[str]]] = []
    with ctx.db.session() as session:
        held = {
            (r.source_run, r.source_snapshot)
            for r in session.execute(
                select(Run.source_run, Run.source_snapshot).where(Run.source_snapshot.is_not(None))
            )
        }
        for settings in session.scalars(select(Run.settings).where(Run.method == "dpo")):
            reference = (settings or {}).get("reference") or {}
            if reference.get("snapshot"):
                held.add((reference.get("run"), reference["snapshot"]))
        rows = session.scalars(
            select(Snapshot)
            .where(Snapshot.swept_at.is_(None))
            .order_by(Snapshot.run_id, Snapshot.step.desc())
        ).all()
        keep: dict[str, int] = {}
        by_run: dict[str, list[Snapshot]] = {}
        for snap in rows:
            by_run.setdefault(snap.run_id, []).append(snap)
        for run_id, snaps in by_run.items():
            run = session.get(Run, run_id)
            if run is None:
                continue
            keep[run_id] = int((run.settings.get("execution") or {}).get("keepAdapters", 4))
            for snap in snaps[keep[run_id] :]:
                if (run_id, snap.name) in held:
                    continue
                keys = [k for k in (snap.weights, snap.training_state) if k]
                doomed.append((run_id, snap.name, keys))
                snap.swept_at = datetime.now(UTC)
    for run_id, name, keys in doomed:
        for key in keys:
            try:
                ctx.blobs.delete(key)
            except OSError:
                log.exception("could not delete %s of %s/%s", key, run_id, name)
    return [f"{r}/{n}" for r, n, _ in doomed]
