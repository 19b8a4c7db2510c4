"""Reports from training jobs (job tokens only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from akka_training.server.deps import Caller, Ctx, Db
from akka_training.server.services import jobs as service

router = APIRouter(prefix="/v1/jobs")


@router.post("/{run_id}/attempts/{attempt}/{kind}")
def report(
    run_id: str, attempt: int, kind: str, body: dict[str, Any], ctx: Ctx, db: Db, caller: Caller
) -> dict[str, str]:
    answer = service.handle(db, caller, run_id, attempt, kind, body)
    if kind in ("finished", "stopped", "failed") and ctx.controller is not None:
        ctx.controller.wake()
    return answer
