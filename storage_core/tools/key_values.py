"""``KEY=VALUE`` command-line options (``--override``, ``--config``, ``--set``, ``--property``,
``--rsm-config``) parsed one way: split at the first ``=``, whitespace around key and value
dropped, the value may be empty or hold further ``=``; a later item wins over an earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence


def parse_key_values(items: Sequence[str], *, option: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; ``ValueError`` naming the option for a malformed item."""
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    return values
