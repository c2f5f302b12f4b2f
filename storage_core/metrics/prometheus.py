"""The registry in Prometheus' text exposition format 0.0.4, named as the JMX exporter names
Kafka's metrics (with the usual ``lowercaseOutputName`` rules).

Format (one family after the other, families sorted by name, series by labels)::

    # HELP kafka_server_brokertopicmetrics_messagesinpersec_count kafka.server:type=...
    # TYPE kafka_server_brokertopicmetrics_messagesinpersec_count counter
    kafka_server_brokertopicmetrics_messagesinpersec_count 12
    kafka_server_brokertopicmetrics_messagesinpersec_count{topic="t"} 12

Name: ``<group>_<type>_<name>_<attribute>`` in lower case, dots and any character outside
``[a-zA-Z0-9_:]`` turned into ``_``. A meter gives five families: ``_count`` (counter),
``_meanrate``, ``_oneminuterate``, ``_fiveminuterate``, ``_fifteenminuterate`` (gauges,
events per second); a gauge gives ``_value``. Tags become labels in their order; label
values escape ``\\``, ``"`` and newlines. Values: integers as integers, floats with
``repr``, ``NaN``, ``+Inf``, ``-Inf``. Lines end with ``\\n``.
"""

from __future__ import annotations

import logging
import math
import re

from storage_core.metrics.registry import Gauge, KafkaMetricsRegistry, Meter, MetricName

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_:]")
_METER_ATTRIBUTES = ("count", "meanrate", "oneminuterate", "fiveminuterate", "fifteenminuterate")
_ATTRIBUTE_DISPLAY = {
    "count": "Count",
    "meanrate": "MeanRate",
    "oneminuterate": "OneMinuteRate",
    "fiveminuterate": "FiveMinuteRate",
    "fifteenminuterate": "FifteenMinuteRate",
    "value": "Value",
}

_Series = tuple[str, float | int]  # (rendered labels, value)


def family_name(name: MetricName, attribute: str) -> str:
    raw = f"{name.group}_{name.type}_{name.name}_{attribute}".lower()
    cleaned = _INVALID_NAME_CHARS.sub("_", raw)
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _labels(name: MetricName) -> str:
    if not name.tags:
        return ""
    inner = ",".join(f'{key}="{escape_label_value(value)}"' for key, value in name.tags)
    return "{" + inner + "}"


def render(registry: KafkaMetricsRegistry) -> str:
    """Every series of ``registry`` as Prometheus text; a failing gauge is left out (logged)."""
    families: dict[str, tuple[str, str, list[_Series]]] = {}  # name -> (type, help, series)

    def add(name: MetricName, attribute: str, kind: str, value: float | int) -> None:
        family = family_name(name, attribute)
        entry = families.get(family)
        if entry is None:
            untagged = MetricName(group=name.group, type=name.type, name=name.name)
            help_text = f"{untagged.mbean_name()} {_ATTRIBUTE_DISPLAY[attribute]}"
            entry = families[family] = (kind, help_text, [])
        entry[2].append((_labels(name), value))

    for name, metric in registry.metrics():
        if isinstance(metric, Meter):
            values = metric.snapshot()
            for attribute, value in zip(_METER_ATTRIBUTES, values, strict=True):
                add(name, attribute, "counter" if attribute == "count" else "gauge", value)
        elif isinstance(metric, Gauge):
            try:
                sampled = metric.value()
            except Exception as error:  # one broken gauge must not stop a scrape
                logger.warning("gauge failed metric=%s error=%r", name.mbean_name(), error)
                continue
            add(name, "value", "gauge", sampled)

    lines: list[str] = []
    for family in sorted(families):
        kind, help_text, series = families[family]
        lines.append(f"# HELP {family} {escape_help(help_text)}")
        lines.append(f"# TYPE {family} {kind}")
        for labels, value in sorted(series, key=lambda item: item[0]):
            lines.append(f"{family}{labels} {format_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""
