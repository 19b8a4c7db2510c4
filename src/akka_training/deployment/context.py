"""What the service holds while it runs: settings, database, blob store, catalog, pools,
backend, and the controller and telemetry once they run. Built once at start-up; the request
path (`server`) and the controller both receive it, and neither imports the other: the two
members they fill in are typed by the protocols below."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from akka_training.backends.base import Backend, ObservedPool
from akka_training.blobstore import BlobStore, open_blob_store
from akka_training.config.devices import HostDevices, detect_devices
from akka_training.config.pools import PoolSpec, default_pool, pools_from_settings
from akka_training.config.settings import Settings, SettingsError
from akka_training.core.catalog import CatalogModel
from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.errors import NotFound
from akka_training.deployment.cleanup import clean_crash_leftovers
from akka_training.deployment.devcatalog import load_dev_catalog
from akka_training.storage.db import Database


class ControllerHandle(Protocol):
    """What the request path may ask of the running controller (`controller.loop.Controller`)."""

    def wake(self) -> None:
        """Run the next reconcile pass now (a request changed something)."""

    def observed(self) -> dict[str, ObservedPool] | None:
        """The devices the cluster offered at the controller's last look, as the controller
        published it (a read, safe from any thread); None while the cluster does not answer."""


class TelemetryHandle(Protocol):
    """The service's telemetry (`server.observability.Observability`), as the controller and
    the services use it."""

    def span(self, name: str, run: Any, **attrs: Any) -> AbstractContextManager[str | None]:
        """A span of `run`'s trace; entering it gives its traceparent (to hand to a job)."""

    def operation(self, name: str, **attrs: Any) -> AbstractContextManager[Any]:
        """A span of the service's own work outside any run; entering it gives the span."""

    def traceparent(self) -> str | None:
        """The W3C traceparent of the current span (None outside one), to hand to a job."""


@dataclass
class AppContext:
    settings: Settings
    db: Database
    blobs: BlobStore
    host: HostDevices
    pools: list[PoolSpec]
    catalog: list[CatalogModel]
    backend: Backend
    started_at: float = field(default_factory=time.time)
    startup_seconds: float = 0.0
    startup_note: str = ""
    # The time the service's answers count up to (a run's cost while it runs).
    clock: Clock = SYSTEM_CLOCK
    # Filled by the app: the controller and the telemetry, when running.
    controller: ControllerHandle | None = None
    telemetry: TelemetryHandle | None = None

    @property
    def engine(self) -> str:
        return self.settings.trainer.reinforcement.engine

    @property
    def image_text_rl(self) -> bool:
        return self.settings.trainer.reinforcement.image_text

    @property
    def default_pool(self) -> str:
        return default_pool(self.settings, self.pools)

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise NotFound(f"There is no pool {name!r}; pools: {', '.join(self.pool_names)}.")

    @property
    def pool_names(self) -> list[str]:
        return [p.name for p in self.pools]

    def model(self, model_id: str) -> CatalogModel:
        for m in self.catalog:
            if m.id == model_id:
                return m
        known = ", ".join(m.id for m in self.catalog) or "none"
        raise NotFound(f"There is no base model {model_id!r} in the catalog; models: {known}.")


def build_context(
    settings: Settings, on_database: Callable[[Settings, Database], None] | None = None
) -> AppContext:
    """Everything the service serves from. `on_database` runs once the database is ready and
    before the catalog is loaded (a first start builds the development models there): the
    server writes its admin token and the CLI context then."""
    started = time.monotonic()
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    # The store first: a store it cannot use stops start-up before the database is touched.
    blobs = open_store(settings)
    db = Database(
        settings.database_url,
        wait_seconds=settings.trainer.database.wait_seconds,
        pool_size=settings.database_pool_size,
    )
    db.migrate()
    clean_crash_leftovers(blobs, db, settings.trainer.storage.cleanup_grace_seconds)
    if on_database is not None:
        on_database(settings, db)
    host = detect_devices()
    pools = pools_from_settings(settings, host)
    note = ""
    if settings.trainer.catalog is None:
        fresh = not any(settings.dev_models_dir.glob("*/akka-devmodel.json"))
        catalog = load_dev_catalog(settings.dev_models_dir)
        note = "built the development models" if fresh else "development catalog"
    else:
        catalog = list(settings.trainer.catalog)
    backend = make_backend(settings, home, pools, host)
    ctx = AppContext(settings, db, blobs, host, pools, catalog, backend)
    ctx.startup_seconds = time.monotonic() - started
    ctx.startup_note = note
    return ctx


def open_store(settings: Settings) -> BlobStore:
    """The deployment's blob store, reached once; a `SettingsError` naming the setting when
    its URL is not one, `StoreUnreachable` naming the URL and settings when it cannot be
    reached."""
    s3 = settings.trainer.storage.s3
    try:
        blobs = open_blob_store(settings.storage_url, s3.options(), s3.credentials())
    except ValueError as exc:
        raise SettingsError(f"Bad setting: {exc}.") from None
    blobs.check()
    return blobs


def make_backend(
    settings: Settings, home: Path, pools: list[PoolSpec], host: HostDevices
) -> Backend:
    if settings.trainer.backend == "ray":
        from akka_training.backends.ray import RayBackend  # optional dependency

        return RayBackend(settings.trainer.ray, pools)
    from akka_training.backends.local import LocalBackend

    return LocalBackend(
        home / "jobs",
        # CPU devices are slots on this host; GPUs are what NVML sees.
        {
            p.name: p.declared if host.accelerator == "cpu" else min(p.declared, host.count)
            for p in pools
        },
        accelerator="cpu" if host.accelerator == "cpu" else "gpu",
        grace_seconds=settings.trainer.local.stop_grace_seconds,
        python=settings.trainer.local.python,
        keep_logs_seconds=settings.trainer.local.job_log_days * 86400,
    )
