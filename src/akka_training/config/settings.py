"""Deployment settings: one YAML file with `trainer.*` keys, plus environment overrides.

Keys are kebab-case, as in the file (`trainer.datasets.max-bytes`), catalog entries included
(their camelCase spelling, as in a run plan, is accepted too). The file is read and checked on
its own first, so its errors name its keys as written.

An environment variable ``AKKA_TRAINER__<KEY>__<KEY>`` then overrides one key
(``AKKA_TRAINER__DATASETS__MAX_BYTES=1048576``; ``__`` separates keys, ``_`` stands for ``-``,
case does not matter). pydantic-settings reads them: a scalar is taken as written and
converted to the key's type (``1048576``, ``true``, ``verl``; ``null`` clears a key), while a
key that holds a list or an object (``trainer.pools``, ``trainer.catalog``,
``trainer.ray.runtime-env``) takes JSON, with the file's key spellings inside
(``AKKA_TRAINER__POOLS='[{"name": "gpu", "devices": 8, "max-claim": 4}]'``). An object merges
into the file's, key by key; a list replaces it.

A bad setting stops start-up with a message naming the key (and, for one from the environment,
the variable).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as EnvironmentParseError

from akka_training.core.catalog import CatalogModel, Envelope
from akka_training.core.errors import AkkaError, InvalidRequest
from akka_training.core.limits import INT32_MAX, INT64_MAX, NAME_CHARS
from akka_training.core.safe_yaml import load_document
from akka_training.core.storage import DEFAULT_PART_MIB, MIN_PART_MIB, S3Options, StorageSpec

ENV_PREFIX = "AKKA_"
ENV_DELIMITER = "__"
DEFAULT_PORT = 9001
# A settings file holds the catalog too: larger than a plan.
MAX_SETTINGS_BYTES = 16 * 1024 * 1024


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_kebab, populate_by_name=True)


class Listen(_Section):
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    # Requests the service works on at once (the threads that run its handlers); more wait
    # for a free one. The Postgres pool is sized from it.
    worker_threads: int = Field(40, ge=1, le=1000)


class Database(_Section):
    # None: SQLite at $AKKA_HOME/trainer.db
    url: str | None = None
    # How long a request waits for the database (its turn to write on SQLite, a connection
    # from the pool on Postgres) before it answers 503 with Retry-After, having saved nothing.
    wait_seconds: float = Field(10.0, gt=0, le=600)
    # Database connections the service keeps; None: trainer.listen.worker-threads plus 4 (the
    # controller, its leader lock, the metrics), so that no worker waits for a connection.
    pool_size: int | None = Field(None, ge=1, le=1000)


class StorageS3(_Section):
    # The S3 API's address; None: AWS's own for the region. MinIO, Ceph: http://HOST:PORT.
    endpoint_url: str | None = None
    region: str | None = None
    # Path-style addressing (http://HOST/BUCKET/KEY), which most S3-compatible stores need.
    path_style: bool = False
    # Size of each part of a multipart upload, in MiB (S3 takes 5 or more).
    part_size_mib: int = Field(DEFAULT_PART_MIB, ge=MIN_PART_MIB, le=512)
    # Credentials; None: boto3's chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws files,
    # the node's role). Jobs receive them in their environment, never in their spec.
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def options(self) -> S3Options:
        return S3Options(
            endpoint_url=self.endpoint_url,
            region=self.region,
            path_style=self.path_style,
            part_size_mib=self.part_size_mib,
        )

    def credentials(self) -> dict[str, str | None]:
        return {
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "session_token": self.session_token,
        }

    def job_env(self) -> dict[str, str]:
        """The credentials as a job's environment (the standard AWS variables), when set."""
        named = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }
        return {k: v for k, v in named.items() if v}


class Storage(_Section):
    # None: a local directory at $AKKA_HOME/blobs. s3://BUCKET/PREFIX: an S3-compatible bucket.
    url: str | None = None
    s3: StorageS3 = Field(default_factory=StorageS3)
    # Start-up removes partial uploads and unrecorded snapshots older than this.
    cleanup_grace_seconds: float = Field(3600.0, ge=0)
    # How often the controller does that cleanup again while the service runs.
    cleanup_every_seconds: float = Field(600.0, gt=0)


