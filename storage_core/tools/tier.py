"""``storage-core tier``: run the tiering operations now, from outside the broker.

    storage-core tier --bootstrap-server HOST:PORT --log-dir DIR [--topic T] [--dry-run]
        [--broker-config server.properties] [--broker-id N]
        [--remote-storage-manager LocalTieredStorage|S3RemoteStorageManager]
        [--rsm-config KEY=VALUE ...] [--expire] [--delete-partitions] [--rewrite]
        [--progress] [--run-timeout-s S]

Modes (the default is copy; ``--expire``, ``--delete-partitions`` and ``--rewrite`` may be
combined):

- **copy**: for every partition directory of the log dir whose topic has
  ``remote.storage.enable=true`` (read through DescribeConfigs) and whose leader is this
  broker (Metadata), copy the segments ``candidate_segments`` finds eligible, oldest first,
  fenced by the leader epoch Metadata reported when planning.
- **expire** (``--expire``): remote retention, ``plan_expiry`` + ``delete_expired_segments``
  for the same partitions. The broker moves the log start offset once it sees the
  DELETE_SEGMENT_STARTED events.
- **delete partitions** (``--delete-partitions``): ``delete_partition`` for every partition
  whose latest deletion event on ``__remote_log_metadata`` is DELETE_PARTITION_MARKED or
  DELETE_PARTITION_STARTED by this broker (the partition's leader when its topic was
  deleted marks it; the log dir is not needed: a deleted topic has no directory). Once no
  partition of a topic it finished is left marked or started, by any broker, the topic's
  manifest goes too.
- **rewrite** (``--rewrite``): for the same partitions as copy, every COPY_SEGMENT_FINISHED
  segment whose stored format is not the configured one (the plain format, another chunk
  size, compression or encryption switched, or a data key wrapped by a key pair that is no
  longer the active one: key rotation) is copied anew from its own remote bytes under a new
  segment id, then the old copy is deleted: copy-then-swap with the metadata events, readers
  served throughout (``storage_core.tiered.operations.rewrite``). Run it again after an
  interruption: it converges.

The broker id is ``--broker-id``, else ``--broker-config``'s, else the only broker of the
cluster. The remote storage manager is ``--remote-storage-manager`` (default: the broker
config's ``remote.log.storage.manager.class.name``) built from the broker config's
``rsm.config.*`` settings, overridden by ``--rsm-config`` (prefix optional).

Views of the log dir use the log start offset and the high watermark the leader reports
(ListOffsets -2 and -1, asked in that order, before the directory is read), not the
checkpoint files, which lag.

Output on stdout, one ``key=value`` line per partition and per mode, then a summary::

    partition=orders-0 action=copy status=ok segments=3 bytes=49152 offsets=0..29 seconds=0.21
    partition=orders-1 action=copy status=skipped reason="leader is broker 2"
    partition=orders-0 action=expire status=ok deleted=2 failed=0 bytes=32768 log_start_offset=20
    partition=orders-0 action=delete-partition status=ok topic_id=... segments=5 finished=true
    partition=orders-0 action=rewrite status=ok segments=3 bytes=49152 deleted=3 offsets=0..29
    summary action=copy partitions=2 segments=3 bytes=49152 errors=0 seconds=0.35

``--run-timeout-s`` (default 600) bounds the whole run: a store that hangs (each request runs
into its timeouts and retries, then the rollback does too) cannot keep the command for
minutes per partition. Past the bound the command prints an error naming the store and the
bound and exits 1 at once. Whatever it was doing is left as the crash of a copy would leave
it: a COPY_SEGMENT_STARTED attempt (rolled back by ``jobs.reconcile`` after its copy
deadline) or a DELETE_SEGMENT_STARTED one (retried by expiry or reconcile); nothing is
committed half-way (FINISHED is published only after every object is written and checked).

``--dry-run`` prints ``plan ...`` lines (one per segment) and ``status=planned`` instead,
and changes nothing. A progress bar goes to stderr when it is a terminal (or with
``--progress``). Exit code 0, or 1 when a partition failed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from storage_core.client.cluster import KafkaCluster
from storage_core.client.connection import ConnectionConfig
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.errors import StorageError
from storage_core.server.kafka_config import KafkaConfig
from storage_core.tiered.operations import resolve_broker_id
from storage_core.tools.key_values import rsm_settings
from storage_core.tools.tier_context import Summary, TierContext, find_targets, log_dirs_of
from storage_core.tools.tier_modes import (
    copy_partitions,
    delete_partitions,
    expire_partitions,
    rewrite_partitions,
)

RUN_TIMEOUT_S_DEFAULT = 600.0
RUN_TIMEOUT_S_MAX = 24 * 3600.0


class TierRunTimeoutError(StorageError):
    """The run passed ``--run-timeout-s``; the process must exit now (its worker may be stuck
    in a store call that cannot be interrupted)."""

    error_code = "request_timed_out"


# ---------------------------------------------------------------------------- main
def run_tier(
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    log_dir: Path | None,
    topic: str | None,
    dry_run: bool,
    expire: bool,
    delete_partitions_marked: bool,
    broker_config_path: Path | None,
    broker_id: int | None,
    remote_storage_manager: str | None,
    rsm_config: Sequence[str],
    progress: bool | None,
    out: TextIO,
    err: TextIO,
    clock: Clock = SYSTEM_CLOCK,
    run_timeout_s: float = RUN_TIMEOUT_S_DEFAULT,
    rewrite: bool = False,
) -> int:
    """Run the modes asked for (copy when neither ``expire`` nor ``delete_partitions_marked``);
    returns 1 if any partition failed. Raises ``TierRunTimeoutError`` past ``run_timeout_s``
    (the run goes on in a daemon thread: the caller exits the process)."""
    if not 0 < run_timeout_s <= RUN_TIMEOUT_S_MAX:
        raise ValueError(
            f"--run-timeout-s must be in (0, {RUN_TIMEOUT_S_MAX:g}], got {run_timeout_s}"
        )
    outcome: list[int] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            outcome.append(
                _run_tier(
                    bootstrap_server=bootstrap_server,
                    connection_config=connection_config,
                    log_dir=log_dir,
                    topic=topic,
                    dry_run=dry_run,
                    expire=expire,
                    delete_partitions_marked=delete_partitions_marked,
                    rewrite=rewrite,
                    broker_config_path=broker_config_path,
                    broker_id=broker_id,
                    remote_storage_manager=remote_storage_manager,
                    rsm_config=rsm_config,
                    progress=progress,
                    out=out,
                    err=err,
                    clock=clock,
                )
            )
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=body, name="tier-run", daemon=True)
    worker.start()
    worker.join(run_timeout_s)
    if worker.is_alive():
        broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
        name, config = rsm_settings(broker_config, remote_storage_manager, rsm_config)
        store = {
            k: v
            for k, v in config.items()
            if k.endswith((".bucket.name", ".endpoint.url", ".storage.dir"))
        }
        raise TierRunTimeoutError(
            f"storage-core tier did not finish within --run-timeout-s={run_timeout_s:g}"
            f" (remote storage manager {name or 'LocalTieredStorage'} {store}): is the store"
            " answering? Segments left COPY_SEGMENT_STARTED are rolled back by"
            " `python -m jobs.reconcile` after the copy deadline; nothing was committed half-way"
        )
    if failure:
        raise failure[0]
    return outcome[0]


def _run_tier(
    *,
    bootstrap_server: str,
    connection_config: ConnectionConfig | None = None,
    log_dir: Path | None,
    topic: str | None,
    dry_run: bool,
    expire: bool,
    delete_partitions_marked: bool,
    rewrite: bool,
    broker_config_path: Path | None,
    broker_id: int | None,
    remote_storage_manager: str | None,
    rsm_config: Sequence[str],
    progress: bool | None,
    out: TextIO,
    err: TextIO,
    clock: Clock,
) -> int:
    broker_config = None if broker_config_path is None else KafkaConfig.load(broker_config_path)
    rsm_class_name, rsm_config_values = rsm_settings(
        broker_config, remote_storage_manager, rsm_config
    )
    copy = not expire and not delete_partitions_marked and not rewrite
    with KafkaCluster(bootstrap_server, config=connection_config) as cluster:
        ctx = TierContext(
            cluster=cluster,
            bootstrap_server=bootstrap_server,
            broker_id=resolve_broker_id(broker_id, broker_config, cluster.refresh_metadata([])),
            rsm_class_name=rsm_class_name,
            rsm_config=rsm_config_values,
            out=out,
            err=err,
            dry_run=dry_run,
            progress=not dry_run and (progress if progress is not None else err.isatty()),
            clock=clock,
        )
        summaries: list[Summary] = []
        try:
            if copy or expire or rewrite:
                dirs = log_dirs_of(log_dir, broker_config)
                action = "copy" if copy else "expire" if expire else "rewrite"
                targets = find_targets(
                    cluster, dirs, topic=topic, broker_id=ctx.broker_id, out=out, action=action
                )
                if copy:
                    summaries.append(copy_partitions(ctx, targets))
                if expire:
                    summaries.append(expire_partitions(ctx, targets))
                if rewrite:
                    summaries.append(rewrite_partitions(ctx, targets))
            if delete_partitions_marked:
                summaries.append(delete_partitions(ctx, topic))
        finally:
            ctx.close()
    for summary in summaries:
        print(summary.line(), file=out, flush=True)
    return 1 if any(s.errors for s in summaries) else 0
