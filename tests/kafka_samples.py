"""Well-formed Kafka messages of any schema, for tests that need one of every API and version.

Every field is set (tagged fields too, so they are written), arrays have two items; with
``nulls`` every nullable field that can be null is.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

SAMPLES: dict[str, Any] = {
    "bool": True,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 3,
    "uint32": 3,
    "int64": 4,
    "uint64": 4,
    "float64": 0.5,
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=5),
    "timedelta_i64": datetime.timedelta(milliseconds=6),
    "datetime_i64": datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC),
    "uuid": uuid.UUID(int=7),
    "string": "name",
    "bytes": b"\x00\x01\x02",
    "records": b"records",
}


def sample_message(schema: Any, *, nulls: bool, text: str = "name") -> Any:
    """A message of ``schema`` (see the module docstring); every string is ``text``."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(schema):
        kind = classify_field(field)
        nullable = is_optional(field) and get_field_tag(field) is None
        if nulls and nullable:
            values[field.name] = None
        elif isinstance(kind, EntityField):
            values[field.name] = sample_message(kind.type_, nulls=nulls, text=text)
        elif isinstance(kind, EntityTupleField):
            values[field.name] = tuple(
                sample_message(kind.type_, nulls=nulls, text=text) for _ in range(2)
            )
        elif isinstance(kind, PrimitiveTupleField):
            values[field.name] = (SAMPLES[get_schema_field_type(field)],) * 2
        elif get_schema_field_type(field) == "string":
            values[field.name] = text
        else:
            values[field.name] = SAMPLES[get_schema_field_type(field)]
    return schema(**values)