class Reinforcement(_Section):
    engine: Literal["trl", "verl"] = "trl"
    # Whether verl admits grpo/gspo over image-text models.
    image_text: bool = False
    # The interpreter of the verl environment (jobs launch verl with it).
    verl_python: str | None = None
    # How TRL's GRPO/GSPO generates on a GPU: vllm (TRL's colocate mode), hf (transformers'
    # generate), or auto (vllm where the job's environment has it). CPU jobs use hf unless
    # this says vllm (vLLM's CPU build).
    trl_generation: Literal["auto", "hf", "vllm"] = "auto"
    # The share of the GPU's memory vLLM takes for its weights and KV cache while it generates.
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=0.95)
    # Whether vLLM releases its weights and cache during the update (TRL's sleep mode).
    vllm_sleep_mode: bool = True


class Datasets(_Section):
    max_bytes: int = Field(256 * 1024 * 1024, ge=1, le=INT64_MAX)


class Bundles(_Section):
    max_bytes: int = Field(16 * 1024 * 1024, ge=1, le=INT64_MAX)


class Telemetry(_Section):
    collector_endpoint: str | None = None
    # How the service's own metrics leave it, one way per deployment so that no series comes
    # twice: `otlp` (to the collector) or `scrape` (Prometheus scrapes /metrics). None: otlp
    # when a collector endpoint is set, else scrape.
    service_metrics: Literal["otlp", "scrape"] | None = None
    # A file holding the token Prometheus scrapes /metrics with (a mounted Secret, the same one
    # Prometheus's `credentials_file` reads). Unset: only an admin token may scrape.
    metrics_token_file: str | None = None

    @property
    def service_export(self) -> Literal["otlp", "scrape"]:
        if self.service_metrics is not None:
            return self.service_metrics
        return "otlp" if self.collector_endpoint else "scrape"


class Tracking(_Section):
    # An MLflow tracking server (http://mlflow:5000): each run becomes an MLflow run.
    mlflow_uri: str | None = None


class Grafana(_Section):
    url: str | None = None
    dashboard: str = "akka-training"
    # PEM file of the RSA key that signs link tokens; None: one generated under $AKKA_HOME.
    signing_key: str | None = None
    link_lifetime_seconds: int = Field(3600, ge=60)
    # The link token's `iss` and `aud` claims, which Grafana's `expect_claims` checks.
    issuer: str = "akka-training"
    audience: str = "grafana"


class Pool(_Section):
    name: str = Field(max_length=NAME_CHARS)
    accelerator: str = "cpu"
    # Claims store device counts in INTEGER columns.
    devices: int = Field(1, ge=0, le=INT32_MAX)
    max_claim: int | None = Field(None, ge=1, le=INT32_MAX)
    host_ram_gib: float | None = Field(None, ge=0)
    # Ray backend: the value of the `pool` node label whose nodes serve this pool.
    label: str | None = None


def _file_keys(name: str) -> AliasChoices:
    return AliasChoices(_kebab(name), to_camel(name))


# Catalog entries are the core's models read with the file's spelling: kebab-case, or camelCase
# as in a run plan (and the field names, as every setting); they still serialise in camelCase.
_CATALOG_ENTRY = ConfigDict(
    alias_generator=AliasGenerator(validation_alias=_file_keys, serialization_alias=to_camel)
)


class EnvelopeEntry(Envelope):
    model_config = _CATALOG_ENTRY


class CatalogEntry(CatalogModel):
    model_config = _CATALOG_ENTRY
    envelopes: list[EnvelopeEntry] = Field(default_factory=list)  # type: ignore[assignment]


class ProjectQuota(_Section):
    name: str = Field(max_length=NAME_CHARS)
    # Stored in an INTEGER column; strict, so that `quota: true` is not 1.
    quota: int | None = Field(None, ge=0, le=INT32_MAX, strict=True)


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
    # Days an ended job's log (and exit record) stay in $AKKA_HOME/jobs; what else it wrote
    # goes when it ends.
    job_log_days: float = Field(14.0, gt=0)


