"""The transactional produce benchmark's short variant (``benchmarks/transactional_produce.py
--short``): one broker process, 20,000 records written by an idempotent and by a transactional
confluent-kafka producer (transactions of 1,000), two rounds. Checked: every round's records are
all read back by a read_committed consumer and every figure is measured, a transaction's phases
and the client's ceiling (both producers against librdkafka's mock cluster) included. The
ratios are printed, not checked: speed aims live in the benchmark's full run (README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import transactional_produce

pytestmark = pytest.mark.timeout(300)


def test_the_short_run_commits_every_record_and_measures_both_producers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = transactional_produce.parse_args(["--short"])
    result = transactional_produce.run(args, tmp_path)
    table = transactional_produce.format_result(result)
    with capsys.disabled():
        print(f"\n{table}")
    assert result["errors"] == [], table
    for figures in result["produce"].values():
        assert len(figures["runs_s"]) == 2 and figures["records_per_s"] > 0, table
    assert result["ratio"] > 0
    assert set(result["transaction_ms"]) == {"produce", "flush", "commit"}, table
    assert all(ms > 0 for ms in result["transaction_ms"].values()), table
    ceiling = result["client_ceiling"]
    assert ceiling is not None, table
    assert all(rate > 0 for rate in ceiling["records_per_s"].values()), table
    assert ceiling["ratio"] > 0 and ceiling["broker_share_of_ceiling"] > 0, table
    assert "client ceiling" in table
