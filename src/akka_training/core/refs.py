"""Dataset and bundle references: ``PROJECT/NAME``, ``PROJECT/NAME:vN``, ``PROJECT/NAME:ALIAS``,
``PROJECT/NAME@sha256:HEX`` and, inside a pipeline, ``@STAGE``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from akka_training.core.limits import INT32_MAX

_NAME = r"[a-z0-9][a-z0-9._-]{0,62}"
NAME_RE = re.compile(rf"^{_NAME}$")
_REF_RE = re.compile(
    rf"^(?P<project>{_NAME})/(?P<name>{_NAME})"
    r"(?:(?::(?P<tag>[A-Za-z0-9._-]+))|(?:@sha256:(?P<digest>[0-9a-f]{6,64})))?$"
)
_STAGE_RE = re.compile(rf"^@(?P<stage>{_NAME})$")


@dataclass(frozen=True)
class Ref:
    """A parsed reference. `version` is set for ``:vN``, `alias` for ``:ALIAS``, `digest` for a
    (possibly shortened) sha256; none of them means the name's current version."""

    project: str
    name: str
    version: int | None = None
    alias: str | None = None
    digest: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.project}/{self.name}"

    def __str__(self) -> str:
        if self.version is not None:
            return f"{self.full_name}:v{self.version}"
        if self.alias:
            return f"{self.full_name}:{self.alias}"
        if self.digest:
            return f"{self.full_name}@sha256:{self.digest}"
        return self.full_name


class BadReference(ValueError):
    pass


def parse_ref(text: str) -> Ref:
    m = _REF_RE.match(text.strip())
    if not m:
        raise BadReference(
            f"{text!r} is not a reference; write PROJECT/NAME, PROJECT/NAME:vN, "
            "PROJECT/NAME:ALIAS or PROJECT/NAME@sha256:HASH (lower-case letters, digits, '.', "
            "'_' and '-')"
        )
    tag = m.group("tag")
    version = None
    alias = None
    if tag:
        if re.fullmatch(r"v[0-9]+", tag):
            # Versions are stored in an INTEGER column; a longer number names none.
            if len(tag) > 11 or int(tag[1:]) > INT32_MAX:
                raise BadReference(
                    f"{text[:80]!r} names a version past the largest there can be "
                    f"({INT32_MAX}); check the version number"
                )
            version = int(tag[1:])
        else:
            alias = tag
    return Ref(m.group("project"), m.group("name"), version, alias, m.group("digest"))


def stage_of(text: str) -> str | None:
    """The stage name of an ``@STAGE`` reference, else None."""
    m = _STAGE_RE.match(text.strip())
    return m.group("stage") if m else None


def valid_name(text: str) -> bool:
    return bool(NAME_RE.match(text))
