"""Request and response messages of any API version (Kafka's generated ``common.message``
classes, here ``kio``'s, generated from Kafka's own JSON schemas), and ``build``: one call makes
a message of any version from the superset of its fields' values. The broker builds its
responses and the client its requests through it.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.static.constants import EntityType

API_VERSIONS_KEY = 18
"""ApiVersions: its response header stays v0 in every version, flexible ones included (KIP-511),
so that a client that does not know the broker's versions can read the answer."""


@cache
def request_schema(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@cache
def response_schema(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


@cache
def request_module(api_key: int, api_version: int) -> ModuleType:
    """The module of a request version: its message class and the classes of its parts."""
    return load_payload_module(api_key, api_version, EntityType.request)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def _field_names(schema: Any) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(schema))


def build(schema: Any, **values: Any) -> Any:
    """Build a message of any version from the superset of its fields' values.

    Fields that the version does not have are dropped, so one handler serves every version;
    fields that it has but that are not given keep their schema defaults.
    """
    names = _field_names(schema)
    return schema(**{k: v for k, v in values.items() if k in names})
