"""The read_committed benchmark's short variant (``benchmarks/read_committed.py --short``): a
broker process, 200 transactions of 100 records with 10% aborted (written over raw sockets, and
by confluent-kafka transactional producers through the broker's transaction coordinator), read
whole by confluent-kafka at both isolation levels. Checked: every read delivers exactly what it
must (read_committed the committed records and none of the aborted ones, read_uncommitted all
of them), and every figure is measured. The ratio itself is printed, not checked: speed aims
live in the benchmark's full run (README), not in a timed test on a shared machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import read_committed

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("writer", ["wire", "confluent"])
def test_the_short_run_reads_exactly_the_committed_records_and_measures_both(
    writer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = read_committed.parse_args(["--short", "--writer", writer])
    result = read_committed.run(args, tmp_path)
    table = read_committed.format_result(result)
    with capsys.disabled():
        print(f"\n{table}")
    assert result["errors"] == [], table
    log = result["log"]
    assert log["aborted_transactions"] == 20, table
    assert (log["committed_records"], log["aborted_records"]) == (18_000, 2_000), table
    assert log["end_offset"] == 20_000 + 200  # a marker per transaction
    assert log["segments"] > 1, table  # the reads cross segments
    reads = result["reads"]
    assert reads["read_committed"]["delivered"] == 18_000
    assert reads["read_uncommitted"]["delivered"] == 20_000
    for figures in reads.values():
        assert len(figures["runs_s"]) == 2 and figures["records_per_s"] > 0, table
    assert result["ratio"] > 0


@pytest.mark.parametrize(("percent", "aborted"), [(0, 0), (10, 10), (33, 33), (100, 100)])
def test_aborted_transactions_are_the_percent_asked_spread_evenly(
    percent: int, aborted: int
) -> None:
    flags = [read_committed.is_aborted(i, percent) for i in range(100)]
    assert sum(flags) == aborted
    if percent == 10:
        assert [i for i, flag in enumerate(flags) if flag] == list(range(9, 100, 10))
