"""File names inside a partition directory (Kafka's ``LogFileUtils``).

Every segment file is named by the 20-digit zero-padded base offset of its segment:
``00000000000000000042.log`` / ``.index`` / ``.timeindex`` / ``.txnindex`` / ``.snapshot``.
Files being deleted carry ``.deleted``; ``.cleaned`` and ``.swap`` are leftovers of an
interrupted rewrite.
"""

from __future__ import annotations

import uuid
from pathlib import Path

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
# Bytes that recovery had to cut off (a corrupt batch and everything after it) are kept
# under this suffix instead of being thrown away, so nothing that was on disk is lost.
QUARANTINED_FILE_SUFFIX = ".quarantined"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
STRAY_SUFFIXES = (DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
DELETE_DIR_SUFFIX = "-delete"
# A file name may have at most this many bytes (NAME_MAX on Linux and most file systems).
DIR_NAME_BYTES_MAX = 255


def filename_prefix_from_offset(offset: int) -> str:
    """``42`` -> ``00000000000000000042``."""
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + LOG_FILE_SUFFIX + suffix)


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TIME_INDEX_FILE_SUFFIX + suffix)


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TXN_INDEX_FILE_SUFFIX + suffix)


def producer_snapshot_file(directory: Path, offset: int) -> Path:
    return directory / (filename_prefix_from_offset(offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX)


def offset_from_file_name(name: str) -> int:
    """The base offset a segment file name starts with; ``ValueError`` if it has none."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} does not start with a 20-digit offset")
    return int(prefix)


def log_delete_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>.<uuid hex>-delete``, the topic cut so the name fits 255 bytes.

    Kafka's ``LocalLog.logDeleteDirName``: a legal topic name has up to 249 characters, so the
    full name can exceed the file system's limit; only the topic part is shortened (topic names
    are ASCII, so characters are bytes). Startup removes every ``-delete`` dir by its suffix.
    """
    full_suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: max(DIR_NAME_BYTES_MAX - len(full_suffix), 0)] + full_suffix
