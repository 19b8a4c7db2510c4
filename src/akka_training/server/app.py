"""The FastAPI application and its lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI

from akka_training import __version__
from akka_training.config.settings import Settings
from akka_training.controller.loop import Controller
from akka_training.deployment.context import AppContext, build_context
from akka_training.server.body_limits import PlanBodyLimit
from akka_training.server.bootstrap import bootstrap
from akka_training.server.errors import install_error_handlers
from akka_training.server.observability import Observability
from akka_training.server.openapi import document
from akka_training.server.routers import (
    adapters,
    bundles,
    capacity,
    catalog,
    datasets,
    endpoints,
    evaluations,
    grafana,
    jobs,
    openai,
    pipelines,
    projects,
    regrades,
    runs,
    system,
    tasks,
    tinker,
)
from akka_training.server.routes import FiniteJson
from akka_training.server.services.pipelines import advance_all

log = logging.getLogger(__name__)

ROUTERS = (
    system,
    projects,
    catalog,
    capacity,
    datasets,
    bundles,
    runs,
    adapters,
    regrades,
    pipelines,
    jobs,
    tasks,
    evaluations,
    grafana,
    tinker,
    endpoints,
    openai,
)


class TrainerApp(FastAPI):
    def openapi(self) -> dict[str, Any]:
        """FastAPI's document, with the schemas of streamed lines and self-parsed bodies."""
        return document(self)


def create_app(settings: Settings, ctx: AppContext | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        context = ctx or build_context(settings)
        # The threads that run the synchronous handlers: as many requests as this are worked
        # on at once, each with a database connection to hand (the pool is sized from it).
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = settings.trainer.listen.worker_threads
        bootstrap(context)
        app.state.ctx = context
        telemetry = app.state.telemetry = context.telemetry = Observability(context)
        controller = context.controller = Controller(context)
        controller.hooks.append(lambda: advance_all(context))
        controller.start()
        tinker.start_sessions(app)
        try:
            yield
        finally:
            tinker.stop_expiry(app)
            controller.stop()
            telemetry.shutdown()
            context.backend.close()
            context.db.dispose()

    app = TrainerApp(
        title="akka training",
        version=__version__,
        lifespan=lifespan,
        default_response_class=FiniteJson,
    )
    install_error_handlers(app)
    app.add_middleware(PlanBodyLimit)
    for module in ROUTERS:
        app.include_router(module.router)
    app.include_router(regrades.previews)
    return app
