"""The settings reference page, generated from the settings model:

    python -m akka_training.config.reference > docs/settings.md

Every `trainer.*` key (list items and catalog entries included) with its type, its default, the
environment variable that overrides it and what it means. A key without a meaning here stops
the generator, and a test compares the page with a fresh one, so the page cannot go stale.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from akka_training.config.settings import ENV_DELIMITER, ENV_PREFIX, Trainer

MEANINGS: dict[str, str] = {
    "trainer.home": "The trainer's own directory: the SQLite database, the local blob store, jobs' working directories, the admin token of a first start. Unset: `$AKKA_HOME`, else `~/.akka/trainer`.",
    "trainer.url": "How jobs (and the links the service prints) reach this service. Unset: from `trainer.listen`.",
    "trainer.listen.host": "The address the service listens on (`0.0.0.0` in a container).",
    "trainer.listen.port": "The port the service listens on.",
    "trainer.listen.worker-threads": "Requests the service works on at once (the threads that run its handlers); more wait for a free one. The Postgres pool is sized from it.",
    "trainer.database.url": "SQLAlchemy URL of the database (`postgresql://USER:PASSWORD@HOST:5432/DB`). Unset: SQLite at `<home>/trainer.db`. Two or more replicas need Postgres (the controller's leader holds an advisory lock).",
    "trainer.database.wait-seconds": "How long a request waits for the database (its turn to write on SQLite, where one write transaction runs at a time; a free connection of the pool on Postgres) before it answers 503 with `Retry-After`, having saved nothing.",
    "trainer.database.pool-size": "Database connections the service keeps, on Postgres and on a SQLite file (10 more may open for a moment on Postgres, as many as needed on SQLite, where a writer waits for its turn to write rather than for a connection). Unset: `trainer.listen.worker-threads` plus 4 (the controller, its leader lock, the metrics), so that no request waits for a connection. Keep the sum over the replicas below the server's `max_connections`.",
    "trainer.storage.url": "The blob store: `file:///PATH` (a local directory) or `s3://BUCKET/PREFIX` (an S3-compatible bucket). Unset: `<home>/blobs`. With Ray workers on other nodes, use S3: nothing is then shared through a filesystem.",
    "trainer.storage.s3.endpoint-url": "The S3 API's address: `http://minio:9000`, `https://s3.eu-west-1.amazonaws.com`. Unset: AWS's own for the region.",
    "trainer.storage.s3.region": "The bucket's region. Unset: boto3's (`AWS_REGION`, `~/.aws/config`).",
    "trainer.storage.s3.path-style": "Path-style addressing (`http://HOST/BUCKET/KEY`), which MinIO, Ceph and most S3-compatible stores need; off: virtual-hosted style.",
    "trainer.storage.s3.part-size-mib": "Size of each part of a multipart upload, in MiB (5 to 512): the memory a write holds at most.",
    "trainer.storage.s3.access-key-id": "The access key. Unset: boto3's chain (`AWS_ACCESS_KEY_ID`, `~/.aws/credentials`, the node's role). When set, jobs receive it as `AWS_ACCESS_KEY_ID` in their environment, never in their spec or logs.",
    "trainer.storage.s3.secret-access-key": "The secret key (with `access-key-id`); jobs receive it as `AWS_SECRET_ACCESS_KEY`. Give it from a Secret: `AKKA_TRAINER__STORAGE__S3__SECRET_ACCESS_KEY`.",
    "trainer.storage.s3.session-token": "A session token of temporary credentials; jobs receive it as `AWS_SESSION_TOKEN`.",
    "trainer.storage.cleanup-grace-seconds": "Start-up, and the controller every `cleanup-every-seconds`, removes what a crash left in the store (partial uploads, staged dataset uploads, snapshot keys with no committed snapshot, empty folders) once older than this.",
    "trainer.storage.cleanup-every-seconds": "How often the controller's leader repeats the start-up cleanup of the store while the service runs.",
    "trainer.backend": "Where jobs run: `local` (child processes of the service, on this host) or `ray` (a Ray cluster's job API, KubeRay on Kubernetes).",
    "trainer.local.python": "The interpreter that runs local jobs. Unset: the service's own.",
    "trainer.local.stop-grace-seconds": "Seconds between SIGTERM and SIGKILL when a local job is stopped.",
    "trainer.local.enforce-host-memory": "Apply the envelope's host memory to each local job as its data-size limit.",
    "trainer.local.job-log-days": "Days an ended local job's log stays in `$AKKA_HOME/jobs/RUN/ATTEMPT` for `runs logs`. Its checkpoints, copies and token go when it ends (they are stored elsewhere).",
    "trainer.ray.address": "The Ray head's dashboard (job and state APIs), e.g. `http://raycluster-head-svc:8265`.",
    "trainer.ray.python": "Absolute path of the interpreter that runs jobs on the Ray nodes. Unset: the service's own (right only where the nodes share its image).",
    "trainer.ray.trainer-url": "How a job on a Ray node reaches the service. Unset: `trainer.url`.",
    "trainer.ray.storage-url": "The blob store as a job on a Ray node reaches it, where that differs from `trainer.storage.url`. Unset: `trainer.storage.url`.",
    "trainer.ray.submit-timeout-seconds": "Timeout of a job submission to the Ray head.",
    "trainer.ray.request-timeout-seconds": "Timeout of every other request to the Ray head (job state, logs, stop, nodes).",
    "trainer.ray.cpus-per-device": "CPUs a job holds per device of its claim; on a CPU pool one device is this many CPUs.",
    "trainer.ray.runtime-env": "A Ray `runtime_env` merged into every job's (`env_vars`, `image_uri`, …); the job's own variables win over `env_vars` of the same name. JSON in the environment.",
    "trainer.ray.work-dir": "Directory on the Ray nodes for the jobs' working directories. Unset: `$TMPDIR/akka-jobs`.",
    "trainer.reinforcement.engine": "The engine of `grpo` and `gspo` runs: `trl` or `verl` (SFT and DPO always train on TRL).",
    "trainer.reinforcement.image-text": "Whether verl admits `grpo`/`gspo` over image-text models.",
    "trainer.reinforcement.verl-python": "The interpreter of verl's own environment, which jobs launch verl with.",
    "trainer.reinforcement.trl-generation": "How TRL's `grpo`/`gspo` generate on a GPU: `vllm` (TRL's vLLM colocate mode), `hf` (transformers' generate) or `auto` (vLLM where the job's environment has it). CPU jobs use `hf` unless this says `vllm` (vLLM's CPU build, `scripts/setup-vllm-env.sh`).",
    "trainer.reinforcement.vllm-gpu-memory-utilization": "The share of the GPU's memory vLLM takes for its weights and KV cache while it generates (TRL's `vllm_gpu_memory_utilization`).",
    "trainer.reinforcement.vllm-sleep-mode": "Whether vLLM releases its weights and KV cache during the update (TRL's `vllm_enable_sleep_mode`).",
    "trainer.datasets.max-bytes": "The largest dataset upload, in bytes; a larger one is refused as it arrives.",
    "trainer.bundles.max-bytes": "The largest scoring bundle, in bytes.",
    "trainer.telemetry.collector-endpoint": "Base URL of an OpenTelemetry Collector's OTLP/HTTP receiver (`http://otel-collector:4318`) for the service's and the jobs' metrics and spans (deploy/otel/collector.yaml has both pipelines). Unset: no OTLP; Prometheus at `/metrics` and the jobs' files only.",
    "trainer.telemetry.metrics-token-file": "A file holding the bearer token Prometheus scrapes `/metrics` with (at least 32 characters; a mounted Secret that Prometheus's `authorization.credentials_file` reads too). The metrics cover every project, so `/metrics` answers only this token and admin tokens. Unset: admin tokens only.",
    "trainer.telemetry.service-metrics": "How the service's own metrics leave it, one way per deployment so that no series comes twice: `otlp` (sent to the collector; `/metrics` answers 404) or `scrape` (Prometheus scrapes `/metrics`). Unset: `otlp` when a collector endpoint is set, else `scrape`.",
    "trainer.grafana.url": "Grafana's base URL, for the links `runs get` prints. Unset: no links.",
    "trainer.grafana.dashboard": "The uid of the akka training dashboard in Grafana.",
    "trainer.grafana.signing-key": "PEM file of the RSA key that signs Grafana link tokens. Unset: one generated under the home (give one from a Secret when replicas share links).",
    "trainer.grafana.link-lifetime-seconds": "How long a Grafana link's token is valid (60 or more).",
    "trainer.grafana.issuer": "The `iss` claim of a link's token; Grafana's `[auth.jwt] expect_claims` checks it (docs/grafana.md).",
    "trainer.grafana.audience": "The `aud` claim of a link's token; Grafana's `[auth.jwt] expect_claims` checks it (docs/grafana.md).",
    "trainer.tracking.mlflow-uri": "An MLflow tracking server (`http://mlflow:5000`): each run becomes an MLflow run with its settings, step figures, adapter and TensorBoard files (docs/experiment-tracking.md). Unset: no MLflow.",
    "trainer.pools": "The device pools. Unset: one pool `default` sized from the devices this host has. JSON in the environment.",
    "trainer.pools[].name": "The pool's name, as a run plan's `execution.pool` names it.",
    "trainer.pools[].accelerator": "What its devices are (`cpu`, `H100`, …), as `capacity` shows it.",
    "trainer.pools[].devices": "Devices the pool declares.",
    "trainer.pools[].max-claim": "The most devices one run may hold in the pool. Unset: all of them.",
    "trainer.pools[].host-ram-gib": "Host memory of one of its nodes, in GiB, as `capacity` shows it.",
    "trainer.pools[].label": "Ray backend: the value of the `pool` node label whose nodes serve this pool.",
    "trainer.default-pool": "The pool of a plan that names none. Unset: the first pool.",
    "trainer.projects": "Projects created at start-up with their quotas.",
    "trainer.projects[].name": "The project's name.",
    "trainer.projects[].quota": "Devices the project may hold at once. Unset: no quota.",
    "trainer.catalog": "The base models this deployment admits (see **The catalog** below). Unset: the development catalog of tiny models the trainer builds. JSON in the environment.",
    "trainer.catalog[].id": "The model's id, as a run plan's `baseModel` names it.",
    "trainer.catalog[].path": "Where the model's files are, in the Hugging Face layout: a directory every job's node can read, or `s3://BUCKET/PREFIX` (each node downloads it once into its model cache, `$AKKA_MODEL_CACHE`, default `~/.cache/akka/models`, with the store's `trainer.storage.s3` settings).",
    "trainer.catalog[].revision": "The revision of the files `path` holds, pinned in each run's resolved plan.",
    "trainer.catalog[].hub-id": "The model's public name (a Hugging Face Hub repository such as `Qwen/Qwen3-0.6B`); a downloaded adapter names its base model by it, else by `id`.",
    "trainer.catalog[].hub-revision": "The commit of `hub-id` that `path` holds.",
    "trainer.catalog[].modality": "`text`, or `image-text` for a vision-language model (its adapter covers the language backbone only).",
    "trainer.catalog[].context-length": "The model's context length in tokens (16 or more); the default `maxSeqLength` is the smaller of it and 2048.",
    "trainer.catalog[].status": "`available`, or `disabled` to refuse new runs on it.",
    "trainer.catalog[].envelopes": "The shapes of run the model is qualified for; a run is admitted only inside one.",
    "trainer.catalog[].envelopes[].method": "`sft`, `dpo`, `grpo` or `gspo`.",
    "trainer.catalog[].envelopes[].engine": "`trl` or `verl` (SFT and DPO envelopes are `trl`).",
    "trainer.catalog[].envelopes[].gpus": "The run's GPU count (`execution.gpus`).",
    "trainer.catalog[].envelopes[].precision": "`BF16`, `FP16` or `FP32`.",
    "trainer.catalog[].envelopes[].gpu-memory-gib": "Device memory a run needs per GPU, in GiB.",
    "trainer.catalog[].envelopes[].host-memory-gib": "Host memory a run needs per node, in GiB (the local backend can enforce it: `trainer.local.enforce-host-memory`).",
    "trainer.catalog[].max-loras": "Adapters an endpoint served by vLLM holds on its device at once (vLLM's `--max-loras`); a request for another swaps one in.",
    "trainer.catalog[].max-lora-rank": "The largest LoRA rank an endpoint served by vLLM loads (vLLM's `--max-lora-rank`: 1, 8, 16, 32, 64, 128, 256, 320 or 512); an adapter of a larger rank is not served.",
    "trainer.dev-models-dir": "Where the development models are built and kept. Unset: `$AKKA_DEV_MODELS_DIR`, else `<home>/models`.",
    "trainer.controller.interval-seconds": "Seconds between two passes of the reconcile loop (a request wakes it sooner).",
    "trainer.controller.steady-seconds": "Seconds between two passes while the loop has nothing to move: every open run trains with a live job (or rests paused), and no run waits for devices, no task and no pipeline is open. A request, or a job's report that it ended, wakes it at once; a job that dies without one is noticed within this long. Never shorter than `interval-seconds`.",
    "trainer.controller.start-retries": "How often a refused job start is tried again before the run fails with `job-start-failed`.",
    "trainer.controller.retry-base-seconds": "The first back-off between start retries, and between the attempts of a job that dies without a report (it doubles).",
    "trainer.endpoints.idle-minutes": "Minutes an endpoint may go without a request before its job ends and its devices go back to the pool (phase IDLE); the next request starts it again, answered 503 with `Retry-After` meanwhile. 0: never. `endpoints create --idle-minutes` overrides it per endpoint.",
    "trainer.endpoints.engine": "What serves an endpoint and generates an evaluation's completions (one generation path): `vllm` (vLLM's OpenAI server with LoRA enabled; adapters are loaded and unloaded while it runs), `transformers` (transformers and PEFT, batched), or `auto`: vLLM where `trainer.endpoints.vllm-python` names vLLM's environment and the base model suits it (a text model; on CPU a head size vLLM's CPU attention takes, such as 64 or 128), else transformers. A `vllm` that cannot work fails the endpoint or the evaluation, saying why. `endpoints get` says which engine serves, `evaluations get` which generated.",
    "trainer.endpoints.vllm-python": "The interpreter of vLLM's environment on the nodes that run endpoints and evaluations (`scripts/setup-vllm-env.sh` builds `.venv-vllm`; `--gpu` on GPU nodes). Unset: the deployment has no vLLM, and `auto` serves and evaluates with transformers.",
    "trainer.controller.job-retries": "How often in a row a job that dies without a report (killed, crashed; not out of memory) is run again from the run's last snapshot before the run fails with the cause.",
    "trainer.controller.stall-seconds": "A run whose completed-step count stops rising this long while its job lives is stalled (the job dumps its stacks).",
    "trainer.controller.report-seconds": "A job sends its step, rollout and snapshot reports at most this often, those that came meanwhile in one request, which also asks for the service's directive: a pause or cancel reaches a job whose steps are shorter within about this long, at the end of the step then in progress. Longer steps report and ask each step. `0`: every report on its own.",
    "trainer.controller.unreachable-seconds": "How long the cluster may stay unreachable while a run waits before it fails with `cluster-unreachable`.",
    "trainer.controller.bootstrap-seconds": "How long after its launch a job may exchange its one-time bootstrap credential for its token and the store's credentials (once). A Ray job may first wait for its runtime environment; a job that starts later is refused and exits without reporting.",
    "trainer.bootstrap.admin-token": "The first admin token, given (32 characters or more): registered when the database does not hold it, never written to the home. Unset (and no file): a first start mints one into `<home>/admin-token`; a start whose database already holds an admin token mints none.",
    "trainer.bootstrap.admin-token-file": "A file holding the first admin token (a mounted Secret), instead of `admin-token`.",
    "trainer.bootstrap.write-cli-context": "Add a `local` context holding the admin token to the CLI configuration of the service's user. Turn it off where the home is no one's (a pod).",
    "trainer.tinker.creation-hold-seconds": "How long the service holds the SDK's question about a Tinker training client being created (its run waits for devices or loads its model) before it answers try again; the SDK asks again at once, so a shorter hold busies the service. The job holds its other questions up to 5 seconds for their result.",
    "trainer.tinker.heartbeat-seconds": "A Tinker API session whose client sent no heartbeat this long ends: its training clients' runs stop and give their devices back (`docs/tinker-api.md`). The SDK sends a heartbeat every 10 seconds.",
    "trainer.testing.scripted-jobs": "Run the scripted job (it reports steps and trains nothing) instead of the engines. Tests only.",
}


def _models(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field holds (directly, optional or as a list) and whether it is a list."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _models(arg)
    if origin is list:
        inner, _ = _models(typing.get_args(annotation)[0])
        return inner, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(_type(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin is list:
        return "list"
    if origin is dict:
        return "object"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        made = field.default_factory()
        return "" if isinstance(made, BaseModel) else f"`{json.dumps(made)}`"
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "unset"
    if isinstance(field.default, bool):
        return f"`{str(field.default).lower()}`"
    return f"`{field.default}`"


def _key(name: str) -> str:
    return name.replace("_", "-")


def rows(model: type[BaseModel], prefix: str, env: str | None) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        key = f"{prefix}.{_key(name)}"
        variable = f"{env}{ENV_DELIMITER}{name.upper()}" if env else ""
        inner, is_list = _models(field.annotation)
        if inner is not None and not is_list:
            yield from rows(inner, key, variable or None)
            continue
        if key not in MEANINGS:
            raise KeyError(f"{key} has no meaning in akka_training.config.reference.MEANINGS")
        shown = f"`{variable}`" if variable else ""
        yield (f"`{key}`", _type(field.annotation), _default(field), shown, MEANINGS[key])
        if inner is not None and is_list:
            yield from rows(inner, f"{key}[]", None)


def _table(lines: list[tuple[str, ...]]) -> str:
    out = ["| Key | Type | Default | Environment | Meaning |", "| --- | --- | --- | --- | --- |"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return "\n".join(out)


def render() -> str:
    main = [r for r in rows(Trainer, "trainer", ENV_PREFIX + "TRAINER") if "catalog[]" not in r[0]]
    catalog = [r for r in rows(Trainer, "trainer", ENV_PREFIX + "TRAINER") if "catalog[]" in r[0]]
    unused = set(MEANINGS) - {r[0].strip("`") for r in main + catalog}
    if unused:
        raise KeyError(f"MEANINGS names keys the settings do not have: {sorted(unused)}")
    return f"""# Settings reference

