"""Deployment settings: one YAML file with `trainer.*` keys, plus environment overrides.

Keys are kebab-case, as in the file (`trainer.datasets.max-bytes`). An environment variable
``AKKA_TRAINER__<KEY>__<KEY>`` overrides one key (``AKKA_TRAINER__DATASETS__MAX_BYTES=1048576``;
underscores stand for hyphens). A bad setting stops start-up with a message naming the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from akka_training.core.catalog import CatalogModel
from akka_training.core.errors import AkkaError

DEFAULT_PORT = 9001


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, populate_by_name=True)


class Listen(_Section):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)


class Database(_Section):
    # None: SQLite at $AKKA_HOME/trainer.db
    url: str | None = None


class Storage(_Section):
    # None: a local directory at $AKKA_HOME/blobs
    url: str | None = None


class Reinforcement(_Section):
    engine: Literal["trl", "verl"] = "trl"
    # Whether verl admits grpo/gspo over image-text models.
    image_text: bool = False
    # The interpreter of the verl environment (jobs launch verl with it).
    verl_python: str | None = None


class Datasets(_Section):
    max_bytes: int = Field(256 * 1024 * 1024, ge=1)


class Bundles(_Section):
    max_bytes: int = Field(16 * 1024 * 1024, ge=1)


class Telemetry(_Section):
    collector_endpoint: str | None = None


class Grafana(_Section):
    url: str | None = None
    dashboard: str = "akka-training"
    # PEM file of the RSA key that signs link tokens; None: one generated under $AKKA_HOME.
    signing_key: str | None = None
    link_lifetime_seconds: int = Field(3600, ge=60)


class Pool(_Section):
    name: str
    accelerator: str = "cpu"
    devices: int = Field(1, ge=0)
    max_claim: int | None = Field(None, ge=1)
    host_ram_gib: float | None = Field(None, ge=0)
    # Ray backend: the value of the `pool` node label whose nodes serve this pool.
    label: str | None = None


class ProjectQuota(_Section):
    name: str
    quota: int | None = Field(None, ge=0)


class RayBackend(_Section):
    # The Ray head's dashboard (job and state APIs), e.g. http://raycluster-head-svc:8265.
    address: str = "http://127.0.0.1:8265"
    # Absolute path of the interpreter that runs jobs on the Ray workers; default: the
    # service's own (right only where the workers share its image).
    python: str | None = None
    # Where a job on a Ray worker reaches the service and the blob store.
    trainer_url: str | None = None
    storage_url: str | None = None
    submit_timeout_seconds: float = Field(30.0, gt=0)
    # Every other request to the head (job state, logs, stop, nodes).
    request_timeout_seconds: float = Field(10.0, gt=0)
    # CPUs a job holds per device of its claim; on a CPU pool one device is this many CPUs.
    cpus_per_device: float = Field(1.0, gt=0)
    # Ray runtime_env merged into every job's (env_vars, image_uri, …); the job's own variables
    # (its token among them) win over env_vars of the same name.
    runtime_env: dict[str, Any] | None = None
    # Directory on the workers for the jobs' working directories; default $TMPDIR/akka-jobs.
    work_dir: str | None = None


class LocalBackend(_Section):
    # The interpreter that runs jobs; default: the service's own.
    python: str | None = None
    # Grace period between SIGTERM and SIGKILL when a job is stopped.
    stop_grace_seconds: float = Field(20.0, ge=0)
    # Apply the envelope's host memory to each job as its data-size limit.
    enforce_host_memory: bool = False


class Controller(_Section):
    interval_seconds: float = Field(0.5, gt=0)
    start_retries: int = Field(4, ge=0)
    retry_base_seconds: float = Field(2.0, ge=0)
    # A run whose completed-step count stops rising this long while its job lives is stalled.
    stall_seconds: float = Field(600.0, gt=0)
    # How long the cluster may stay unreachable while a run waits before it fails.
    unreachable_seconds: float = Field(120.0, ge=0)


class Testing(_Section):
    # Run the scripted job (reports steps, trains nothing) instead of the engines. Tests only.
    scripted_jobs: bool = False


class Trainer(_Section):
    home: str | None = None
    url: str | None = None  # how jobs reach this service; default from listen
    listen: Listen = Field(default_factory=Listen)
    database: Database = Field(default_factory=Database)
    storage: Storage = Field(default_factory=Storage)
    backend: Literal["local", "ray"] = "local"
    local: LocalBackend = Field(default_factory=LocalBackend)
    ray: RayBackend = Field(default_factory=RayBackend)
    reinforcement: Reinforcement = Field(default_factory=Reinforcement)
    datasets: Datasets = Field(default_factory=Datasets)
    bundles: Bundles = Field(default_factory=Bundles)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    grafana: Grafana = Field(default_factory=Grafana)
    pools: list[Pool] | None = None  # None: one pool sized from the devices this host has
    default_pool: str | None = None
    projects: list[ProjectQuota] = Field(default_factory=list)
    catalog: list[CatalogModel] | None = None  # None: the development catalog
    dev_models_dir: str | None = None
    controller: Controller = Field(default_factory=Controller)
    testing: Testing = Field(default_factory=Testing)


class SettingsError(AkkaError):
    code = "bad-setting"


class Settings(BaseModel):
    trainer: Trainer = Field(default_factory=Trainer)
    source: str | None = None  # the file read, for messages

    @property
    def home(self) -> Path:
        raw = self.trainer.home or os.environ.get("AKKA_HOME") or "~/.akka/trainer"
        return Path(raw).expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.trainer.database.url or f"sqlite:///{self.home / 'trainer.db'}"

    @property
    def storage_url(self) -> str:
        return self.trainer.storage.url or f"file://{self.home / 'blobs'}"

    @property
    def trainer_url(self) -> str:
        if self.trainer.url:
            return self.trainer.url.rstrip("/")
        return f"http://{self.trainer.listen.host}:{self.trainer.listen.port}"

    @property
    def dev_models_dir(self) -> Path:
        raw = self.trainer.dev_models_dir or os.environ.get("AKKA_DEV_MODELS_DIR")
        return Path(raw).expanduser().resolve() if raw else self.home / "models"


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read the settings file (if any) and apply environment overrides."""
    env = dict(os.environ if env is None else env)
    data: dict[str, Any] = {}
    source = None
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError as exc:
            raise SettingsError(f"The settings file {path} does not exist.") from exc
        except yaml.YAMLError as exc:
            raise SettingsError(f"The settings file {path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict) or set(loaded) - {"trainer"}:
            raise SettingsError(f"The settings file {path} must hold one top-level key, `trainer`.")
        data = loaded
    trainer = data.get("trainer") or {}
    if isinstance(trainer, dict) and isinstance(trainer.get("catalog"), list):
        # Catalog entries are written kebab-case in the file like every other setting.
        trainer["catalog"] = [_camel_keys(m) for m in trainer["catalog"]]
    for key, value in env.items():
        if key.startswith("AKKA_TRAINER__"):
            parts = [p.lower().replace("_", "-") for p in key[len("AKKA_TRAINER__") :].split("__")]
            _set_path(data.setdefault("trainer", {}), parts, yaml.safe_load(value))
    try:
        return Settings(trainer=Trainer.model_validate(data.get("trainer") or {}), source=source)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, source)) from exc


def _camel_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_camel(str(k)): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def _camel(key: str) -> str:
    head, *rest = key.split("-")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _set_path(target: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value


def _describe(exc: ValidationError, source: str | None) -> str:
    where = f" in {source}" if source else ""
    lines = []
    for err in exc.errors():
        key = ".".join(["trainer", *(str(p) for p in err["loc"])])
        if err["type"] == "extra_forbidden":
            lines.append(f"  - {key}: not a known setting; remove it or check its spelling")
        else:
            lines.append(f"  - {key}: {err['msg']}")
    return f"Bad setting{where}:\n" + "\n".join(lines)