class Controller(_Section):
    interval_seconds: float = Field(0.5, gt=0)
    # Between passes while every open run trains with a live job and nothing else waits on the
    # controller (a request, a job's end report, wakes it sooner).
    steady_seconds: float = Field(2.0, gt=0)
    start_retries: int = Field(4, ge=0)
    retry_base_seconds: float = Field(2.0, ge=0)
    # How often in a row a job that dies without a report runs again from its last snapshot.
    job_retries: int = Field(3, ge=0)
    # A run whose completed-step count stops rising this long while its job lives is stalled.
    stall_seconds: float = Field(600.0, gt=0)
    # A job sends its step, rollout and snapshot reports at most this often (those that come
    # meanwhile go in one request, which also asks for the directive); 0: each on its own.
    report_seconds: float = Field(1.0, ge=0, le=60)
    # How long the cluster may stay unreachable while a run waits before it fails.
    unreachable_seconds: float = Field(120.0, ge=0)
    # How long after its launch a job may exchange its bootstrap credential for its token and
    # the store's credentials (once); a Ray job may first wait for its runtime environment.
    bootstrap_seconds: float = Field(600.0, gt=0)


class Endpoints(_Section):
    # Minutes an endpoint may go without a request before it gives its devices back; the next
    # request starts it again. 0: never. An endpoint's --idle-minutes overrides it.
    idle_minutes: float = Field(30.0, ge=0)
    # What serves an endpoint and generates an evaluation's completions: vllm (vLLM's OpenAI
    # server, adapters loaded while it runs), transformers (transformers and PEFT), or auto
    # (vllm where the deployment has vLLM's environment, `vllm-python`, and the base model
    # suits it; else transformers).
    engine: Literal["auto", "vllm", "transformers"] = "auto"
    # The interpreter of vLLM's environment (scripts/setup-vllm-env.sh builds .venv-vllm) on
    # the nodes that run endpoints and evaluations. Unset: the deployment has no vLLM.
    vllm_python: str | None = None


class Bootstrap(_Section):
    # The first admin token, given (a deployment's Secret): registered at start-up when the
    # database does not hold it. Either the value or a file holding it (a mounted Secret).
    admin_token: str | None = None
    admin_token_file: str | None = None
    # Add a `local` context holding the admin token to the CLI's configuration file of the
    # service's user; off where the home is no one's (a pod).
    write_cli_context: bool = True


class Tinker(_Section):
    # A Tinker session whose client sent no heartbeat this long ends: its runs stop and give
    # their devices back. The SDK sends one every 10 seconds.
    heartbeat_seconds: float = Field(60.0, ge=15)
    # How long the service holds the question of a training client's creation (its run waits
    # for devices or loads its model) before it answers try again: the SDK asks again at once.
    creation_hold_seconds: float = Field(5.0, ge=0, le=30)


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
    tracking: Tracking = Field(default_factory=Tracking)
    grafana: Grafana = Field(default_factory=Grafana)
    pools: list[Pool] | None = None  # None: one pool sized from the devices this host has
    default_pool: str | None = None
    projects: list[ProjectQuota] = Field(default_factory=list)
    catalog: list[CatalogEntry] | None = None  # None: the development catalog
    dev_models_dir: str | None = None
    controller: Controller = Field(default_factory=Controller)
    endpoints: Endpoints = Field(default_factory=Endpoints)
    bootstrap: Bootstrap = Field(default_factory=Bootstrap)
    tinker: Tinker = Field(default_factory=Tinker)
    testing: Testing = Field(default_factory=Testing)


class SettingsError(AkkaError):
    code = "bad-setting"


