"""Plans from YAML or JSON documents, with every schema problem reported at once."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from akka_training.core.errors import PlanRefused, Problem
from akka_training.core.plans import PipelinePlan, RunPlan

M = TypeVar("M", bound=BaseModel)


def parse_plan(data: dict[str, Any]) -> RunPlan | PipelinePlan:
    kind = data.get("kind", "run")
    if kind == "run":
        return parse_model(RunPlan, data)
    if kind == "pipeline":
        return parse_model(PipelinePlan, data)
    raise PlanRefused([Problem("kind", f"kind is {kind!r}; set it to run or pipeline.")])


def parse_model(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise PlanRefused(problems_of(exc, model)) from exc


def salvage(model: type[M], data: dict[str, Any]) -> tuple[M | None, list[str]]:
    """What of a refused document still parses: `data` without the fields that failed (an
    unknown field, a bad value, which then takes its default), read as `model`; and the fields
    left out. None when a required field is missing or nothing parses, so that the rules can
    still run over the rest and every problem is reported at once."""
    document = copy.deepcopy(data)
    removed: list[str] = []
    for _ in range(4):
        try:
            return model.model_validate(document), removed
        except ValidationError as exc:
            for err in exc.errors():
                if err["type"] == "missing" or not _remove(document, err["loc"]):
                    return None, removed
                removed.append(_join(_clean_loc(err["loc"])))
    return None, removed


def _remove(document: Any, loc: tuple[Any, ...]) -> bool:
    """Delete the value at `loc` (as pydantic names it) from `document`; False when the path
    is not there as a mapping key (a union's tag, a list item)."""
    node = document
    path = _clean_loc(tuple(loc))
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if isinstance(node, dict) and part in node:
            if last:
                del node[part]
                return True
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            if last:
                return False
            node = node[part]
        else:
            return False
    return False


def problems_of(exc: ValidationError, model: type[BaseModel]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = _clean_loc(err["loc"])
        field = _join(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = _join(loc[:-1])
            known = _known_fields(model, loc[:-1])
            where = f" in {parent}" if parent else ""
            hint = f" (known fields: {', '.join(known)})" if known else ""
            message = f"{field} is not a known field{where}; remove it or check its spelling{hint}."
        elif kind == "missing":
            message = f"{field} is required; set it."
        elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
            message = f"{field}.kind must be one of match, regex, length, rule, judge or http."
        elif kind == "literal_error":
            message = f"{field}: {err['msg'].replace('Input should be', 'set it to')}."
        else:
            message = f"{field}: {err['msg']}."
        key = (field, message)
        if key not in seen:
            seen.add(key)
            problems.append(Problem(field, message))
    return problems


def _clean_loc(loc: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for part in loc:
        # Discriminated unions add the tag ('match', ...) and type names to the path.
        if isinstance(part, str) and (
            part in ("match", "regex", "length", "rule", "judge", "http") or "[" in part
        ):
            continue
        out.append(part)
    return out


def _join(loc: list[Any]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def _known_fields(model: type[BaseModel], loc: list[Any]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = _field_by_alias(current, str(part))
        if field is None:
            return []
        current = _model_of(field.annotation)
        if current is None:
            return []
    return [f.alias or name for name, f in current.model_fields.items()]


def _field_by_alias(model: type[BaseModel], alias: str) -> Any:
    for name, field in model.model_fields.items():
        if (field.alias or name) == alias:
            return field
    return None


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None
