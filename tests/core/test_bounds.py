"""Every number and text a plan or a request body carries has a bound the database can store
(`core.bounds`): a field added without one fails here, before a user meets a 500."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from akka_training.api.adapters import MergeRequest
from akka_training.api.projects import ProjectRequest, QuotaRequest
from akka_training.api.runs import DeriveRequest
from akka_training.api.system import ExchangeRequest, TokenRequest
from akka_training.core.evaluations import EvaluationPlan
from akka_training.core.limits import INT32_MAX, SEED_MAX
from akka_training.core.plans import PipelinePlan, RunPlan

MODELS = [
    RunPlan,
    PipelinePlan,
    EvaluationPlan,
    ProjectRequest,
    QuotaRequest,
    TokenRequest,
    ExchangeRequest,
    MergeRequest,
    DeriveRequest,
]
# Request bodies, whose decimals' ceilings a schema of an optional number does not show.
SERVICE_BODIES = {TokenRequest}
# Texts bounded another way: by a validator (module names and patterns), or free-form where the
# service never stores them in a column (the choices of PauseRequest are checked by name).
UNBOUNDED_TEXTS = {"targetModules"}
# Whole numbers whose lower bound the service checks itself, with its own sentence.
SERVICE_CHECKS_BELOW = {"quota"}


def leaves(schema: dict[str, Any], defs: dict[str, Any], path: str = "") -> list[tuple[str, Any]]:
    """(path, schema) of each number and text in a JSON schema, through refs and unions."""
    if "$ref" in schema:
        return leaves(defs[schema["$ref"].split("/")[-1]], defs, path)
    found: list[tuple[str, Any]] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            found += leaves(option, defs, path)
    if "discriminator" in schema:
        return found
    kind = schema.get("type")
    if kind == "object":
        for name, sub in (schema.get("properties") or {}).items():
            found += leaves(sub, defs, f"{path}.{name}" if path else name)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            found += leaves(extra, defs, f"{path}[*]")
    elif kind == "array":
        found.append((path, schema))
        found += leaves(schema.get("items") or {}, defs, f"{path}[]")
    elif kind in ("integer", "number", "string"):
        found.append((path, schema))
    return found


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
def test_every_field_has_a_bound(model: type[BaseModel]) -> None:
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    unbounded = []
    for path, leaf in leaves(schema, defs):
        name = path.split(".")[-1].rstrip("[]")
        if leaf["type"] == "integer":
            top = SEED_MAX if name == "seed" else INT32_MAX
            low = "minimum" in leaf or name in SERVICE_CHECKS_BELOW
            bounded = leaf.get("maximum", top + 1) <= top and low
        elif leaf["type"] == "string":
            bounded = bool({"maxLength", "enum", "const"} & set(leaf))
        elif leaf["type"] == "array":
            bounded = bool({"maxLength", "maxItems"} & set(leaf))
        else:
            # A decimal: finite (Number), and below a ceiling that refuses absurd values (a
            # learning rate of 1e308 diverged at its second step).
            bounded = bool({"maximum", "exclusiveMaximum"} & set(leaf)) or model in SERVICE_BODIES
        if not bounded and name not in UNBOUNDED_TEXTS:
            unbounded.append(path)
    assert unbounded == []


def test_the_walk_sees_the_nested_fields() -> None:
    schema = RunPlan.model_json_schema(by_alias=True)
    paths = [path for path, _ in leaves(schema, schema["$defs"])]
    for path in (
        "config.hyperparams.training.maxSteps",
        "config.reward.terms",
        "config.reward.terms[].name",
        "config.reward.terms[].headers[*]",
        "execution.gpus",
        "modelName",
    ):
        assert path in paths
