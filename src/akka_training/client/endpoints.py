"""Endpoints: a base model and a project's adapters served over the OpenAI API (at the
trainer's ``/openai/v1``, with a project token as the API key)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from akka_training import api
from akka_training.client.base import BaseClient
from akka_training.core.errors import (
    AkkaError,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    ServiceUnavailable,
    TrainerUnreachable,
    Unauthorized,
)

if TYPE_CHECKING:
    import akka_training.api.endpoints  # noqa: F401


class EndpointsApi(BaseClient):
    def create_endpoint(
        self,
        project: str,
        name: str,
        base_model: str,
        adapters: list[str] | None = None,
        gpus: int = 1,
        pool: str | None = None,
        idle_minutes: float | None = None,
    ) -> api.endpoints.EndpointRecord:
        """Start an endpoint serving `base_model` and `adapters` (RUN, RUN:SNAPSHOT or a
        modelName); it is READY once its job has loaded them."""
        body = api.endpoints.EndpointCreate(
            project=project,
            name=name,
            base_model=base_model,
            adapters=adapters or [],
            gpus=gpus,
            pool=pool,
            idle_minutes=idle_minutes,
        ).to_json()
        return self.call(api.endpoints.EndpointRecord, "POST", "/v1/endpoints", json=body)

    def endpoints(
        self, project: str | None = None, all: bool = False
    ) -> list[api.endpoints.EndpointRecord]:
        params = {"project": project, "all": all}
        return self.call(list[api.endpoints.EndpointRecord], "GET", "/v1/endpoints", params=params)

    def endpoint(self, project: str, name: str) -> api.endpoints.EndpointRecord:
        return self.call(api.endpoints.EndpointRecord, "GET", f"/v1/endpoints/{project}/{name}")

    def add_endpoint_adapter(
        self, project: str, name: str, adapter: str
    ) -> api.endpoints.EndpointRecord:
        """Serve one more adapter on the endpoint, without a restart."""
        body = api.endpoints.EndpointAdapterRef(adapter=adapter).to_json()
        return self.call(
            api.endpoints.EndpointRecord,
            "POST",
            f"/v1/endpoints/{project}/{name}/adapters",
            json=body,
        )

    def remove_endpoint_adapter(
        self, project: str, name: str, adapter: str
    ) -> api.endpoints.EndpointRecord:
        return self.call(
            api.endpoints.EndpointRecord,
            "DELETE",
            f"/v1/endpoints/{project}/{name}/adapters/{adapter}",
        )

    def delete_endpoint(self, project: str, name: str) -> api.endpoints.EndpointRecord:
        return self.call(api.endpoints.EndpointRecord, "DELETE", f"/v1/endpoints/{project}/{name}")

    def served_models(self) -> list[api.endpoints.ServedModel]:
        """The models (base models, runs, ``RUN:SNAPSHOT``, modelNames) the live endpoints of
        the caller's projects serve, as ``/openai/v1/models`` lists them."""
        try:
            response = self._http.get("/openai/v1/models")
        except httpx.ConnectError as exc:
            raise TrainerUnreachable(f"The trainer at {self.url} does not answer.") from exc
        if response.status_code >= 400:
            raise _openai_error(response)
        return [api.endpoints.ServedModel.model_validate(m) for m in response.json()["data"]]

    def chat_stream(
        self,
        model: str,
        messages: list[dict[str, Any]],
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_wait: Callable[[str], None] | None = None,
        patience: float = 300.0,
    ) -> Iterator[api.endpoints.ChatPiece]:
        """The assistant's answer to `messages` from the endpoint serving `model`, a piece of
        text at a time, through the trainer's ``/openai/v1``. While the endpoint starts, it
        waits as the trainer's ``Retry-After`` says (telling `on_wait` why), up to `patience`
        seconds."""
        body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        deadline = time.monotonic() + patience
        while True:
            try:
                with self._http.stream(
                    "POST",
                    "/openai/v1/chat/completions",
                    json=body,
                    timeout=httpx.Timeout(600.0, connect=10.0),
                ) as response:
                    if response.status_code == 503 and time.monotonic() < deadline:
                        response.read()
                        if on_wait is not None:
                            on_wait(_openai_message(response))
                        time.sleep(float(response.headers.get("Retry-After", "5")))
                        continue
                    if response.status_code >= 400:
                        response.read()
                        raise _openai_error(response)
                    for line in response.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        for choice in json.loads(line[6:]).get("choices", []):
                            text = choice.get("delta", {}).get("content") or ""
                            yield api.endpoints.ChatPiece(text=text)
                    return
            except httpx.ConnectError as exc:
                raise TrainerUnreachable(f"The trainer at {self.url} does not answer.") from exc

    def sample(
        self,
        model: str,
        row: dict[str, Any],
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_wait: Callable[[str], None] | None = None,
        patience: float = 300.0,
    ) -> api.endpoints.Sampled:
        """`n` completions of one row, `{"prompt": TEXT}` (a text completion) or
        `{"messages": [...]}` (a chat), from the endpoint serving `model`; waits while the
        endpoint starts, as `chat_stream` does."""
        body: dict[str, Any] = {"model": model, "n": n}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if "messages" in row:
            body["messages"] = row["messages"]
            path = "/openai/v1/chat/completions"
        else:
            body["prompt"] = row.get("prompt")
            path = "/openai/v1/completions"
        deadline = time.monotonic() + patience
        while True:
            try:
                response = self._http.post(path, json=body, timeout=600.0)
            except httpx.ConnectError as exc:
                raise TrainerUnreachable(f"The trainer at {self.url} does not answer.") from exc
            if response.status_code == 503 and time.monotonic() < deadline:
                if on_wait is not None:
                    on_wait(_openai_message(response))
                time.sleep(float(response.headers.get("Retry-After", "5")))
                continue
            if response.status_code >= 400:
                raise _openai_error(response)
            answer = response.json()
            choices = sorted(answer["choices"], key=lambda c: int(c["index"]))
            outputs = [
                str(c["message"]["content"] if "message" in c else c["text"]) for c in choices
            ]
            usage = answer.get("usage") or {}
            return api.endpoints.Sampled(
                outputs=outputs,
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
            )


def _openai_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


def _openai_error(response: httpx.Response) -> AkkaError:
    """The exception of an OpenAI error object the front door answered."""
    kinds: dict[int, type[AkkaError]] = {
        400: InvalidRequest,
        401: Unauthorized,
        404: NotFound,
        429: QuotaExceeded,
        503: ServiceUnavailable,
    }
    return kinds.get(response.status_code, AkkaError)(_openai_message(response))