<!-- Generated by `python -m akka_training.config.reference > docs/settings.md` from the
settings model (`akka_training/config/settings.py`); a test checks that it is current. -->

The trainer reads one YAML file, `akka trainer serve --config FILE`, whose one top-level key is
`trainer`; every key below is spelled as in that file. An environment variable overrides one key:
`AKKA_TRAINER__<KEY>__<KEY>` (`__` between keys, `_` for `-`, any case), a scalar as written
(`null` clears a key), a list or an object as JSON. A bad value stops start-up with a message
naming the key (and the variable). Keys inside list items (`[]`) are set in the file, or in the
JSON of their list's variable.

{_table(main)}

## The catalog

`trainer.catalog` lists the base models a deployment admits. Each entry takes its keys in the
file's kebab-case (or the camelCase of a run plan):

```yaml
trainer:
  catalog:
    - id: qwen3-8b
      hub-id: Qwen/Qwen3-8B
      path: s3://akka-training/models/qwen3-8b     # or a directory every node can read
      context-length: 32768
      envelopes:
        - {{method: sft, engine: trl, gpus: 1, precision: BF16, gpu-memory-gib: 80, host-memory-gib: 64}}
        - {{method: grpo, engine: trl, gpus: 1, precision: BF16, gpu-memory-gib: 80, host-memory-gib: 64}}
```

{_table(catalog)}
"""


if __name__ == "__main__":
    sys.stdout.write(render())
