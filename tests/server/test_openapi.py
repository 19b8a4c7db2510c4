"""The OpenAPI document describes what the service really answers: a schema for every success,
the one error body for every error status a route returns, streamed lines and raw uploads."""

from __future__ import annotations

from typing import Any

import pytest

from akka_training.config.settings import Settings
from akka_training.server.app import create_app

NDJSON = "application/x-ndjson"

# Every route and the error statuses it answers with (besides `default`, any other failure).
# A route behind a token answers 401; 403 where the token may not use the project.
ERRORS: dict[tuple[str, str], set[int]] = {
    ("get", "/healthz"): set(),
    ("get", "/readyz"): {503},
    ("get", "/metrics"): {401, 403, 404},
    ("get", "/v1/grafana/jwks"): set(),
    ("get", "/v1/info"): {401},
    ("post", "/v1/auth/exchange"): {400, 401},
    ("get", "/v1/auth/whoami"): {401},
    ("get", "/v1/tokens"): {401},
    ("post", "/v1/tokens"): {400, 401, 403, 404},
    ("delete", "/v1/tokens/{token_id}"): {401, 403, 404},
    ("get", "/v1/projects"): {401},
    ("post", "/v1/projects"): {400, 401, 403, 409},
    ("get", "/v1/projects/{name}"): {401, 403, 404},
    ("put", "/v1/projects/{name}/quota"): {400, 401, 403, 404},
    ("get", "/v1/base-models"): {401},
    ("get", "/v1/base-models/{model_id}"): {401, 404},
    ("get", "/v1/envelopes"): {401},
    ("get", "/v1/capacity"): {401, 403, 404},
    ("post", "/v1/datasets/{project}/{name}"): {400, 401, 403, 404, 409, 413, 422, 507},
    ("get", "/v1/datasets"): {401, 403, 404},
    ("get", "/v1/datasets/{project}/{ref}"): {400, 401, 403, 404},
    ("get", "/v1/datasets/{project}/{ref}/versions"): {400, 401, 403, 404},
    ("put", "/v1/datasets/{project}/{ref}/aliases/{alias}"): {400, 401, 403, 404},
    ("post", "/v1/bundles/{project}/{name}"): {400, 401, 403, 404, 413},
    ("get", "/v1/bundles"): {401, 403},
    ("get", "/v1/bundles/{project}/{ref}"): {400, 401, 403, 404},
    ("post", "/v1/runs"): {400, 401, 403, 422},
    ("get", "/v1/runs"): {400, 401, 403},
    ("get", "/v1/runs/{run_ref}"): {400, 401, 403, 404},
    ("post", "/v1/runs/{run_ref}/cancel"): {400, 401, 403, 404, 409},
    ("post", "/v1/runs/{run_ref}/pause"): {400, 401, 403, 404, 409},
    ("post", "/v1/runs/{run_ref}/resume"): {400, 401, 403, 404, 409},
    ("post", "/v1/runs/{run_ref}/branch"): {400, 401, 403, 404, 422},
    ("post", "/v1/runs/{run_ref}/continue"): {400, 401, 403, 404, 422},
    ("get", "/v1/runs/{run_ref}/snapshots"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/metrics"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/rollouts"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/tree"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/logs"): {400, 401, 403, 404, 503},
    ("get", "/v1/runs/{run_ref}/wait"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/grafana"): {400, 401, 403, 404},
    ("get", "/v1/runs/{run_ref}/adapter"): {400, 401, 403, 404, 409},
    ("get", "/v1/runs/{run_ref}/adapter/files/{path}"): {400, 401, 403, 404, 409},
    ("post", "/v1/runs/{run_ref}/merged"): {400, 401, 403, 404, 409},
    ("get", "/v1/runs/{run_ref}/merged"): {400, 401, 403, 404, 409},
    ("post", "/v1/previews"): {400, 401, 403, 422},
    ("post", "/v1/previews/pipelines"): {400, 401, 403, 422},
    ("post", "/v1/runs/{run_ref}/regrades"): {400, 401, 403, 404, 409, 422},
    ("post", "/v1/runs/{run_ref}/verifications"): {400, 401, 403, 404, 409},
    ("get", "/v1/runs/{run_ref}/merged/files/{path}"): {400, 401, 403, 404, 409},
    ("post", "/v1/endpoints"): {400, 401, 403, 404, 409},
    ("get", "/v1/endpoints"): {401, 403},
    ("get", "/v1/endpoints/{project}/{name}"): {401, 403, 404},
    ("delete", "/v1/endpoints/{project}/{name}"): {401, 403, 404, 409},
    ("post", "/v1/endpoints/{project}/{name}/adapters"): {400, 401, 403, 404, 409},
    ("delete", "/v1/endpoints/{project}/{name}/adapters/{adapter}"): {401, 403, 404},
    ("get", "/v1/tasks"): {401, 403},
    ("get", "/v1/tasks/{task_id}"): {401, 403, 404},
    ("post", "/v1/tasks/{task_id}/cancel"): {401, 403, 404, 409},
    ("post", "/v1/tasks/{task_id}/reports/{kind}"): {400, 401, 403, 409, 422},
    ("post", "/v1/evaluations"): {401, 403, 422},
    ("get", "/v1/evaluations"): {401, 403},
    ("get", "/v1/evaluations/{evaluation_id}"): {401, 403, 404},
    ("post", "/v1/evaluations/{evaluation_id}/cancel"): {401, 403, 404, 409},
    ("get", "/v1/evaluations/{evaluation_id}/samples"): {401, 403, 404},
    ("post", "/v1/pipelines"): {400, 401, 403, 409, 422},
    ("get", "/v1/pipelines"): {401, 403},
    ("get", "/v1/pipelines/{ref}"): {400, 401, 403, 404},
    ("post", "/v1/pipelines/{ref}/cancel"): {400, 401, 403, 404, 409},
    ("post", "/v1/pipelines/{ref}/resume"): {400, 401, 403, 404, 409},
    ("get", "/v1/pipelines/{ref}/wait"): {400, 401, 403, 404},
    ("post", "/v1/jobs/bootstrap"): {401, 409},
    ("post", "/v1/jobs/{run_id}/attempts/{attempt}/{kind}"): {400, 401, 403, 409, 422},
}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): op for path, ops in document["paths"].items() for method, op in ops.items()
    }


