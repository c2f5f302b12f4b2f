"""Kafka's ``org.apache.kafka.common.utils.Sanitizer``: a user or client id made safe as a
ZooKeeper node name (``/config/users/<sanitized>``).

    sanitize(name)   = URL-encode (UTF-8, form encoding) with "*" -> "%2A" and "+" -> "%20"
                       ("alice" -> "alice", "user@x y" -> "user%40x%20y")
    desanitize(text) = URL-decode
"""

from __future__ import annotations

import string
from urllib.parse import unquote

_KEPT = frozenset(string.ascii_letters + string.digits + "._-")


def sanitize(name: str) -> str:
    """The znode name of a user (Java's ``URLEncoder.encode`` then ``*``/``+`` replaced)."""
    # URLEncoder keeps letters, digits and ".-*_" and writes a space as "+"; Kafka then turns
    # "*" into "%2A" and "+" into "%20": every other byte is %XX (upper-case), "~" included.
    return "".join(
        chr(b) if b < 0x80 and chr(b) in _KEPT else f"%{b:02X}" for b in name.encode("utf-8")
    )


def desanitize(text: str) -> str:
    return unquote(text, encoding="utf-8")
