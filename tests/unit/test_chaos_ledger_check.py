"""The ledger checker on hand-built histories: each kind of violation named with its offsets."""

from __future__ import annotations

from tests.chaos.ledger import Ack, Consumed, check, failover_time_s, parse_value, value_of


def _ack(producer: int, seq: int, partition: int, offset: int, at: float = 0.0) -> Ack:
    return Ack(
        producer=producer, seq=seq, partition=partition, offset=offset, produced_at=at, acked_at=at
    )


def _read(*records: tuple[int, int, bytes]) -> list[Consumed]:
    return [Consumed(partition=p, offset=o, value=v) for p, o, v in records]


def test_values_round_trip_and_other_records_are_ignored() -> None:
    assert parse_value(value_of(3, 42)) == (3, 42)
    assert parse_value(b"probe") is None and parse_value(None) is None


def test_a_clean_history_passes() -> None:
    acks = [_ack(0, 0, 0, 0), _ack(1, 0, 0, 1), _ack(0, 1, 1, 0)]
    consumed = _read((0, 0, value_of(0, 0)), (0, 1, value_of(1, 0)), (1, 0, value_of(0, 1)))
    consumed += _read((1, 1, value_of(0, 3)), (1, 2, b"not ours"))  # unacked: may be present
    report = check(acks, consumed)
    assert report.ok, report.summary()
    assert (report.acknowledged, report.consumed) == (3, 5)


def test_lost_moved_duplicated_and_reordered_are_each_reported() -> None:
    acks = [_ack(0, 0, 0, 0), _ack(0, 3, 0, 1), _ack(0, 6, 0, 2), _ack(1, 0, 0, 3)]
    consumed = _read(
        (0, 0, value_of(0, 0)),
        (0, 1, value_of(0, 6)),  # seq 6 before seq 3: reordered; 6 acked at 2: moved
        (0, 2, value_of(0, 3)),  # moved (acked at 1)
        (0, 4, value_of(0, 0)),  # a second copy of seq 0
    )  # p1-0 (acked at 3) never read: lost
    report = check(acks, consumed)
    assert not report.ok
    assert report.counts == {"lost": 1, "moved": 2, "duplicated": 1, "reordered": 2}
    assert [(a.producer, a.seq, a.offset) for a in report.lost] == [(1, 0, 3)]
    assert report.duplicated == [(value_of(0, 0), [(0, 0), (0, 4)])]
    assert (0, 0, 3, 2, 6) in report.reordered  # producer, partition, seq, offset, previous seq
    assert "lost p1-0 acked at 0@3" in report.summary()


def test_failover_is_the_first_ack_of_a_record_produced_after_the_kill() -> None:
    acks = [
        Ack(producer=0, seq=0, partition=0, offset=0, produced_at=9.0, acked_at=10.5),
        Ack(producer=0, seq=3, partition=0, offset=1, produced_at=10.2, acked_at=13.0),
        Ack(producer=0, seq=1, partition=1, offset=0, produced_at=10.1, acked_at=10.3),
    ]
    assert failover_time_s(acks, 0, since=10.0) == 3.0
    assert failover_time_s(acks, 2, since=10.0) is None
