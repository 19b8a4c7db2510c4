"""The catalog as users read it: models, their methods per engine, the runs admitted."""

from __future__ import annotations

from typing import Any

from akka_training.core.catalog import ENGINES
from akka_training.deployment.context import AppContext


def list_models(ctx: AppContext) -> list[dict[str, Any]]:
    return [
        {
            "id": m.id,
            "status": m.status,
            "modality": m.modality,
            "methods": m.methods(ctx.engine, ctx.image_text_rl),
        }
        for m in ctx.catalog
    ]


def get_model(ctx: AppContext, model_id: str) -> dict[str, Any]:
    m = ctx.model(model_id)
    return {
        "id": m.id,
        "status": m.status,
        "path": m.path,
        "revision": m.revision,
        **({"hubId": m.hub_id} if m.hub_id else {}),
        **({"hubRevision": m.hub_revision} if m.hub_revision else {}),
        "contextLength": m.context_length,
        "modality": m.modality,
        "engine": ctx.engine,
        "methods": m.methods(ctx.engine, ctx.image_text_rl),
        "methodsByEngine": {engine: m.methods(engine, ctx.image_text_rl) for engine in ENGINES},
        "admitted": [_envelope_json(e) for e in m.admitted(ctx.engine, ctx.image_text_rl)],
    }


def list_envelopes(ctx: AppContext) -> list[dict[str, Any]]:
    out = []
    for m in ctx.catalog:
        admitted = m.admitted(ctx.engine, ctx.image_text_rl)
        for e in m.envelopes:
            out.append(
                {
                    "model": m.id,
                    **_envelope_json(e),
                    "admitted": e in admitted,
                }
            )
    return out


def _envelope_json(e: Any) -> dict[str, Any]:
    return {
        "method": e.method,
        "engine": e.engine,
        "gpus": e.gpus,
        "precision": e.precision,
        "gpuMemoryGib": e.gpu_memory_gib,
        "hostMemoryGib": e.host_memory_gib,
    }
