"""The largest values the service accepts, and the field types that hold submissions to them.

Every number a plan or a request body carries ends up in a database column or in a job's
arguments, so each is refused at submission when it could not be stored: a Postgres ``INTEGER``
holds ``-2**31 .. 2**31-1``, a ``BIGINT`` ``-2**63 .. 2**63-1``, and a ``VARCHAR(n)`` column
``n`` characters. Whole numbers are strict (``true`` is not 1, ``8.0`` is not 8) and every
decimal is finite (no ``.nan``, no ``.inf``). Lists and texts have sizes too, so that one
submission cannot hold a service thread for long or fill its memory.

The numbers are in `core.limits`; docs/start-a-run.md (plans) and docs/python-client.md
(request bodies) list them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, Strict
from pydantic_core import PydanticCustomError

from akka_training.core.limits import (
    DESCRIPTION_CHARS,
    MODEL_NAME_CHARS,
    NAME_CHARS,
    REFERENCE_CHARS,
    URL_CHARS,
)

# A strict whole number. Each field gives its own bounds (``Field(ge=1, le=INT32_MAX)``): a bound
# here would override a tighter one on the field.
Int = Annotated[int, Strict()]


def _not_a_boolean(value: object) -> object:
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


# A finite decimal; a whole number is taken as one, true and false are not. Not strict: YAML 1.1
# reads `1e-4` (no dot) as the text "1e-4", which is meant as a number.
Number = Annotated[float, BeforeValidator(_not_a_boolean), Field(allow_inf_nan=False)]

Name = Annotated[str, Field(max_length=NAME_CHARS)]
ModelName = Annotated[str, Field(max_length=MODEL_NAME_CHARS)]
Reference = Annotated[str, Field(max_length=REFERENCE_CHARS)]
Description = Annotated[str, Field(max_length=DESCRIPTION_CHARS)]
Url = Annotated[str, Field(max_length=URL_CHARS)]
