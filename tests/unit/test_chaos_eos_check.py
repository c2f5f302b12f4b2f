"""The exactly-once checker sees each way a consume-transform-produce run can go wrong: an
input record lost or written twice, a key out of order, an aborted attempt read committed, an
attempt read committed in part; and the nemesis plan meets every kind of kill in five rounds."""

from __future__ import annotations

from tests.chaos.eos import Kind, plan
from tests.chaos.eos_check import OutputRecord, check, parse_outcomes
from tests.chaos.eos_loop import output_value

EXPECTED = {"k00": 3, "k01": 2}


def records(*rows: tuple[int, str, int, int, int]) -> list[OutputRecord]:
    """(partition, key, seq, run, txn) rows, at increasing offsets per partition."""
    offsets: dict[int, int] = {}
    out = []
    for partition, key, seq, run, txn in rows:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        out.append(
            OutputRecord(partition=partition, offset=offset, value=output_value(key, seq, run, txn))
        )
    return out


# Run 1 commits txn 1, aborts txn 2 (k00-1, k01-0 again), is killed in txn 3 (k00-1);
# run 2 commits the rest.
GOOD_COMMITTED = records(
    (0, "k00", 0, 1, 1), (1, "k01", 0, 1, 1), (0, "k00", 1, 2, 1), (0, "k00", 2, 2, 1),
    (1, "k01", 1, 2, 2),
)  # fmt: skip
GOOD_UNCOMMITTED = records(
    (0, "k00", 0, 1, 1), (1, "k01", 0, 1, 1), (0, "k00", 1, 1, 2), (1, "k01", 0, 1, 2),
    (0, "k00", 1, 1, 3), (0, "k00", 1, 2, 1), (0, "k00", 2, 2, 1), (1, "k01", 1, 2, 2),
)  # fmt: skip
OUTCOMES = parse_outcomes(
    ["1 1 committed 2 1.5", "1 2 aborted 2 2.5", "2 1 committed 2 9.5", "2 2 committed 1"]
)


def test_outcome_lines_cut_by_a_kill_are_skipped() -> None:
    assert [(o.attempt, o.committed, o.at) for o in OUTCOMES] == [
        ((1, 1), True, 1.5),
        ((1, 2), False, 2.5),
        ((2, 1), True, 9.5),
    ]


def test_a_run_with_aborted_attempts_holds_and_counts_them() -> None:
    report = check(EXPECTED, GOOD_COMMITTED, GOOD_UNCOMMITTED, OUTCOMES)
    assert report.ok, report.summary()
    assert (report.attempts_committed, report.attempts_aborted) == (3, 2)
    assert report.aborted_records == 3


def test_a_lost_record_and_a_duplicate_are_named() -> None:
    committed = [*GOOD_COMMITTED[:4], *records((0, "k00", 2, 2, 1))]
    report = check(EXPECTED, committed, GOOD_UNCOMMITTED, OUTCOMES)
    assert report.lost == [("k01", 1)]
    assert ("k00", 2) in report.duplicated
    assert not report.ok


def test_a_key_out_of_order_is_named() -> None:
    committed = records(
        (0, "k00", 1, 2, 1), (0, "k00", 0, 1, 1), (0, "k00", 2, 2, 1), (1, "k01", 0, 1, 1),
        (1, "k01", 1, 2, 2),
    )  # fmt: skip
    report = check(EXPECTED, committed, committed, [])
    assert report.counts["reordered"] == 1 and report.reordered[0].startswith("k00")


def test_an_aborted_attempt_read_committed_is_named() -> None:
    # the loop saw (1, 2) aborted, yet its k01-0 is read committed instead of (1, 1)'s
    committed = records(
        (0, "k00", 0, 1, 1), (1, "k01", 0, 1, 2), (0, "k00", 1, 2, 1), (0, "k00", 2, 2, 1),
        (1, "k01", 1, 2, 2),
    )  # fmt: skip
    report = check(EXPECTED, committed, GOOD_UNCOMMITTED, OUTCOMES)
    assert report.aborted_visible == [(1, 2)]
    assert report.partial  # (1, 1) and (1, 2) are both read in part
    assert not report.ok


def test_an_attempt_read_committed_in_part_is_named() -> None:
    # (2, 1) wrote k00-1 and k00-2; only one of them is read committed, the other is lost
    committed = [*GOOD_COMMITTED[:3], GOOD_COMMITTED[4]]
    report = check(EXPECTED, committed, GOOD_UNCOMMITTED, OUTCOMES)
    assert report.partial == [(2, 1)] and report.lost == [("k00", 2)]


def test_a_commit_the_loop_saw_but_nobody_reads_is_named() -> None:
    outcomes = parse_outcomes(["1 1 committed 2 1.0", "3 9 committed 1 2.0"])
    report = check(EXPECTED, GOOD_COMMITTED, GOOD_UNCOMMITTED, outcomes)
    assert report.committed_missing == [(3, 9)]


def test_the_plan_holds_every_kind_in_each_block_of_five() -> None:
    faults = plan(7, 10)
    assert {f.kind for f in faults[:5]} == set(Kind) == {f.kind for f in faults[5:]}
    assert plan(7, 10) == faults
