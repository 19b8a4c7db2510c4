"""`InProcessTrainer`: the real service application in this process, reached through
`httpx.ASGITransport`, on a real database and blob store. For router and controller tests that
need the service's code paths in seconds, without a trainer process or a socket.

    with InProcessTrainer(tmp_path, {"trainer": {"database": {"url": url}}}, dev_models=path) as t:
        api = t.client()                         # an httpx.Client holding the admin token
        api.post("/v1/projects", json={"name": "maths"})
        t.ctx                                    # the application context (database, blobs, …)

What it builds is what `akka trainer serve` builds: the settings go through `load_settings` (a
settings file under the environment's overrides), the context through
`deployment.context.build_context`, the app through `server.app.create_app`. Jobs are the
scripted job (``trainer.testing.scripted-jobs: true``) unless the settings say otherwise, and the
catalog is the development catalog (``dev_models``, else ``AKKA_DEV_MODELS_DIR``, else one built
under the home) unless the settings give one.

The app's lifespan does not run under ASGITransport, so this factory does the part of it that
requests need, by hand, and says what it leaves out:

- it sets ``app.state.ctx`` and ``app.state.telemetry`` (the service's real `Observability`);
- it applies the configured project quotas and mints an admin token (`admin_token`), as the first
  start does, but writes neither ``admin-token`` nor a CLI context;
- it starts no controller: ``ctx.controller`` stays None, so no reconcile pass runs (a started
  run stays QUEUED until a test moves it: `admit` does what a pass would, short of launching),
  and capacity reports nothing observed (``observed: null``).

Requests go through one event loop in a thread of its own (an anyio blocking portal), so tests
stay synchronous. Application errors come back as the HTTP answers a client would get (a 500 with
the error JSON), not as exceptions. `close()` (or leaving the ``with`` block) releases all of it.
"""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import anyio.from_thread
import httpx
import yaml
from fastapi import FastAPI

from akka_training.backends.base import LaunchRequest
from akka_training.backends.local.backend import LocalBackend
from akka_training.config.settings import Settings, load_settings
from akka_training.controller import queued
from akka_training.controller.apply import apply, load_view
from akka_training.controller.launch import prepare_launch
from akka_training.controller.views import Limits, Probe
from akka_training.core.documents import deep_merge
from akka_training.core.resolved import BOOTSTRAP_ENV as JOB_BOOTSTRAP_ENV
from akka_training.core.states import ClaimRule, ClaimState
from akka_training.core.tasks import BOOTSTRAP_ENV as TASK_BOOTSTRAP_ENV
from akka_training.deployment.context import AppContext, build_context
from akka_training.server.app import create_app
from akka_training.server.observability import Observability
from akka_training.server.routers.tinker import stop_expiry
from akka_training.server.services.projects import apply_configured_quotas
from akka_training.storage.models import Run
from akka_training.storage.tokens import create_admin_token
from akka_training.storage.transitions import current_claim, move_claim

# Requests never leave the process; the host only fills the URL.
BASE_URL = "http://akka-trainer.test"


