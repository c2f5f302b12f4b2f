"""An independent, strict reader of Prometheus' text exposition format 0.0.4 for tests."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            out.append({"\\": "\\", '"': '"', "n": "\n"}[value[i + 1]])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def parse_exposition(
    text: str,
) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """Text format 0.0.4 -> ({family: type}, {(name, labels): value}); strict on layout:
    one TYPE per family, before its samples, and a family's samples are contiguous."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    current = None
    finished: set[str] = set()
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            assert family not in types, f"second TYPE line for {family}"
            assert kind in ("counter", "gauge", "untyped")
            if current is not None:
                finished.add(current)
            types[family], current = kind, family
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, label_text, value_text = match.groups()
        assert name == current and name not in finished, f"{name} is not contiguous"
        labels: list[tuple[str, str]] = []
        rest = label_text or ""
        while rest:
            label = _LABEL.match(rest)
            assert label, f"bad labels in {line!r}"
            labels.append((label.group(1), _unescape(label.group(2))))
            rest = rest[label.end() :]
        key = (name, frozenset(labels))
        assert key not in samples, f"duplicate series {key}"
        samples[key] = float(value_text)
    return types, samples
