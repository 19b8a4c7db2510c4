"""What every body of the API shares.

Field names are snake_case in Python and camelCase in JSON (the keys the service has always
sent), and a response dumped with ``to_json()`` (``model_dump(mode="json", by_alias=True)``) is
the JSON the service sent for it. Keys the service leaves out when they have no value are
declared with `optional_key` and `flag_key`, so that a dump leaves them out as well.

Every model refuses keys it does not declare; the client reads answers with
``extra="allow"``, which keeps them instead (`ResponseBody` says why).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel


class ResponseBody(BaseModel):
    """An answer of the service.

    The model refuses keys it does not declare (``extra="forbid"``). The service builds its
    answers as these models (`server/services`) and FastAPI validates each again on its way
    out, so a key the service sends without declaring it here fails the service's own tests,
    and mypy follows every field from the service's rows to the client.

    The client reads leniently, on purpose: `read` (and `client.base.read_as`, which the client
    calls) validates with ``extra="allow"``, keeps a key this version does not know, and
    `to_json` dumps it back out, so ``-o json`` prints what the service sent. The CLI and the client
    install apart from the service (``pip install akka-training``) and are often a version
    behind or ahead of the trainer they call: refusing there would make every key a newer
    service adds a breaking change for its users. So client and service need not be the same
    version; what breaks a client is what always did, a key removed or retyped.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        # Validators are built on first use: the client imports every model, and a command
        # reads one or two of them.
        defer_build=True,
    )

    @classmethod
    def read(cls, data: object) -> Self:
        """An answer as the client reads it: keys this version does not know are kept."""
        return cls.model_validate(data, extra="allow")

    def to_json(self) -> dict[str, Any]:
        """The body as the service sent it: what ``-o json`` prints."""
        dumped: dict[str, Any] = _with_unknown(self, self.model_dump(mode="json", by_alias=True))
        return dumped


class RequestBody(BaseModel):
    """A body sent to the service. Unknown fields are refused by name, as plans are."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        # Built when defined, unlike answers: FastAPI reads a body through a TypeAdapter of
        # the model annotated with the parameter's alias (``body``), and silences pydantic's
        # warning that such an alias does nothing only while it builds that adapter. A
        # deferred model is built later, at the first request, and warns there. The client
        # imports a noun's request models after it has turned pydantic's plugins off
        # (`cli.state`), so building them costs a command about a millisecond each.
        defer_build=False,
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# ISO 8601 as the service writes it (`datetime.isoformat()`): a timestamp read and dumped again
# is the same text, with or without a zone and microseconds.
Timestamp = Annotated[
    datetime,
    PlainSerializer(datetime.isoformat, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def optional_key(description: str | None = None) -> Any:
    """A key the service sends only when it has a value: None in Python, absent in JSON."""
    return Field(None, exclude_if=_is_none, description=description)


def flag_key(description: str | None = None) -> Any:
    """A flag the service sends only when it is true: False in Python, absent in JSON."""
    return Field(False, exclude_if=_is_false, description=description)


def _is_none(value: object) -> bool:
    return value is None


def _is_false(value: object) -> bool:
    return value is False


def _with_unknown(value: object, dumped: Any) -> Any:
    """`dumped` (the dump of `value`) with the keys `value` and the models inside it kept
    beyond their fields: a dump leaves them out."""
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        for name, field in type(value).model_fields.items():
            key = field.serialization_alias or field.alias or name
            if key in dumped:
                dumped[key] = _with_unknown(getattr(value, name), dumped[key])
        dumped.update(value.model_extra or {})
    elif isinstance(value, list | tuple) and isinstance(dumped, list):
        dumped[:] = [_with_unknown(v, d) for v, d in zip(value, dumped, strict=True)]
    elif isinstance(value, dict) and isinstance(dumped, dict):
        for key, item in value.items():
            if key in dumped:
                dumped[key] = _with_unknown(item, dumped[key])
    return dumped