def test_every_route_is_listed_with_its_error_statuses(document: dict[str, Any]) -> None:
    ops = operations(document)
    assert set(ops) == set(ERRORS)
    for key, op in ops.items():
        statuses = {int(s) for s in op["responses"] if s.isdigit() and int(s) >= 400}
        assert statuses == ERRORS[key], key
        assert "default" in op["responses"], key


def test_every_error_answer_is_the_one_error_body(document: dict[str, Any]) -> None:
    for key, op in operations(document).items():
        for status, answer in op["responses"].items():
            if status == "default" or int(status) >= 400:
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (key, status)
                assert answer["description"], (key, status)
    # FastAPI's own validation body is never sent: the service answers 400 with ErrorBody.
    assert "HTTPValidationError" not in document["components"]["schemas"]
    detail = document["components"]["schemas"]["ErrorDetail"]["properties"]
    assert set(detail) == {"code", "message", "problems"}


def test_every_success_has_a_schema(document: dict[str, Any]) -> None:
    for key, op in operations(document).items():
        successes = {s: a for s, a in op["responses"].items() if s.isdigit() and int(s) < 300}
        assert successes, key
        for status, answer in successes.items():
            content = answer.get("content")
            assert content, (key, status)
            for media, body in content.items():
                assert body.get("schema"), (key, status, media)
                if media == "application/json":
                    assert body["schema"] not in ({}, {"type": "object"}), (key, status)


def test_streams_document_their_lines(document: dict[str, Any]) -> None:
    ops = operations(document)
    schemas = document["components"]["schemas"]
    for path, line in (
        ("/v1/runs/{run_ref}/wait", "RunWaitLine"),
        ("/v1/pipelines/{ref}/wait", "PipelineWaitLine"),
    ):
        content = ops[("get", path)]["responses"]["200"]["content"]
        assert set(content) == {NDJSON}
        assert content[NDJSON]["schema"] == {"$ref": f"#/components/schemas/{line}"}
        assert schemas[line]["discriminator"]["propertyName"] == "type"
    kinds = set(schemas["RunWaitLine"]["discriminator"]["mapping"])
    assert kinds == {"event", "progress", "run"}
    assert schemas["RunEndLine"]["properties"]["run"] == {"$ref": "#/components/schemas/RunRecord"}


def test_uploads_and_plans_document_their_request_bodies(document: dict[str, Any]) -> None:
    ops = operations(document)
    dataset = ops[("post", "/v1/datasets/{project}/{name}")]
    assert dataset["requestBody"]["content"][NDJSON]["schema"]["format"] == "binary"
    assert {"200", "201"} <= set(dataset["responses"])
    bundle = ops[("post", "/v1/bundles/{project}/{name}")]
    assert bundle["requestBody"]["content"]["application/zip"]["schema"]["format"] == "binary"
    for path, plan in (("/v1/runs", "RunPlan"), ("/v1/pipelines", "PipelinePlan")):
        body = ops[("post", path)]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{plan}"}
    report = ops[("post", "/v1/jobs/{run_id}/attempts/{attempt}/{kind}")]["requestBody"]
    refs = {r["$ref"] for r in report["content"]["application/json"]["schema"]["oneOf"]}
    assert "#/components/schemas/StepReport" in refs and len(refs) == 10
    assert "#/components/schemas/BatchReport" in refs
    task = ops[("post", "/v1/tasks/{task_id}/reports/{kind}")]["requestBody"]
    refs = {r["$ref"] for r in task["content"]["application/json"]["schema"]["oneOf"]}
    assert "#/components/schemas/TaskProgressReport" in refs and len(refs) == 4


def test_downloads_document_their_files_as_binary(document: dict[str, Any]) -> None:
    ops = operations(document)
    for kind in ("adapter", "merged"):
        manifest = ops[("get", f"/v1/runs/{{run_ref}}/{kind}")]["responses"]["200"]
        schema = manifest["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/AdapterManifest"}
        answer = ops[("get", f"/v1/runs/{{run_ref}}/{kind}/files/{{path}}")]["responses"]["200"]
        assert answer["content"] == {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
        }
    merge = ops[("post", "/v1/runs/{run_ref}/merged")]["responses"]
    assert {"200", "201"} <= set(merge)


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    missing = sorted(
        ref.removeprefix("#/components/schemas/")
        for ref in _refs(document)
        if ref.removeprefix("#/components/schemas/") not in schemas
    )
    assert missing == []


def test_answers_name_their_fields_in_camel_case(document: dict[str, Any]) -> None:
    record = document["components"]["schemas"]["RunRecord"]["properties"]
    assert {"baseModel", "phaseSince", "dataFit", "settings", "existing"} <= set(record)
    assert record["createdAt"]["format"] == "date-time"
    assert "for" in document["components"]["schemas"]["Claim"]["properties"]
    assert "from" in document["components"]["schemas"]["TreeNode"]["properties"]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []
