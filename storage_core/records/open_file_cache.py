"""A broker-wide LRU of the open files of inactive segments (``log.segment.open.files.max``).

Kafka keeps every segment's ``.log`` open and opens indexes lazily; a broker with a backlog of
local segments (tiering paused while the object store is down) then runs out of descriptors.
Here a segment file is a *member* of one ``OpenFileCache``: its handle (a ``.log`` descriptor,
or a mapped index) is opened on demand by ``pin`` and closed when the member has been idle
longest and more than ``max_idle_files`` idle members are open::

    member states                        pin()                 unpin() (last)
    closed handle ---------------------> open, pinned -------> open, idle (LRU tail)
         ^                                  ^      |                |
         |          evicted (LRU head,      |      +-- pin() <------+
         +--------- over max_idle_files) ---+-------------------- open, idle

* A pinned member is in use (a read, a write, an index lookup): its handle is never closed
  under it. Only idle members are evicted, least recently used first.
* A member that is not ``evictable`` (the active segment's files, which take every append)
  stays open once opened; ``set_evictable`` moves a segment's files in and out when it rolls.
* Closing a member (``retire``) while it is pinned closes its handle at the last ``unpin``.
* Opening at the process's descriptor limit (EMFILE, ENFILE, or ENOMEM when mapping an index)
  evicts every idle member and tries once more; if that fails too it raises
  ``TooManyOpenFilesError``, a retriable error for the request that needed the file: running
  out of descriptors is never a log-dir failure.

A mapped index holds a descriptor as well (CPython's ``mmap`` keeps a duplicate of the file's
descriptor), so every member costs one. Descriptors of a broker's segments: three per
partition (its active segment's ``.log``, ``.index`` and ``.timeindex``) plus at most
``max_idle_files`` idle files plus those pinned by requests in flight, whatever the number of
segments on disk (Kafka's three per segment are what made a backlog fatal).

Thread safety: one lock guards the LRU, every member's pin count and its handle slot; system
calls that open or close handles run outside it. Opening on demand is serialised by a second
lock, so a member is never opened twice at once, and a pin waits for an evicted handle of its
member to be closed before opening it again (closing an index trims its file).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from storage_core.errors import InvalidConfigError, TooManyOpenFilesError

logger = logging.getLogger(__name__)

DEFAULT_MAX_IDLE_FILES = 1000
"""Default of ``log.segment.open.files.max``."""

# Errors that mean the process (or the system) has no descriptor or mapping left to give.
OUT_OF_DESCRIPTORS_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})

H = TypeVar("H")
T = TypeVar("T")


def is_out_of_descriptors(exc: BaseException | None) -> bool:
    """Whether ``exc``, or the error it was raised from (a ``CheckpointWriteError`` wraps its
    ``OSError``), is the process or the system running out of descriptors (or maps)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS_ERRNOS:
            return True
        exc = exc.__cause__
    return False


def open_files_limit() -> int:
    """The process's soft RLIMIT_NOFILE (the ``ulimit -n`` it runs with)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def validate_segment_open_files_max(value: int) -> None:
    """Refuse a ``log.segment.open.files.max`` that bounds nothing: below 1, or not below the
    process's open-file limit (the broker needs descriptors for its active segments,
    connections and checkpoints besides)."""
    limit = open_files_limit()
    if value < 1:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration log.segment.open.files.max: must be >= 1"
            " (how many idle files of inactive segments the broker keeps open)"
        )
    if limit != resource.RLIM_INFINITY and value >= limit:
        raise InvalidConfigError(
            f"Invalid value {value} for configuration log.segment.open.files.max: it must be"
            f" below this process's open-file limit ({limit}, ulimit -n), which must also hold"
            " one descriptor per partition and the connections; lower it or raise ulimit -n"
        )


class CachedHandle(Generic[H]):
    """A member of an ``OpenFileCache``: a file whose handle is opened on demand.

    Subclasses say how to open and close the handle; the cache owns ``_handle``.
    """

    __slots__ = ("_cache_closing", "_cache_evictable", "_cache_pins", "_cache_retired", "_handle")

    def __init__(self) -> None:
        self._handle: H | None = None
        self._cache_pins = 0
        self._cache_evictable = True
        self._cache_retired = False
        self._cache_closing = False  # an evicted handle is being closed

    def _open_handle(self) -> H:
        """Open the file (system calls; may raise ``OSError``)."""
        raise NotImplementedError

    def _close_handle(self, handle: H) -> None:
        """Close a handle no one uses any more."""
        raise NotImplementedError

    def _describe(self) -> str:
        """The file, for error messages."""
        raise NotImplementedError


class OpenFileCache:
    """Opens segment files on demand and keeps at most ``max_idle_files`` idle ones open."""

    def __init__(self, max_idle_files: int = DEFAULT_MAX_IDLE_FILES) -> None:
        if max_idle_files < 1:
            raise ValueError(
                f"log.segment.open.files.max must be >= 1, got {max_idle_files}: it is how"
                " many idle segment files a broker keeps open"
            )
        self.max_idle_files = max_idle_files
        self._lock = threading.Lock()
        self._closed_one = threading.Condition(self._lock)
        # Serialises opening (taken before ``_lock``, never inside it).
        self._open_lock = threading.Lock()
        self._idle: OrderedDict[CachedHandle[object], None] = OrderedDict()
        self._open = 0  # members whose handle is open (idle, pinned or not evictable)
        self.evictions = 0
        self.exhaustions = 0  # times opening a file found no descriptor left

    # ------------------------------------------------------------------ facts
    @property
    def open_files(self) -> int:
        """Members whose handle is open now."""
        with self._lock:
            return self._open

    @property
    def idle_files(self) -> int:
        """Open members nobody uses that may be closed (the LRU's length)."""
        with self._lock:
            return len(self._idle)

    # ------------------------------------------------------------------ membership
    def adopt(self, member: CachedHandle[H], handle: H) -> None:
        """Make ``member`` own an already opened ``handle`` (e.g. the file it just created)."""
        with self._lock:
            if member._handle is not None:
                raise ValueError(f"{member._describe()} already has an open handle")
            member._handle = handle
            self._open += 1
            self._park(member)
            victims = self._victims()
        self._close_all(victims)

    def set_evictable(self, member: CachedHandle[H], evictable: bool) -> None:
        """An active segment's files are not evictable; rolled ones are."""
        with self._lock:
            member._cache_evictable = evictable
            if evictable:
                self._park(member)
            else:
                self._idle.pop(member, None)  # type: ignore[arg-type]
            victims = self._victims()
        self._close_all(victims)

    def retire(self, member: CachedHandle[H]) -> H | None:
        """The member is closed for good: returns its handle for the caller to close now, or
        None when it had none or when a pin still uses it (then the last ``unpin`` closes it)."""
        with self._lock:
            member._cache_retired = True
            self._idle.pop(member, None)  # type: ignore[arg-type]
            if member._cache_pins > 0 or member._handle is None:
                return None
            handle, member._handle = member._handle, None
            self._open -= 1
            return handle

    # ------------------------------------------------------------------ use
    def pin(self, member: CachedHandle[H]) -> H:
        """The member's handle, opened if it was not, and held open until ``unpin``."""
        with self._lock:
            if member._cache_retired:
                raise ValueError(f"{member._describe()} is closed")
            # An evicted index is trimmed as it closes: mapping the file again before that is
            # done would count the bytes being cut (and fault on them once they are gone).
            while member._cache_closing:
                self._closed_one.wait()
            member._cache_pins += 1
            self._idle.pop(member, None)  # type: ignore[arg-type]
            handle = member._handle
        if handle is not None:
            return handle
        try:
            # One opener at a time: two mappings of a new index would each preallocate and
            # count its entries differently.
            with self._open_lock:
                with self._lock:
                    handle = member._handle
                if handle is None:
                    handle = self._open_evicting(member)
                    with self._lock:
                        member._handle = handle
                        self._open += 1
        except BaseException:
            self.unpin(member)
            raise
        return handle

    def unpin(self, member: CachedHandle[H]) -> None:
        with self._lock:
            member._cache_pins -= 1
            if member._cache_pins > 0:
                return
            handle = None
            if member._cache_retired and member._handle is not None:
                handle, member._handle = member._handle, None
                self._open -= 1
            else:
                self._park(member)
            victims = self._victims()
        if handle is not None:
            member._close_handle(handle)
        self._close_all(victims)

    def evict_idle(self) -> int:
        """Close every idle member now; returns how many were closed."""
        with self._lock:
            victims = self._take_idle(len(self._idle))
        self._close_all(victims)
        return len(victims)

    # ------------------------------------------------------------------ internals
    def call_evicting(self, open_handle: Callable[[], T], what: str) -> T:
        """``open_handle()``; when the process is out of descriptors, close every idle member
        and try once more, then raise ``TooManyOpenFilesError`` naming ``what``."""
        try:
            return open_handle()
        except Exception as exc:
            if not is_out_of_descriptors(exc):
                raise
        closed = self.evict_idle()
        try:
            return open_handle()
        except Exception as exc:
            if not is_out_of_descriptors(exc):
                raise
            strerror = os.strerror(errno.EMFILE) if not isinstance(exc, OSError) else exc.strerror
            with self._lock:
                self.exhaustions += 1
                open_now = self._open
            raise TooManyOpenFilesError(
                f"cannot open {what}: {strerror} (this process may hold"
                f" {open_files_limit()} descriptors, ulimit -n; segment files open: {open_now},"
                f" {closed} idle ones were closed to make room). Raise the broker's open-file"
                " limit, lower log.segment.open.files.max, or let tiering and retention delete"
                " local segments; the request may be retried"
            ) from exc

    def _open_evicting(self, member: CachedHandle[H]) -> H:
        return self.call_evicting(member._open_handle, member._describe())

    def _park(self, member: CachedHandle[H]) -> None:
        """Put an open, unpinned, evictable member at the LRU's tail (lock held)."""
        if (
            member._handle is not None
            and member._cache_pins == 0
            and member._cache_evictable
            and not member._cache_retired
        ):
            self._idle[member] = None  # type: ignore[index]
            self._idle.move_to_end(member)  # type: ignore[arg-type]

    def _victims(self) -> list[tuple[CachedHandle[object], object]]:
        return self._take_idle(len(self._idle) - self.max_idle_files)

    def _take_idle(self, count: int) -> list[tuple[CachedHandle[object], object]]:
        """Take the handles of the ``count`` least recently used idle members (lock held)."""
        victims: list[tuple[CachedHandle[object], object]] = []
        while count > 0 and self._idle:
            member, _ = self._idle.popitem(last=False)
            handle, member._handle = member._handle, None
            if handle is not None:
                self._open -= 1
                member._cache_closing = True
                victims.append((member, handle))
            count -= 1
        self.evictions += len(victims)
        return victims

    def _close_all(self, victims: list[tuple[CachedHandle[object], object]]) -> None:
        for member, handle in victims:
            try:
                member._close_handle(handle)
            except OSError as exc:  # closing never fails the request that evicted it
                logger.warning(
                    "closing an idle segment file failed file=%s error=%s", member._describe(), exc
                )
            finally:
                with self._lock:
                    member._cache_closing = False
                    self._closed_one.notify_all()
