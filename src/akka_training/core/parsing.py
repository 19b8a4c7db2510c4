"""Plans from YAML or JSON documents, with every schema problem reported at once."""

from __future__ import annotations

import copy
import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from akka_training.core.errors import PlanRefused, Problem
from akka_training.core.plans import PipelinePlan, RunPlan, stage_tag

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
    unknown field, a bad value, which then takes its default; a bad item of a list of plain
    values, such as a monitor's name in pauseOn), read as `model`; and the fields left out.
    None when a required field is missing or nothing parses, so that the rules can still run
    over the rest and every problem is reported at once."""
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
            _prune(document)
    return None, removed


# What `_remove` leaves in a list where it took an item out: `_prune` drops it once every
# error of a pass is removed, so that the other errors' positions still hold until then.
_GONE = object()


def _remove(document: Any, loc: tuple[Any, ...]) -> bool:
    """Delete the value at `loc` (as pydantic names it) from `document`; False when the path
    is not there as a mapping key or as a plain item of a list (a union's tag, a mapping in a
    list: taking it out would renumber the problems of the items after it)."""
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
                if isinstance(node[part], dict | list):
                    return False
                node[part] = _GONE
                return True
            node = node[part]
        else:
            return False
    return False


def _prune(node: Any) -> None:
    if isinstance(node, dict):
        for value in node.values():
            _prune(value)
    elif isinstance(node, list):
        node[:] = [item for item in node if item is not _GONE]
        for item in node:
            _prune(item)


def problems_of(exc: ValidationError, model: type[BaseModel]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = _clean_loc(err["loc"])
        field = _join(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = _join(loc[:-1])
            known = _known_fields(model, list(err["loc"][:-1]))
            where = f" in {parent}" if parent else ""
            hint = f" (known fields: {', '.join(known)})" if known else ""
            message = f"{field} is not a known field{where}; remove it or check its spelling{hint}."
        elif kind == "missing":
            message = f"{field} is required; set it."
        elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
            message = _tag_message(field, err)
        elif kind == "literal_error":
            message = f"{field}: {err['msg'].replace('Input should be', 'set it to')}."
        else:
            message = field_message(field, err)
        key = (field, message)
        if key not in seen:
            seen.add(key)
            problems.append(Problem(field, message))
    return problems


# How pydantic names a callable discriminator in an error's context.
_STAGE_DISCRIMINATOR = f"{stage_tag.__name__}()"


def _tag_message(field: str, err: Any) -> str:
    """What a member of a tagged union (a pipeline's stage, a reward's term) lacks."""
    ctx = err.get("ctx") or {}
    if ctx.get("discriminator") == _STAGE_DISCRIMINATOR:
        if err["type"] == "union_tag_not_found":
            found = type(err.get("input")).__name__
            return (
                f"{field} is not a stage: write each stage as a mapping (name, type, ...), "
                f"not a {found}."
            )
        return f"{field}.type must be train or evaluate."
    return f"{field}.kind must be one of match, regex, length, rule, judge or http."


def field_message(field: str, err: Any) -> str:
    """The sentence for one value that did not validate: what it is and what to set instead.
    Shared by plans and request bodies (`server.errors`)."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "int_type":
        return f"{field} is {_shown(value)}; set a whole number."
    if kind == "float_type":
        return f"{field} is {_shown(value)}; set a number."
    if kind == "finite_number" or (kind in _BOUNDS and _not_finite(value)):
        # A bound compares false with .nan, so it can be what refuses one.
        return f"{field} is {_shown(value)}; set a finite number (not .nan or .inf)."
    if kind in _BOUNDS:
        word, key = _BOUNDS[kind]
        return f"{field} is {_shown(value)}; set it to {word} {_shown(ctx[key])}."
    if kind == "string_too_long":
        return (
            f"{field} is {len(value)} characters long; it holds at most "
            f"{ctx['max_length']}. Shorten it."
        )
    if kind == "too_long":
        noun = "entries" if isinstance(value, dict) else "items"
        return (
            f"{field} has {ctx.get('actual_length', len(value))} {noun}; it holds at most "
            f"{ctx['max_length']}."
        )
    if kind == "value_error":
        return f"{field}: {str(err['msg']).removeprefix('Value error, ')}."
    return f"{field}: {err['msg']}."


_BOUNDS = {
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
}


def _not_finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        return not math.isfinite(float(value))
    except (ValueError, OverflowError):
        return False


def _shown(value: Any) -> str:
    """A value as the user wrote it in YAML or JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return f"{value:g}"
    if isinstance(value, int):
        if value.bit_length() > 80:  # str() of a very long number raises past 4300 digits
            return f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
        return str(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


# The tags of the tagged unions: a reward's terms, an evaluation's metrics.
_TAGS = ("match", "regex", "length", "rule", "judge", "http", "loss", "pass@k")


def _clean_loc(loc: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for i, part in enumerate(loc):
        # Discriminated unions add the tag ('match', ...) after an item's position, and type
        # names, to the path.
        tag = part in _TAGS and i > 0 and isinstance(loc[i - 1], int)
        if isinstance(part, str) and (tag or "[" in part):
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
    """The fields of the model at `loc`, as pydantic names the path (with the tags of tagged
    unions in it: a term's ``regex`` picks the regex term's fields, not the union's first)."""
    current: Any = model
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            continue
        if annotation is not None:
            member = _member(annotation, str(part))
            if member is not None:
                current, annotation = member, None
                continue
        field = _field_by_alias(current, str(part))
        if field is None:
            return []
        annotation = field.annotation
        current = _model_of(annotation)
        if current is None:
            return []
    return [f.alias or name for name, f in current.model_fields.items()]


def _member(annotation: Any, tag: str) -> type[BaseModel] | None:
    """The member of a tagged union in `annotation` whose ``kind`` (or ``type``) is `tag`."""
    for model in _models_in(annotation):
        for key in ("kind", "type"):
            field = model.model_fields.get(key)
            if field is not None and tag in (getattr(field.annotation, "__args__", ()) or ()):
                return model
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _models_in(arg)
    return found


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
