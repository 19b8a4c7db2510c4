"""The trainer's configuration and build, one row each."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from akka_training import __version__
from akka_training.core.errors import ServiceUnavailable
from akka_training.deployment.context import AppContext


def info(ctx: AppContext) -> dict[str, Any]:
    settings = ctx.settings
    db = ctx.db.url
    database = "sqlite" if db.startswith("sqlite") else ctx.db.dialect
    if database == "sqlite":
        database = f"sqlite ({db.removeprefix('sqlite:///')})"
    else:
        database = f"{ctx.db.dialect} ({ctx.db.engine.url.render_as_string(hide_password=True)})"
    endpoint = settings.trainer.telemetry.collector_endpoint
    startup = f"ready in {ctx.startup_seconds:.1f} s"
    if ctx.startup_note:
        startup += f" ({ctx.startup_note})"
    return {
        "version": __version__,
        "engine": ctx.engine,
        "backend": ctx.backend.name,
        "database": database,
        "storage": ctx.blobs.url,
        "telemetry": f"OTLP to {endpoint}; Prometheus at /metrics"
        if endpoint
        else "Prometheus at /metrics; jobs write metrics.jsonl and TensorBoard",
        "startup": startup,
        "imageTextReinforcement": ctx.image_text_rl,
        "datasetsMaxBytes": settings.trainer.datasets.max_bytes,
        "pools": ctx.pool_names,
        "defaultPool": ctx.default_pool,
    }


def ready(db: Session) -> dict[str, str]:
    try:
        db.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise ServiceUnavailable(
            f"The database does not answer ({type(exc).__name__}); check trainer.database.url "
            "and the database server."
        ) from None
    return {"status": "ok"}
