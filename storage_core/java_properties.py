"""Java ``.properties`` text, as ``java.util.Properties`` reads and writes it: the syntax of
``server.properties`` and of each log dir's ``meta.properties``.

Reading: ``#``/``!`` comment lines, ``=`` or ``:`` separators (an escaped one belongs to the
key), a trailing ``\\`` continues the line, ``\\t``/``\\n``/``\\r``/``\\f`` escapes and any
other escaped character standing for itself. Writing escapes what reading would take for
syntax (``\\``, ``:``, ``=``, ``#``, ``!``).
"""

from __future__ import annotations

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text -> dict."""
    props: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip() if pending else raw_line.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if _continues(line):
            pending = line[:-1]
            continue
        index = 0
        while index < len(line) and line[index] not in "=:":
            index += 2 if line[index] == "\\" else 1
        key, value = line[:index], line[index + 1 :]
        props[_unescape(key.strip())] = _unescape(value.strip())
    return props


def escape_property(value: str) -> str:
    """``value`` as it is written in a ``.properties`` file."""
    return "".join("\\" + char if char in "\\:=#!" else char for char in value)


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(value: str) -> str:
    out = []
    chars = iter(value)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            out.append(_ESCAPES.get(escaped, escaped))
        else:
            out.append(char)
    return "".join(out)
