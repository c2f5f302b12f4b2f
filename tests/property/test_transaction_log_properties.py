"""Properties of the ``__transaction_state`` record codec: every value round-trips in both
versions, and any bytes either decode or raise ``CorruptTransactionLogRecordError``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.coordinator.transaction.errors import CorruptTransactionLogRecordError
from storage_core.coordinator.transaction.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
    TxnPartitions,
    UnknownKey,
    decode_value,
    encode_value,
    key_to_bytes,
    read_txn_record_key,
)
from storage_core.coordinator.transaction.transaction_state import TransactionState

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int16s = st.integers(min_value=-(2**15), max_value=2**15 - 1)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
partitions = st.lists(
    st.builds(
        TxnPartitions,
        topic=st.text(max_size=20),
        partition_ids=st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=5).map(
            tuple
        ),
    ),
    max_size=4,
).map(tuple)
values = st.builds(
    TransactionLogValue,
    producer_id=int64s,
    previous_producer_id=int64s,
    next_producer_id=int64s,
    producer_epoch=int16s,
    transaction_timeout_ms=int32s,
    transaction_status=st.sampled_from(TransactionState),
    transaction_partitions=st.none() | partitions,
    transaction_last_update_timestamp_ms=int64s,
    transaction_start_timestamp_ms=int64s,
    client_transaction_version=int16s,
)


@SETTINGS
@given(values)
def test_version_1_round_trips_every_field(value: TransactionLogValue) -> None:
    assert decode_value(encode_value(value, 1)) == value


@SETTINGS
@given(values)
def test_version_0_round_trips_all_but_the_tagged_fields(value: TransactionLogValue) -> None:
    decoded = decode_value(encode_value(value, 0))
    assert decoded.producer_id == value.producer_id
    assert decoded.transaction_partitions == value.transaction_partitions
    assert (decoded.previous_producer_id, decoded.next_producer_id) == (-1, -1)
    assert decoded.client_transaction_version == 0


@SETTINGS
@given(st.text(max_size=100))
def test_keys_round_trip(transactional_id: str) -> None:
    key = read_txn_record_key(key_to_bytes(transactional_id))
    assert key == TransactionLogKey(transactional_id=transactional_id)


@SETTINGS
@given(st.binary(max_size=120))
def test_any_bytes_decode_or_raise_a_corrupt_record_error(data: bytes) -> None:
    for decode in (decode_value, read_txn_record_key):
        try:
            result = decode(data)
        except CorruptTransactionLogRecordError:
            continue
        assert isinstance(result, TransactionLogValue | TransactionLogKey | UnknownKey)


@SETTINGS
@given(values, st.sampled_from([0, 1]), st.data())
def test_a_truncated_value_is_refused(
    value: TransactionLogValue, version: int, data: st.DataObject
) -> None:
    encoded = encode_value(value, version)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    try:
        decode_value(encoded[:cut])
    except CorruptTransactionLogRecordError:
        return
    raise AssertionError(f"{cut} of {len(encoded)} bytes decoded")
