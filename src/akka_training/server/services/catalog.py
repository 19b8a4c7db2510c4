"""The catalog as users read it: models, their methods per engine, the runs admitted."""

from __future__ import annotations

from akka_training.api.catalog import BaseModelDetail, BaseModelSummary, CatalogEnvelope, Envelope
from akka_training.core import catalog
from akka_training.deployment.context import AppContext


def list_models(ctx: AppContext) -> list[BaseModelSummary]:
    return [
        BaseModelSummary(
            id=m.id,
            status=m.status,
            modality=m.modality,
            methods=m.methods(ctx.engine, ctx.image_text_rl),
        )
        for m in ctx.catalog
    ]


def get_model(ctx: AppContext, model_id: str) -> BaseModelDetail:
    m = ctx.model(model_id)
    return BaseModelDetail(
        id=m.id,
        status=m.status,
        path=m.path,
        revision=m.revision,
        hub_id=m.hub_id or None,
        hub_revision=m.hub_revision or None,
        context_length=m.context_length,
        modality=m.modality,
        engine=ctx.engine,
        methods=m.methods(ctx.engine, ctx.image_text_rl),
        methods_by_engine={
            engine: m.methods(engine, ctx.image_text_rl) for engine in catalog.ENGINES
        },
        admitted=[_envelope(e) for e in m.admitted(ctx.engine, ctx.image_text_rl)],
    )


def list_envelopes(ctx: AppContext) -> list[CatalogEnvelope]:
    out = []
    for m in ctx.catalog:
        admitted = m.admitted(ctx.engine, ctx.image_text_rl)
        for e in m.envelopes:
            out.append(CatalogEnvelope(model=m.id, **dict(_envelope(e)), admitted=e in admitted))
    return out


def _envelope(e: catalog.Envelope) -> Envelope:
    return Envelope(
        method=e.method,
        engine=e.engine,
        gpus=e.gpus,
        precision=e.precision,
        gpu_memory_gib=e.gpu_memory_gib,
        host_memory_gib=e.host_memory_gib,
    )
