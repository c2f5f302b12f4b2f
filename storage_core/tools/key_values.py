"""``KEY=VALUE`` command-line options (``--override``, ``--config``, ``--set``, ``--property``,
``--rsm-config``) parsed one way: split at the first ``=``, whitespace around key and value
dropped, the value may be empty or hold further ``=``; a later item wins over an earlier one.

Output lines of the tools and jobs go the other way (``format_fields``): ``k=v`` pairs in
order, a value with a space, a quote or ``=`` double-quoted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from storage_core.tiered.remote_storage_manager import RSM_CONFIG_PREFIX

if TYPE_CHECKING:
    from storage_core.server.kafka_config import KafkaConfig

RSM_CLASS_CONFIG = "remote.log.storage.manager.class.name"


def parse_key_values(items: Sequence[str], *, option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; ``ValueError`` naming the option for a malformed item."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    return values


def format_fields(fields: Mapping[str, object]) -> str:
    """``k=v k="v with spaces"`` in the given order."""
    parts = []
    for key, value in fields.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if not text or any(c in text for c in ' "='):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


def rsm_settings(
    broker_config: KafkaConfig | None, class_name: str | None, rsm_config: Sequence[str]
) -> tuple[str, dict[str, str]]:
    """The RSM class name and its ``rsm.config.*`` settings: the broker config's, then the
    command line's (``k=v`` or ``rsm.config.k=v``) on top."""
    props: Mapping[str, str] = broker_config.props if broker_config is not None else {}
    name = class_name if class_name is not None else props.get(RSM_CLASS_CONFIG, "")
    config = {k: v for k, v in props.items() if k.startswith(RSM_CONFIG_PREFIX)}
    for key, value in parse_key_values(rsm_config, option="--rsm-config").items():
        config[key if key.startswith(RSM_CONFIG_PREFIX) else RSM_CONFIG_PREFIX + key] = value
    return name, config