class Settings(BaseSettings):
    """The deployment's settings: the file's values (given as init values) under the
    environment's. Build them with `load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        env_parse_none_str="null",
        case_sensitive=False,
        extra="forbid",
    )

    trainer: Trainer = Field(default_factory=Trainer)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment wins over the file; no .env files or secrets directories.
        return (env_settings, init_settings)

    @property
    def home(self) -> Path:
        raw = self.trainer.home or os.environ.get("AKKA_HOME") or "~/.akka/trainer"
        return Path(raw).expanduser().resolve()

    @property
    def database_url(self) -> str:
        return self.trainer.database.url or f"sqlite:///{self.home / 'trainer.db'}"

    @property
    def database_pool_size(self) -> int:
        configured = self.trainer.database.pool_size
        return configured if configured is not None else self.trainer.listen.worker_threads + 4

    @property
    def storage_url(self) -> str:
        return self.trainer.storage.url or f"file://{self.home / 'blobs'}"

    @property
    def storage(self) -> StorageSpec:
        """The blob store as the service reaches it (no credentials)."""
        return StorageSpec(url=self.storage_url, s3=self.trainer.storage.s3.options())

    @property
    def trainer_url(self) -> str:
        if self.trainer.url:
            return self.trainer.url.rstrip("/")
        return f"http://{self.trainer.listen.host}:{self.trainer.listen.port}"

    @property
    def dev_models_dir(self) -> Path:
        raw = self.trainer.dev_models_dir or os.environ.get("AKKA_DEV_MODELS_DIR")
        return Path(raw).expanduser().resolve() if raw else self.home / "models"


def load_settings(path: str | Path | None = None) -> Settings:
    """Read the settings file (if any), check it, and apply the environment's overrides."""
    trainer: dict[str, Any] = {}
    if path is not None:
        from_file = _read_file(Path(path))
        try:
            checked = Trainer.model_validate(from_file)
        except ValidationError as exc:
            raise SettingsError(_describe(exc, f" in {path}")) from exc
        # By field name: the spelling the environment's overrides arrive in, so that an
        # override replaces the file's value instead of standing beside it.
        trainer = checked.model_dump(exclude_unset=True)
    try:
        # A dict, not a Trainer: pydantic-settings merges the environment's values into it.
        return Settings(trainer=trainer)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SettingsError(_describe(exc, " in the environment", os.environ)) from exc
    except EnvironmentParseError as exc:
        raise SettingsError(_describe_unparsed(exc, os.environ)) from exc


def _read_file(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise SettingsError(f"The settings file {path} does not exist.") from exc
    try:
        where = f"The settings file {path}"
        loaded = load_document(data, where, max_bytes=MAX_SETTINGS_BYTES, syntax="YAML") or {}
    except InvalidRequest as exc:
        raise SettingsError(exc.message) from None
    if not isinstance(loaded, dict) or set(loaded) - {"trainer"}:
        raise SettingsError(f"The settings file {path} must hold one top-level key, `trainer`.")
    return loaded.get("trainer") or {}


def _describe(exc: ValidationError, where: str, environ: Mapping[str, str] | None = None) -> str:
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if environ is not None:
            loc = loc[1:]  # the environment's errors start at the `trainer` field
        key = ".".join(["trainer", *(p.replace("_", "-") for p in loc)])
        if environ is not None:
            variables = _variables(err["loc"], environ)
            if variables:
                key += f" ({', '.join(variables)})"
        if err["type"] == "extra_forbidden":
            lines.append(f"  - {key}: not a known setting; remove it or check its spelling")
        else:
            lines.append(f"  - {key}: {err['msg']}")
    return f"Bad setting{where}:\n" + "\n".join(lines)


def _describe_unparsed(exc: EnvironmentParseError, environ: Mapping[str, str]) -> str:
    # pydantic-settings raises this from the JSON error of the value it could not decode.
    cause = exc.__cause__
    value = cause.doc if isinstance(cause, json.JSONDecodeError) else None
    variables = sorted(
        name
        for name, raw in environ.items()
        if name.upper().startswith(ENV_PREFIX + "TRAINER") and raw == value
    )
    named = ", ".join(variables) if variables else "an AKKA_TRAINER__ variable"
    return (
        f"Bad setting in the environment: {named} is not valid JSON ({cause}); a key that "
        "holds a list or an object takes a JSON value."
    )


def _variables(loc: tuple[int | str, ...], environ: Mapping[str, str]) -> list[str]:
    """The environment variables that set the value at `loc`: the one named by the longest
    part of the path that has any (a JSON value for a list or an object sets all below it)."""
    names = [str(p).upper().replace("-", "_") for p in loc]
    for end in range(len(names), 0, -1):
        if any(isinstance(p, int) for p in loc[:end]):
            continue
        stem = ENV_PREFIX + ENV_DELIMITER.join(names[:end])
        # Below `trainer` itself only its own variable counts: every override starts with it.
        below = stem + ENV_DELIMITER if end > 1 else None
        found = sorted(
            name
            for name in environ
            if name.upper() == stem or (below is not None and name.upper().startswith(below))
        )
        if found:
            return found
    return []
