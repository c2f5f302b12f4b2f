"""Which partitions a job works on: ``storage-core tier``'s discovery, with the partitions
left out recorded in the run summary.

``discover_targets`` returns the partition directories of the log dirs whose topic has
``remote.storage.enable=true`` (DescribeConfigs) and whose leader is this broker
(Metadata, with the leader epoch to fence at). Each partition left out gets a
``partition=<tp> event=skipped reason=...`` line and a ``skipped`` summary entry.
"""

from __future__ import annotations

import io
import shlex
from collections.abc import Sequence
from pathlib import Path

from jobs.common.output import log_partition
from jobs.common.summary import RunSummary
from storage_core.client.cluster import KafkaCluster
from storage_core.tools.tier import PartitionTarget, find_targets


def discover_targets(
    cluster: KafkaCluster,
    log_dirs: Sequence[Path],
    *,
    topic: str | None,
    broker_id: int,
    job: str,
    summary: RunSummary,
) -> list[PartitionTarget]:
    skipped = io.StringIO()
    targets = find_targets(
        cluster, log_dirs, topic=topic, broker_id=broker_id, out=skipped, action=job
    )
    for line in skipped.getvalue().splitlines():
        fields = dict(item.partition("=")[::2] for item in shlex.split(line))
        partition = fields.get("partition", "?")
        reason = fields.get("reason", "")
        log_partition("skipped", partition, job=job, reason=reason)
        summary.partition(partition, "skipped", reason=reason)
        summary.count("partitions_skipped")
    return targets
