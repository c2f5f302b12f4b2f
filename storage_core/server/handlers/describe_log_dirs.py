"""DescribeLogDirs (key 35): each log dir with the size of every partition it holds.

A null topic list means every partition; otherwise only the named topics and partitions.
Replicas are never moving between dirs here, so ``offset_lag`` is 0 and ``is_future_key``
false. v4+ adds the file system's ``total_bytes`` and ``usable_bytes``. A log dir that is
missing is KAFKA_STORAGE_ERROR with no topics.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from storage_core.common import TopicPartition
from storage_core.log.log_manager import LogManager
from storage_core.protocol.acl import AclOperation
from storage_core.protocol.messages import build
from storage_core.server.handlers.auth_helper import authorize_cluster
from storage_core.server.handlers.common import NO_THROTTLE
from storage_core.server.request_context import RequestContext

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    module = ctx.response_module
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return build(
            module.DescribeLogDirsResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    log_manager = ctx.services.log_manager
    wanted: set[TopicPartition] | None = None
    if request.topics is not None:
        wanted = {TopicPartition(t.topic, int(p)) for t in request.topics for p in t.partitions}
    results = await ctx.services.replica_manager.run_io(
        lambda: [_describe_dir(module, log_manager, d, wanted) for d in log_manager.log_dirs]
    )
    return build(
        module.DescribeLogDirsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=tuple(results),
    )


def _describe_dir(
    module: Any, log_manager: LogManager, log_dir: Path, wanted: set[TopicPartition] | None
) -> Any:
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        return build(
            module.DescribeLogDirsResult,
            error_code=ErrorCode.kafka_storage_error,
            log_dir=str(log_dir),
            topics=(),
            total_bytes=-1,
            usable_bytes=-1,
        )
    sizes: dict[str, dict[int, int]] = defaultdict(dict)
    for tp, log in log_manager.all_logs().items():
        if log.dir.parent != log_dir or (wanted is not None and tp not in wanted):
            continue
        sizes[tp.topic][tp.partition] = log.size_in_bytes
    topics = tuple(
        build(
            module.DescribeLogDirsTopic,
            name=topic,
            partitions=tuple(
                build(
                    module.DescribeLogDirsPartition,
                    partition_index=partition,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
                for partition, size in sorted(sizes[topic].items())
            ),
        )
        for topic in sorted(sizes)
    )
    return build(
        module.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=str(log_dir),
        topics=topics,
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
