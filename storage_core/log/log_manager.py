"""All partition logs of a broker across its log dirs (Kafka's ``LogManager``).

Each log dir holds::

    <topic>-<partition>/                     one directory per partition (see ``Log``)
    <topic>-<partition>.<id>-delete/         a partition being deleted (removed at startup)
    recovery-point-offset-checkpoint         per partition: offsets below are fsynced
    log-start-offset-checkpoint              per partition: the log start offset
    replication-offset-checkpoint            per partition: the high watermark
    .kafka_cleanshutdown                     present only between a clean shutdown and startup

A missing clean-shutdown marker at startup means a crash: every log is recovered from its
recovery point. A corrupt checkpoint is reported and treated as absent, which only makes
recovery do more work; it never loses data. A partition whose log cannot be loaded even by
recovery is taken offline alone (Kafka's offline replica): its directory is left as it is, its
checkpointed offsets are kept, requests for it fail with KAFKA_STORAGE_ERROR, and every other
partition is served. Running out of descriptors is not such a failure (the files are fine):
every segment file is opened through one ``OpenFileCache`` (``log.segment.open.files.max``
idle files of inactive segments at most), and a load that still finds no descriptor refuses
the start, naming the limit, rather than taking partitions offline.

Thread safety: the partition map is guarded by ``self._lock``; each ``Log`` guards itself.
Background tasks (retention, flush, checkpoints) run on one scheduler thread.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage_core.atomic_file import fsync_directory
from storage_core.clock import SYSTEM_CLOCK, Clock
from storage_core.common import TopicPartition, Uuid, validate_topic_name
from storage_core.errors import (
    CorruptCheckpointError,
    KafkaStorageError,
    LogDirNotFoundError,
    StorageError,
    TooManyOpenFilesError,
)
from storage_core.log import log_file_utils as files
from storage_core.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    write_atomically,
)
from storage_core.log.log import Log
from storage_core.log.log_config import LogConfig
from storage_core.log.log_offsets import OFFSET_CHANGES
from storage_core.records.open_file_cache import (
    DEFAULT_MAX_IDLE_FILES,
    OpenFileCache,
    is_out_of_descriptors,
)
from storage_core.scheduler import Scheduler

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = files.DELETE_DIR_SUFFIX
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
# Kept by the tiered-storage RemoteIndexCache in each log dir; not a partition.
REMOTE_INDEX_CACHE_DIR_NAME = "remote-log-index-cache"


@dataclass(frozen=True, slots=True, kw_only=True)
class OfflineLog:
    """A partition dir that could not be loaded: why, and its checkpointed offsets (kept)."""

    dir: Path
    reason: str
    recovery_point: int
    log_start_offset: int
    high_watermark: int


class LogManager:
    """Creates, loads, checkpoints, retains and closes the logs of one broker."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        default_config: LogConfig,
        *,
        topic_configs: Callable[[str], Mapping[str, str]] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        retention_check_interval_ms: int = 300_000,
        flush_check_interval_ms: int = 60_000,
        flush_recovery_point_interval_ms: int = 60_000,
        flush_start_offset_interval_ms: int = 60_000,
        producer_id_expiration_ms: int = 86_400_000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        high_watermark_checkpoint_interval_ms: int = 5_000,
        segment_open_files_max: int = DEFAULT_MAX_IDLE_FILES,
    ) -> None:
        if not log_dirs:
            raise LogDirNotFoundError("at least one log dir is required (log.dirs)")
        self.log_dirs = [Path(d).resolve() for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise LogDirNotFoundError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self._topic_configs = topic_configs or (lambda _topic: {})
        self._clock = clock
        self._intervals_ms = {
            "retention": retention_check_interval_ms,
            "flush": flush_check_interval_ms,
            "recovery-point-checkpoint": flush_recovery_point_interval_ms,
            "log-start-offset-checkpoint": flush_start_offset_interval_ms,
            "producer-expiration": producer_id_expiration_check_interval_ms,
            "high-watermark-checkpoint": high_watermark_checkpoint_interval_ms,
        }
        self._producer_id_expiration_ms = producer_id_expiration_ms
        # Broker-wide: descriptors follow the segments in use, not the segments on disk.
        self.file_cache = OpenFileCache(segment_open_files_max)
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._offline: dict[TopicPartition, OfflineLog] = {}
        self._scheduler = Scheduler("log-manager-scheduler")
        self._started = False
        self._background_tasks = False  # logs created before startup write their metadata
        # partitions whose log a thread is creating: set when done, and the log dir chosen
        self._creating: dict[TopicPartition, tuple[threading.Event, Path]] = {}
        # (log dir, checkpoint file) -> the offsets last written there
        self._checkpointed: dict[tuple[Path, str], dict[TopicPartition, int]] = {}
        # Logs removed so far, and each checkpoint's last look (_checkpoint_if_changed).
        self._removed_logs = 0
        self._checkpoints_seen: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------ startup / shutdown
    def startup(self, *, background_tasks: bool = True) -> None:
        """Load every log (recovering after a crash), then start the background tasks."""
        with self._lock:
            for log_dir in self.log_dirs:
                self._load_log_dir(log_dir)
            self._started = True
        self._background_tasks = background_tasks
        if background_tasks:
            self._scheduler.startup()
            actions: dict[str, Callable[[], object]] = {
                "retention": self.cleanup_logs,
                "flush": self.flush_dirty_logs,
                "recovery-point-checkpoint": self.checkpoint_recovery_points,
                "log-start-offset-checkpoint": self.checkpoint_log_start_offsets,
                "producer-expiration": self.remove_expired_producers,
                # Kafka's ReplicaManager task: a restarted follower or leader resumes from a
                # recent HW rather than from its log start
                "high-watermark-checkpoint": self.checkpoint_high_watermarks,
            }
            for name, action in actions.items():
                interval = self._intervals_ms[name]
                self._scheduler.schedule(name, action, delay_ms=interval, period_ms=interval)

    def shutdown(self) -> None:
        """Flush everything, write checkpoints, close logs and leave clean-shutdown markers."""
        self._scheduler.shutdown()
        with self._lock:
            if not self._started:
                # log dirs never loaded (a start refused before) are left as they were: empty
                # checkpoints would lose their offsets, a marker would skip a needed recovery
                for log in self._logs.values():
                    log.close()
                self._logs.clear()
                self._offline.clear()
                logger.info("log manager stopped before it loaded dirs=%s", self.log_dirs)
                return
            for log in self._logs.values():
                log.flush()
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks()
            for log in self._logs.values():
                log.close()
            for log_dir in self.log_dirs:
                marker = log_dir / files.CLEAN_SHUTDOWN_FILE
                write_atomically(marker, "")
            self._logs.clear()
            self._offline.clear()
            self._started = False
        logger.info("log manager shut down cleanly dirs=%s", [str(d) for d in self.log_dirs])

    def _load_log_dir(self, log_dir: Path) -> None:
        if log_dir.exists() and not log_dir.is_dir():
            raise LogDirNotFoundError(f"log dir {log_dir} exists but is not a directory")
        log_dir.mkdir(parents=True, exist_ok=True)
        marker = log_dir / files.CLEAN_SHUTDOWN_FILE
        had_clean_shutdown = marker.exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        if recovery_points is None:
            had_clean_shutdown = False  # recover everything rather than trust nothing
            recovery_points = {}
        log_start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) or {}
        high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT) or {}
        for entry in sorted(log_dir.iterdir()):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                logger.info("removing partition dir marked for deletion dir=%s", entry)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            if entry.name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                continue
            if entry.name == REMOTE_INDEX_CACHE_DIR_NAME:  # the RemoteIndexCache's (as Kafka)
                continue
            try:
                tp = TopicPartition.parse_dir_name(entry.name)
            except StorageError as exc:
                logger.warning(
                    "skipping a directory that is not a partition dir=%s (%s)", entry, exc
                )
                continue
            if tp in self._logs or tp in self._offline:
                other = self._logs[tp].dir if tp in self._logs else self._offline[tp].dir
                raise LogDirNotFoundError(
                    f"partition {tp} exists in two log dirs: {other} and {entry}"
                )
            try:
                log = Log(
                    entry,
                    self._config_for(tp.topic),
                    log_start_offset=log_start_offsets.get(tp, 0),
                    recovery_point=recovery_points.get(tp, 0),
                    had_clean_shutdown=had_clean_shutdown,
                    clock=self._clock,
                    producer_id_expiration_ms=self._producer_id_expiration_ms,
                    file_cache=self.file_cache,
                )
            except (StorageError, OSError) as exc:
                if is_out_of_descriptors(exc) or isinstance(exc, TooManyOpenFilesError):
                    # Not a damaged log: taking it offline would hide a limit the operator
                    # must raise. The start is refused with the reason (files left as they are).
                    raise TooManyOpenFilesError(
                        f"cannot load partition {tp} from {entry}: {exc}. The broker holds"
                        " three descriptors per partition (its active segment's files) plus"
                        f" up to log.segment.open.files.max={self.file_cache.max_idle_files}:"
                        " raise ulimit -n above three times the partition count plus that"
                    ) from exc
                self._offline[tp] = OfflineLog(
                    dir=entry,
                    reason=f"{type(exc).__name__}: {exc}",
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_start_offsets.get(tp, 0),
                    high_watermark=high_watermarks.get(tp, 0),
                )
                logger.exception(
                    "cannot load log, partition taken offline; its files are left untouched"
                    " (inspect them with storage-core dump-log) partition=%s dir=%s",
                    tp,
                    entry,
                )
                continue
            log.update_high_watermark(high_watermarks.get(tp, log.log_start_offset))
            self._logs[tp] = log
        # From now on a crash must trigger recovery.
        marker.unlink(missing_ok=True)
        logger.info(
            "loaded log dir dir=%s clean_shutdown=%s partitions=%d",
            log_dir,
            had_clean_shutdown,
            sum(1 for log in self._logs.values() if log.dir.parent == log_dir),
        )

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int] | None:
        try:
            return OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as exc:
            logger.error("ignoring corrupt checkpoint file=%s error=%s", path, exc)
            return None

    # ------------------------------------------------------------------ partitions
    def _config_for(self, topic: str) -> LogConfig:
        return self.default_config.with_overrides(self._topic_configs(topic))

    def get_log(self, tp: TopicPartition) -> Log | None:
        with self._lock:
            return self._logs.get(tp)

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def offline_logs(self) -> dict[TopicPartition, OfflineLog]:
        """Partitions whose log could not be loaded at startup (see the module docstring)."""
        with self._lock:
            return dict(self._offline)

    def get_or_create_log(
        self,
        tp: TopicPartition,
        *,
        topic_id: Uuid | None = None,
        config: LogConfig | None = None,
    ) -> Log:
        """The partition's log, created in the log dir with the fewest partitions if new."""
        validate_topic_name(tp.topic)
        if tp.partition < 0:
            raise StorageError(f"partition number must be >= 0, got {tp.partition}")
        with self._lock:
            offline = self._offline.get(tp)
            if offline is not None:
                raise KafkaStorageError(
                    f"partition {tp} is offline: its log in {offline.dir} could not be loaded"
                    f" ({offline.reason}); repair or remove that directory and restart"
                )
            existing = self._logs.get(tp)
            if existing is not None:
                if topic_id is not None:
                    existing.assign_topic_id(topic_id)
                return existing
            other_creation = self._creating.get(tp)
            if other_creation is None:
                log_dir = self._next_log_dir()
                directory = log_dir / tp.dir_name
                # a valid topic name cannot leave the log dir; a symlink planted there could
                if directory.is_symlink():
                    raise StorageError(f"partition dir {directory} would escape log dir {log_dir}")
                created = threading.Event()
                self._creating[tp] = (created, log_dir)
        if other_creation is not None:  # another thread creates it: take what it made
            other_creation[0].wait()
            return self.get_or_create_log(tp, topic_id=topic_id, config=config)
        # Created outside the manager's lock, so that the logs of a batch of new partitions
        # are created side by side (their files and syscalls, not Python, take the time).
        try:
            try:
                directory.mkdir()
                new_log = True  # made here, so empty: nothing to scan
            except FileExistsError:
                new_log = False
            log = Log(
                directory,
                config or self._config_for(tp.topic),
                topic_id=topic_id,
                clock=self._clock,
                producer_id_expiration_ms=self._producer_id_expiration_ms,
                file_cache=self.file_cache,
                defer_metadata_flush=self._background_tasks,
                new_log=new_log,
            )
            with self._lock:
                self._logs[tp] = log
        finally:
            with self._lock:
                del self._creating[tp]
            created.set()
        if self._background_tasks:
            self._scheduler.schedule(
                "flush-metadata-file", log.maybe_flush_metadata_file, delay_ms=0, period_ms=None
            )
        logger.info("created log partition=%s dir=%s", tp, directory)
        return log

    def _next_log_dir(self) -> Path:
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]  # without counting every log: creation stays O(1)
        counts = {d: 0 for d in self.log_dirs}
        for log in self._logs.values():
            parent = log.dir.parent
            if parent in counts:
                counts[parent] += 1
        for _created, log_dir in self._creating.values():
            counts[log_dir] += 1
        return min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply a changed topic config to every live partition of the topic."""
        with self._lock:
            for tp, log in self._logs.items():
                if tp.topic == topic:
                    log.config = config

    def delete_log(self, tp: TopicPartition) -> None:
        """Delete one partition's log (see ``delete_logs``)."""
        self.delete_logs([tp])

    def delete_logs(
        self, tps: Sequence[TopicPartition], commit: Callable[[], None] | None = None
    ) -> None:
        """Delete the logs of ``tps``, all or nothing (Kafka's rename-then-delete).

        1. Each partition dir is renamed to ``files.log_delete_dir_name`` (atomic). If one
           rename fails, those already done are renamed back and ``KafkaStorageError`` is
           raised: every log stays as it was, open and served.
        2. ``commit`` runs (e.g. the topic leaves the metadata); if it raises, the renames are
           undone the same way and its error is raised.
        3. The logs are forgotten, their handles dropped and the renamed dirs removed. A crash
           or a failed removal from here on leaves only ``-delete`` dirs: startup removes them.
        """
        with self._lock:
            moves: list[tuple[TopicPartition, Path, Path]] = []
            for tp in dict.fromkeys(tps):
                current = self._logs[tp].dir if tp in self._logs else None
                if current is None and tp in self._offline:
                    current = self._offline[tp].dir
                if current is None:
                    continue
                target = current.with_name(files.log_delete_dir_name(tp.topic, tp.partition))
                try:
                    current.rename(target)
                except OSError as exc:
                    self._undo_moves(moves)
                    raise KafkaStorageError(
                        f"cannot delete partition {tp}: renaming {current} to {target.name}"
                        f" failed ({exc}); nothing was deleted"
                    ) from exc
                moves.append((tp, current, target))
        try:
            for parent in {target.parent for _tp, _current, target in moves}:
                fsync_directory(parent)
            if commit is not None:
                commit()  # not under the lock: it may publish events through this broker
        except BaseException:
            with self._lock:
                self._undo_moves(moves)
            raise
        with self._lock:
            for tp, _current, target in moves:
                self._offline.pop(tp, None)
                log = self._logs.pop(tp, None)
                self._removed_logs += 1
                if log is not None:
                    log.release_deleted_files(target)
        for tp, _current, target in moves:
            shutil.rmtree(target, ignore_errors=True)
            logger.info("deleted log partition=%s dir=%s", tp, target.name)
        if moves:
            self.checkpoint_recovery_points()
            self.checkpoint_log_start_offsets()

    @staticmethod
    def _undo_moves(moves: list[tuple[TopicPartition, Path, Path]]) -> None:
        for tp, original, target in reversed(moves):
            try:
                target.rename(original)
            except OSError:
                logger.exception(
                    "cannot rename a partition dir back after a failed delete partition=%s"
                    " dir=%s; rename it back to %s by hand before the next start, which"
                    " would remove it",
                    tp,
                    target,
                    original.name,
                )

    # ------------------------------------------------------------------ background work
    def cleanup_logs(self) -> int:
        """Local retention for every log; returns the number of segments deleted."""
        deleted = 0
        for tp, log in self.all_logs().items():
            try:
                deleted += log.delete_old_segments()
            except StorageError:
                logger.exception("retention failed partition=%s", tp)
        return deleted

    def remove_expired_producers(self) -> int:
        """Forget idempotent producers silent for ``producer.id.expiration.ms`` (every log)."""
        removed = 0
        for tp, log in self.all_logs().items():
            try:
                removed += log.remove_expired_producers()
            except StorageError:
                logger.exception("producer expiration failed partition=%s", tp)
        return removed

    def flush_dirty_logs(self) -> None:
        for tp, log in self.all_logs().items():
            try:
                log.maybe_flush_by_time()
            except StorageError:
                logger.exception("flush failed partition=%s", tp)

    def _checkpoint(
        self,
        file_name: str,
        value: Callable[[Log], int],
        offline_value: Callable[[OfflineLog], int],
    ) -> None:
        """Write ``file_name`` in each log dir, unless it holds these offsets already: the
        high watermarks are checkpointed every few seconds, and an idle broker's 3,000
        partitions were rewritten and synced each time for nothing."""
        with self._lock:
            single_dir = len(self.log_dirs) == 1
            for log_dir in self.log_dirs:
                offsets = {
                    tp: value(log)
                    for tp, log in self._logs.items()
                    if single_dir or log.dir.parent == log_dir
                }
                offsets.update(
                    (tp, offline_value(offline))
                    for tp, offline in self._offline.items()
                    if single_dir or offline.dir.parent == log_dir
                )
                if self._checkpointed.get((log_dir, file_name)) == offsets:
                    continue
                OffsetCheckpointFile(log_dir / file_name).write(offsets)
                self._checkpointed[(log_dir, file_name)] = offsets

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint_if_changed(
            RECOVERY_POINT_CHECKPOINT,
            OFFSET_CHANGES.recovery_points,
            lambda log: log.recovery_point,
            lambda o: o.recovery_point,
        )

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint_if_changed(
            LOG_START_OFFSET_CHECKPOINT,
            OFFSET_CHANGES.log_start_offsets,
            lambda log: log.log_start_offset,
            lambda o: o.log_start_offset,
        )

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint_if_changed(
            REPLICATION_OFFSET_CHECKPOINT,
            OFFSET_CHANGES.high_watermarks,
            lambda log: log.high_watermark,
            lambda o: o.high_watermark,
        )

    def _checkpoint_if_changed(
        self,
        file_name: str,
        changes: int,
        value: Callable[[Log], int],
        offline_value: Callable[[OfflineLog], int],
    ) -> None:
        """``_checkpoint``, skipped while no log's offset of this kind moved (``changes``,
        read before the walk: ``log_offsets``) and no log was created or removed since the
        last one, so that an idle broker does not walk all its logs every few seconds."""
        with self._lock:
            seen = (changes, self._removed_logs)
            if self._checkpoints_seen.get(file_name) == seen:
                return
            self._checkpoint(file_name, value, offline_value)
            self._checkpoints_seen[file_name] = seen
