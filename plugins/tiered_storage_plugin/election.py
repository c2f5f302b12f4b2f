"""Preferred leader election requests from the ``preferred_leader_election`` DAG's params.

Params (validated by their JSON schemas when the run is created, by the plugin's trigger
guard before a run exists, then here by the first task)::

    topic       a Kafka topic name (required)
    partitions  null or [] (every partition of the topic) or partition numbers (ints >= 0)

Whether the topic and its partitions exist is the job's check (it asks the cluster).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN

_TOPIC = re.compile(TOPIC_PATTERN)


class ElectionRequestError(ValueError):
    """The election request is invalid (the message names the param); nothing was elected."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionRequest:
    topic: str
    partitions: tuple[int, ...] | None  # None: every partition of the topic

    def job_arguments(self) -> list[str]:
        args = ["--topic", self.topic]
        for partition in self.partitions or ():
            args += ["--partition", str(partition)]
        return args


def parse_election_request(params: Mapping[str, Any]) -> ElectionRequest:
    """The request the params describe; ``ElectionRequestError`` names what to fix."""
    topic = params.get("topic")
    if topic in (None, ""):
        raise ElectionRequestError("topic is required: the topic whose preferred leaders to elect")
    if not isinstance(topic, str) or not _TOPIC.match(topic) or topic in (".", ".."):
        raise ElectionRequestError(
            f"topic {topic!r} is not a Kafka topic name (1-{TOPIC_NAME_MAX} characters of"
            " letters, digits, '.', '_' and '-')"
        )
    partitions = params.get("partitions")
    if partitions is None or partitions == []:
        return ElectionRequest(topic=topic, partitions=None)
    if not isinstance(partitions, list | tuple) or len(partitions) > PARTITIONS_MAX:
        raise ElectionRequestError(
            f"partitions must be a list of at most {PARTITIONS_MAX} partition numbers,"
            f" got {partitions!r}"
        )
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in partitions):
        raise ElectionRequestError(f"partitions must be integers >= 0, got {list(partitions)!r}")
    if len(set(partitions)) != len(partitions):
        raise ElectionRequestError(f"partitions lists a partition twice: {list(partitions)}")
    return ElectionRequest(topic=topic, partitions=tuple(sorted(partitions)))
