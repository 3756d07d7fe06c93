"""What a user types, checked: pydantic models that fail in one line naming the field (:class:`Checked`,
:func:`error_line`) and :class:`ConfigError`, the one-line error of a bad spec, plan or parameter."""

from __future__ import annotations

import re
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long")
# bounds with their words, shared by specs, loss options and notebook parameters: ``Annotated[int, COUNT]``
COUNT = Field(ge=1, description="an integer >= 1")
POSITIVE = Field(gt=0, description="a finite number > 0")
NON_NEGATIVE = Field(ge=0, description="a finite number >= 0")


def error_line(err: ValidationError, fields: dict[str, FieldInfo] | None = None) -> str:
    """pydantic's first error as one line naming the field: ``steps must be a valid integer, got 'x'``; a broken bound
    (``Field(ge=1, description="an integer >= 1")``) says the field's description; a rule a model states itself (a
    ``ValueError`` in a validator) keeps its own words; an unknown field lists ``fields``."""
    e, fields = err.errors(include_url=False)[0], fields or {}
    field = str(e["loc"][0]) if e["loc"] else "value"  # later parts name a member of a union or an index
    if e["type"] == "value_error":
        return str(e["ctx"]["error"])
    if e["type"] == "extra_forbidden":
        return f"{field} is not a known field; known: {sorted(fields)}"
    if e["type"] == "missing":
        return f"field '{field}' is missing"
    if e["type"] in BOUNDS and getattr(fields.get(field), "description", None):
        return f"{field} must be {fields[field].description}, got {e['input']!r:.80}"
    want = re.sub(r"^(Input|String|Value|Dictionary|List|Tuple) should (be )?", "", e["msg"])
    return f"{field} must {'' if want.startswith('have') else 'be '}{want}, got {e['input']!r:.80}"


class Checked(BaseModel):
    """A pydantic model whose bad input is a ``ValueError`` of one line naming the field (:func:`error_line`):
    strict types (no bool for a number, no ``"no"`` for a bool), no unknown field, finite floats."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, str_min_length=1)

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as e:
            raise ValueError(error_line(e, type(self).model_fields)) from None

    def replace(self, **fields: Any) -> Self:
        """A copy with ``fields`` changed, validated (as ``dataclasses.replace``: every other field stays, a default
        derived when the original was made too)."""
        return type(self)(**{**self.model_dump(), **fields})


class ConfigError(ValueError):
    """Bad input to a command line (train, batch, plan): one line naming the file and the field (exit code 2); in a
    notebook IPython shows that line (``_render_traceback_``), not a traceback through the library."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]
