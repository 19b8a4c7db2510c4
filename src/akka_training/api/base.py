"""What every body of the API shares.

Field names are snake_case in Python and camelCase in JSON (the keys the service has always
sent), and a response dumped with ``to_json()`` (``model_dump(mode="json", by_alias=True)``) is
the JSON the service sent for it. Keys the service leaves out when they have no value are
declared with `optional_key` and `flag_key`, so that a dump leaves them out as well.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel


class ResponseBody(BaseModel):
    """An answer of the service. Fields this client does not know are kept, not refused (a
    newer service may send more), and come back out of `to_json`."""

    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        # Validators are built on first use: the client imports every model, and a command
        # reads one or two of them.
        defer_build=True,
    )

    def to_json(self) -> dict[str, Any]:
        """The body as the service sent it: what ``-o json`` prints."""
        return self.model_dump(mode="json", by_alias=True)


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
