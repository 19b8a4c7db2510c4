"""The service's OpenAPI document: FastAPI's own, plus what it cannot read off the routes.

- `errors`: the statuses a route answers with the one error body (`api.errors.ErrorBody`), and
  ``default`` for any other failure (503 with Retry-After when the database was too busy for
  the request, 500 when the trainer fails on a request). Declaring them
  also keeps FastAPI from listing its own 422 body, which this service never sends.
- `lines`: an answer streamed as line-delimited JSON (``application/x-ndjson``), one object of
  the given type a line.
- `raw_body`: an upload the route reads from the request stream itself.
- `component`: a schema a route refers to by name, for a body the route parses itself (plans
  and job reports are refused with every problem at once, which FastAPI's validation does not
  do).

FastAPI puts only the models it validates into the components; `document` adds the ones these
helpers name.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from akka_training.api.errors import ErrorBody

NDJSON = "application/x-ndjson"
REF = "#/components/schemas/"

_MEANINGS: dict[int, str] = {
    400: "The request is not valid (code invalid): a malformed reference or parameter, or a "
    "body with a wrong or unknown field.",
    401: "No token, or one this trainer does not know, has revoked or lets expire (code "
    "unauthorized).",
    403: "The token may not use this project, or this needs an admin token (code forbidden).",
    404: "What the request names does not exist; the message names what does (code not-found).",
    409: "The request conflicts with the current state (code conflict).",
    413: "The body is larger than this trainer's limit (code too-large).",
    422: "Refused, with every problem at once (code plan-refused).",
    503: "The training cluster does not answer (code unavailable).",
}

# Schemas named by `component` and `lines`, added to the document's components by `document`.
_NAMED: dict[str, tuple[Any, Literal["validation", "serialization"]]] = {}


def errors(*statuses: int | tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route: each status with the error body and what it means there
    (a bare status takes the usual meaning)."""
    out: dict[int | str, dict[str, Any]] = {}
    for entry in statuses:
        status, meaning = entry if isinstance(entry, tuple) else (entry, _MEANINGS[entry])
        out[status] = {"model": ErrorBody, "description": meaning}
    out["default"] = {
        "model": ErrorBody,
        "description": "Any other failure: 503 with Retry-After when the trainer's database "
        "was too busy for the request (nothing of it was saved: send it again after that many "
        "seconds), 500 when the trainer failed on the request.",
    }
    return out


def lines(name: str, line_type: Any, description: str) -> dict[int | str, dict[str, Any]]:
    """A 200 answer streamed as line-delimited JSON, each line one `line_type`."""
    return {
        200: {
            "description": description,
            "content": {NDJSON: {"schema": component(name, line_type, "serialization")}},
        }
    }


def raw_body(media_type: str, description: str) -> dict[str, Any]:
    """The `openapi_extra` of a route that reads its body from the request stream."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {media_type: {"schema": {"type": "string", "format": "binary"}}},
        }
    }


def component(
    name: str, tp: Any, mode: Literal["validation", "serialization"] = "validation"
) -> dict[str, str]:
    """A reference to `tp`'s schema under `name`, which `document` adds to the components."""
    _NAMED[name] = (tp, mode)
    return {"$ref": REF + name}


def document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document of `app` (built once), with the schemas the routes name."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, (tp, mode) in sorted(_NAMED.items()):
        schema = TypeAdapter(tp).json_schema(ref_template=REF + "{model}", mode=mode)
        for key, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(key, sub)
        schemas.setdefault(name, schema)
    app.openapi_schema = doc
    return doc
