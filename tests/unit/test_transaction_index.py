"""The ``.txnindex`` file of a segment (Kafka's ``TransactionIndex``): its 34-byte entries,
Kafka's search rules, truncation, the sanity check and what it costs in files and descriptors.

The search and truncation cases are those of Kafka's ``TransactionIndexTest``."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.errors import CorruptIndexError
from storage_core.log.producer_state_entry import CompletedTxn
from storage_core.log.transaction_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    TxnIndexAppendError,
)
from storage_core.records.open_file_cache import OpenFileCache


def txn(producer_id: int, first: int, last: int, lso: int) -> AbortedTxn:
    return AbortedTxn(
        producer_id=producer_id, first_offset=first, last_offset=last, last_stable_offset=lso
    )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.txnindex"


def test_an_entry_is_kafkas_34_bytes_big_endian(path: Path) -> None:
    entry = txn(0x0102030405060708, 0x10, 0x20, 0x21)
    expected = bytes.fromhex(
        "0000"  # version 0
        "0102030405060708"  # producer id
        "0000000000000010"  # first offset
        "0000000000000020"  # last offset
        "0000000000000021"  # last stable offset
    )
    assert len(expected) == ENTRY_SIZE == 34
    assert entry.to_bytes() == expected
    assert AbortedTxn.from_bytes(expected) == entry
    index = TransactionIndex(0, path)
    index.append(entry)
    index.close()
    assert path.read_bytes() == expected
    completed = CompletedTxn(producer_id=5, first_offset=3, last_offset=9, is_aborted=True)
    assert AbortedTxn.of(completed, 4) == txn(5, 3, 9, 4)


def test_the_file_is_created_by_the_first_append_only(path: Path) -> None:
    index = TransactionIndex(0, path)
    assert index.all_entries() == []
    result = index.collect_aborted_txns(0, 100)
    assert (result.aborted_transactions, result.is_complete) == ((), False)
    index.sanity_check()
    index.flush()
    assert not path.exists()
    index.append(txn(1, 0, 10, 11))
    assert path.stat().st_size == ENTRY_SIZE
    index.close()
    reopened = TransactionIndex(0, path)
    assert reopened.all_entries() == [txn(1, 0, 10, 11)]
    reopened.close()


def test_an_append_whose_last_offset_does_not_increase_is_refused(path: Path) -> None:
    index = TransactionIndex(0, path)
    index.append(txn(1, 0, 10, 11))
    with pytest.raises(TxnIndexAppendError, match=r"10 is not greater than current last offset 10"):
        index.append(txn(2, 5, 10, 11))
    with pytest.raises(TxnIndexAppendError, match=str(path)):
        index.append(txn(2, 5, 9, 11))
    assert path.stat().st_size == ENTRY_SIZE  # nothing written
    index.close()
    # The entries on disk count too when the file is opened again (Kafka forgets them).
    reopened = TransactionIndex(0, path)
    with pytest.raises(TxnIndexAppendError):
        reopened.append(txn(2, 5, 9, 11))
    reopened.append(txn(2, 5, 11, 12))
    assert reopened.all_entries() == [txn(1, 0, 10, 11), txn(2, 5, 11, 12)]
    reopened.close()


def test_collect_aborted_txns_follows_kafkas_rules(path: Path) -> None:
    entries = [txn(0, 0, 10, 11), txn(1, 5, 15, 13), txn(2, 18, 35, 25), txn(3, 32, 50, 40)]
    index = TransactionIndex(0, path)
    for entry in entries:
        index.append(entry)

    def search(fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        result = index.collect_aborted_txns(fetch_offset, upper_bound_offset)
        return list(result.aborted_transactions), result.is_complete

    assert search(0, 100) == (entries, False)  # no LSO reaches 100: later segments may add
    assert search(0, 32) == (entries[:3], True)  # the last one starts at 32 (exclusive bound)
    assert search(0, 35) == (entries, True)
    assert search(10, 35) == (entries, True)
    assert search(11, 35) == (entries[1:], True)  # the first one ended at 10
    assert search(20, 41) == (entries[2:], False)
    index.close()


def test_truncate_to_drops_the_entries_ending_at_or_after_the_offset(path: Path) -> None:
    entries = [txn(0, 0, 10, 2), txn(1, 5, 15, 16), txn(2, 18, 35, 25), txn(3, 32, 50, 40)]
    index = TransactionIndex(0, path)
    for entry in entries:
        index.append(entry)
    index.truncate_to(51)
    assert index.all_entries() == entries
    index.truncate_to(50)
    assert index.all_entries() == entries[:3]
    assert path.stat().st_size == 3 * ENTRY_SIZE
    index.append(txn(4, 40, 45, 46))  # the last offset is 35 again: 45 may follow
    assert index.all_entries() == [*entries[:3], txn(4, 40, 45, 46)]
    index.truncate_to(10)  # nothing is left: no file either
    assert index.all_entries() == []
    assert not path.exists()
    index.append(txn(5, 0, 3, 4))
    index.reset()
    assert index.all_entries() == []
    assert not path.exists()
    index.close()


def test_sanity_check_names_the_file_and_the_problem(path: Path) -> None:
    good = txn(1, 0, 10, 11).to_bytes()
    path.write_bytes(good + good[:20])
    index = TransactionIndex(0, path)
    with pytest.raises(
        CorruptIndexError, match=r"found 54 bytes which is not a multiple of the 34"
    ):
        index.check_length()
    assert not index.holds_descriptor  # the length check is a stat
    with pytest.raises(CorruptIndexError, match=str(path)):
        index.sanity_check()

    path.write_bytes(good + b"\x00\x01" + good[2:])  # a second entry of version 1
    with pytest.raises(CorruptIndexError, match=r"at byte 34: unexpected aborted transaction"):
        TransactionIndex(0, path).sanity_check()

    path.write_bytes(good)
    with pytest.raises(CorruptIndexError, match=r"below the segment's base offset 20"):
        TransactionIndex(20, path).sanity_check()  # Kafka's testSanityCheck

    path.write_bytes(good + txn(2, 3, 9, 12).to_bytes())
    with pytest.raises(CorruptIndexError, match=r"below the previous entry's 10"):
        TransactionIndex(0, path).sanity_check()

    # A restored log's last segment closes its uncopied aborts at one offset.
    path.write_bytes(good + txn(2, 3, 10, 12).to_bytes())
    TransactionIndex(0, path).sanity_check()

    path.write_bytes(good + txn(2, 3, 19, 20).to_bytes())
    checked = TransactionIndex(0, path, OpenFileCache(max_idle_files=4))
    checked.sanity_check()
    assert not checked.holds_descriptor  # a load's check leaves nothing open


def test_rename_and_delete_follow_the_file(path: Path) -> None:
    index = TransactionIndex(0, path)
    missing = path.with_name(path.name + ".deleted")
    index.rename_to(missing)  # no file yet: only the name changes
    assert index.path == missing
    assert not missing.exists()
    assert index.delete_if_exists() is False

    index = TransactionIndex(0, path)
    index.append(txn(1, 0, 10, 11))
    deleted = path.with_name(path.name + ".deleted")
    index.rename_to(deleted)
    assert not path.exists()
    assert index.all_entries() == [txn(1, 0, 10, 11)]
    index.append(txn(2, 11, 12, 13))  # written to the renamed file
    assert deleted.stat().st_size == 2 * ENTRY_SIZE
    assert index.delete_if_exists() is True
    assert not deleted.exists()


def test_with_the_open_file_cache_the_descriptor_is_opened_on_use_and_evictable(
    tmp_path: Path,
) -> None:
    cache = OpenFileCache(max_idle_files=1)
    paths = [tmp_path / f"{i:020d}.txnindex" for i in (0, 100)]
    first, second = (TransactionIndex(i * 100, p, cache) for i, p in enumerate(paths))
    assert first.all_entries() == [] and cache.open_files == 0  # no file: nothing opened
    first.append(txn(1, 0, 10, 11))
    assert first.holds_descriptor and cache.open_files == 1 and cache.idle_files == 1
    second.append(txn(2, 100, 110, 111))
    assert cache.open_files == 1  # the least recently used one was closed
    assert not first.holds_descriptor
    assert first.all_entries() == [txn(1, 0, 10, 11)]  # opened again to read
    assert cache.open_files == 1 and not second.holds_descriptor
    first.flush()
    first.close()
    assert cache.open_files == 0
    assert second.collect_aborted_txns(100, 200).aborted_transactions == (txn(2, 100, 110, 111),)
    second.close()
    assert cache.open_files == 0
    assert [p.stat().st_size for p in paths] == [ENTRY_SIZE, ENTRY_SIZE]
