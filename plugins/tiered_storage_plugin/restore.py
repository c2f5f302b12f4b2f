"""Topic restore requests from the ``restore_topic`` DAG's params.

Params (validated by their JSON schemas when the run is created, by the plugin's trigger
guard before a run exists, then here by the first task)::

    topic            the topic to restore, as the bucket names it (required)
    topic_id         null, or the incarnation to restore (a Kafka topic id: 22 characters of
                     URL-safe base64), when the bucket holds several of the name
    target           null (the source's name), or the topic to create
    partitions       null or [] (every partition) or partition numbers (ints >= 0)
    restore_offsets  commit the groups' offsets from the newest backup (default true)
    allow_gaps       restore a partition with a gap from above the gap (default false)
    dry_run          print the plan only (default true)

Whether the bucket holds the topic and whether the target exists are the job's checks
(``jobs.restore_topic`` reads the bucket and asks the cluster).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiered_storage_plugin.deletion import PARTITIONS_MAX, TOPIC_NAME_MAX, TOPIC_PATTERN

TOPIC_ID_PATTERN = r"^[A-Za-z0-9_-]{22}$"
"""Kafka's ``Uuid.toString``: 16 bytes in URL-safe base64 without padding."""
_TOPIC = re.compile(TOPIC_PATTERN)
_TOPIC_ID = re.compile(TOPIC_ID_PATTERN)
_RESERVED_TOPIC_IDS = frozenset({"AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"})
"""Kafka's ZERO_UUID and METADATA_TOPIC_ID: never a topic's id."""
_FLAG_DEFAULTS = {"restore_offsets": True, "allow_gaps": False, "dry_run": True}
"""The DAG's defaults (the trigger guard sees the conf before they are merged in)."""


class RestoreRequestError(ValueError):
    """The restore request is invalid (the message names the param); nothing was restored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreRequest:
    topic: str
    topic_id: str | None
    target: str  # the source's name unless another is given
    partitions: tuple[int, ...] | None  # None: every partition of the topic
    restore_offsets: bool
    allow_gaps: bool
    dry_run: bool

    def job_arguments(self) -> list[str]:
        """``jobs.restore_topic``'s options (``--dry-run`` is the operator's)."""
        args = ["--topic", self.topic, "--target", self.target]
        if self.topic_id is not None:
            args += ["--topic-id", self.topic_id]
        if self.partitions:
            args += ["--partitions", ",".join(str(p) for p in self.partitions)]
        if self.restore_offsets:
            args.append("--restore-offsets")
        if self.allow_gaps:
            args.append("--allow-gaps")
        return args


def parse_restore_request(params: Mapping[str, Any]) -> RestoreRequest:
    """The request the params describe; ``RestoreRequestError`` names the param to fix."""
    topic = params.get("topic")
    if topic in (None, ""):
        raise RestoreRequestError("topic is required: the topic to restore from the bucket")
    topic = _topic_name("topic", topic)
    target = params.get("target")
    target = topic if target in (None, "") else _topic_name("target", target)
    topic_id = params.get("topic_id")
    if topic_id == "":
        topic_id = None
    if topic_id is not None and not _is_topic_id(topic_id):
        raise RestoreRequestError(
            f"topic_id {topic_id!r} is not a Kafka topic id (22 characters of URL-safe base64,"
            " as the bucket's topic manifests and restore_topic's refusal list them)"
        )
    flags = {name: params.get(name, default) for name, default in _FLAG_DEFAULTS.items()}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise RestoreRequestError(f"{name} must be true or false, got {value!r}")
    return RestoreRequest(
        topic=topic,
        topic_id=topic_id,
        target=target,
        partitions=_partitions(params.get("partitions")),
        restore_offsets=flags["restore_offsets"],
        allow_gaps=flags["allow_gaps"],
        dry_run=flags["dry_run"],
    )


def _topic_name(param: str, name: object) -> str:
    if not isinstance(name, str) or not _TOPIC.match(name) or name in (".", ".."):
        raise RestoreRequestError(
            f"{param} {name!r} is not a Kafka topic name (1-{TOPIC_NAME_MAX} characters of"
            " letters, digits, '.', '_' and '-')"
        )
    if name.startswith("__"):
        raise RestoreRequestError(f"{param} {name!r} is internal: internal topics are not restored")
    return name


def _is_topic_id(text: object) -> bool:
    if not isinstance(text, str) or not _TOPIC_ID.match(text) or text in _RESERVED_TOPIC_IDS:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False


def _partitions(partitions: object) -> tuple[int, ...] | None:
    if partitions is None or partitions == []:
        return None
    if not isinstance(partitions, list | tuple) or len(partitions) > PARTITIONS_MAX:
        raise RestoreRequestError(
            f"partitions must be a list of at most {PARTITIONS_MAX} partition numbers,"
            f" got {partitions!r}"
        )
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in partitions):
        raise RestoreRequestError(f"partitions must be integers >= 0, got {list(partitions)!r}")
    if len(set(partitions)) != len(partitions):
        raise RestoreRequestError(f"partitions lists a partition twice: {list(partitions)}")
    return tuple(sorted(partitions))