class InProcessTrainer:
    def __init__(
        self,
        home: Path,
        settings: dict[str, Any] | None = None,
        *,
        dev_models: Path | None = None,
    ) -> None:
        """`settings`: a settings document (``{"trainer": {...}}``, keys as in the settings file)
        merged over the defaults here: `home` as ``trainer.home``, scripted jobs, and
        `dev_models` as ``trainer.dev-models-dir`` when given."""
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        base: dict[str, Any] = {"trainer": {"home": str(home), "testing": {"scripted-jobs": True}}}
        if dev_models is not None:
            base["trainer"]["dev-models-dir"] = str(dev_models)
        self.settings_path = home / "settings.yaml"
        self.settings_path.write_text(yaml.safe_dump(deep_merge(base, settings or {})))
        self.settings: Settings = load_settings(self.settings_path)
        self._resources = ExitStack()
        try:
            self.ctx: AppContext = build_context(self.settings)
            self._resources.callback(self.ctx.db.dispose)
            self._resources.callback(self.ctx.backend.close)
            if isinstance(self.ctx.backend, LocalBackend):
                # The test's jobs end with it: a runner left running would be collected (and
                # warned about) in a later test.
                self._resources.callback(self.ctx.backend.end_jobs)
            self.telemetry = Observability(self.ctx)
            self._resources.callback(self.telemetry.shutdown)
            self.ctx.telemetry = self.telemetry
            self.app: FastAPI = create_app(self.settings, self.ctx)
            self.app.state.ctx = self.ctx
            self.app.state.telemetry = self.telemetry
            with self.ctx.db.session() as session:
                apply_configured_quotas(session, self.settings.trainer.projects)
                self.admin_token = create_admin_token(session, "admin (in-process trainer)")
            self._portal = self._resources.enter_context(anyio.from_thread.start_blocking_portal())
        except BaseException:
            self._resources.close()
            raise

    def client(self, token: str | None = None, *, anonymous: bool = False) -> httpx.Client:
        """An HTTP client of the app holding `token` (default: the admin token; none at all with
        `anonymous`). It is closed with the trainer."""
        headers = {} if anonymous else {"Authorization": f"Bearer {token or self.admin_token}"}
        client = httpx.Client(
            base_url=BASE_URL, headers=headers, transport=_PortalTransport(self.app, self._portal)
        )
        self._resources.callback(client.close)
        return client

    def job_client(self, launch: LaunchRequest) -> httpx.Client:
        """An HTTP client of the app holding the token of the job (or task) `launch` starts: its
        bootstrap credential exchanged, as the job does at its start (so only once)."""
        bootstrap = launch.env.get(JOB_BOOTSTRAP_ENV) or launch.env[TASK_BOOTSTRAP_ENV]
        answer = self.client(bootstrap).post("/v1/jobs/bootstrap")
        answer.raise_for_status()
        return self.client(answer.json()["token"])

    def admit(self, run_id: str) -> LaunchRequest:
        """Do for a queued run what a controller pass does, short of launching: grant its claim
        (device ids from 0; no scheduler weighs pools or quotas), let `controller.queued` decide
        and `controller.apply` admit it with a new attempt, and prepare that attempt's launch.
        `job_client` of the request lets a test report as the attempt's job."""
        now = datetime.now(UTC)
        with self.ctx.db.session() as session:
            claim = current_claim(session, run_id)
            if claim is None or claim.state != ClaimState.QUEUED:
                raise ValueError(f"run {run_id} has no queued claim to grant")
            move_claim(
                session, claim, ClaimRule.GRANT, device_ids=list(range(claim.devices)), now=now
            )
        with self.ctx.db.session() as session:
            run = session.get(Run, run_id)
            assert run is not None
            view = load_view(session, run)
        apply(self.ctx.db, view, queued.process(view, Probe(), now, self._limits()), now)
        with self.ctx.db.session() as session:
            run = session.get(Run, run_id)
            assert run is not None
            number = run.attempt
        request = prepare_launch(self.ctx, run_id, number)
        assert request is not None, "an admitted run has a pending attempt with granted devices"
        return request

    def close(self) -> None:
        stop_expiry(self.app)
        self._resources.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _limits(self) -> Limits:
        cfg = self.settings.trainer.controller
        return Limits(
            start_retries=cfg.start_retries,
            job_retries=cfg.job_retries,
            retry_base_seconds=cfg.retry_base_seconds,
            stall_seconds=cfg.stall_seconds,
            unreachable_seconds=cfg.unreachable_seconds,
            stop_grace_seconds=self.settings.trainer.local.stop_grace_seconds,
        )


class _PortalTransport(httpx.BaseTransport):
    """A synchronous transport that hands each request to `httpx.ASGITransport` on the portal's
    event loop and returns the whole answer."""

    def __init__(self, app: FastAPI, portal: anyio.from_thread.BlockingPortal) -> None:
        self._asgi = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self._portal = portal

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        # The body is read here: a streamed upload's chunks can only be iterated on this side.
        content = request.read()
        return self._portal.call(self._send, request, content)

    async def _send(self, request: httpx.Request, content: bytes) -> httpx.Response:
        forwarded = httpx.Request(
            request.method, request.url, headers=request.headers, content=content
        )
        response = await self._asgi.handle_async_request(forwarded)
        body = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=body)
