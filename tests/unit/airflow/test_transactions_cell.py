"""The status page's transactions cell: the LSO where it differs from the HW and the open
transactions of a partition, as ``jobs.cluster_status`` recorded them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest


def test_the_cell_in_words() -> None:
    from tiered_storage_plugin.transactions_cell import transactions_text

    def text(**fields: int | None) -> str:
        values: dict[str, int | None] = {
            "high_watermark": 50,
            "last_stable_offset": 50,
            "open_transactions": 0,
            "oldest_start_offset": None,
            "oldest_age_ms": None,
        }
        return transactions_text(**(values | fields))  # type: ignore[arg-type]

    assert text(last_stable_offset=None) == "-"  # a snapshot from before the LSO was recorded
    assert text() == "none open"
    assert text(last_stable_offset=48) == (
        "LSO 48 (HW 50); no transaction open: a marker not yet replicated"
    )
    assert text(
        last_stable_offset=12, open_transactions=1, oldest_start_offset=12, oldest_age_ms=125_000
    ) == (
        "LSO 12 (HW 50); 1 open since offset 12; its producer last wrote 2 min before the snapshot"
    )
    assert text(
        last_stable_offset=12, open_transactions=3, oldest_start_offset=12, oldest_age_ms=None
    ) == ("LSO 12 (HW 50); 3 open, the oldest since offset 12")
    assert text(last_stable_offset=12, open_transactions=None) == (
        "LSO 12 (HW 50); open transactions unknown: the status job could not describe the producers"
    )
    assert text(open_transactions=None) == "none open"  # LSO = HW: nothing can be open
    hanging = text(
        last_stable_offset=12,
        open_transactions=1,
        oldest_start_offset=12,
        oldest_age_ms=15 * 60 * 1000 + 1,
    )
    assert hanging.endswith(
        "last wrote 15 min before the snapshot; possibly hanging: idle longer than"
        " transaction.max.timeout.ms (15 min); storage-core topics describe names its producer"
    )
    at_the_limit = text(
        last_stable_offset=12, open_transactions=1, oldest_start_offset=12, oldest_age_ms=900_000
    )
    assert "hanging" not in at_the_limit


@pytest.mark.parametrize(
    ("fields", "cell"),
    [
        (
            {
                "last_stable_offset": 1990,
                "open_transactions": 1,
                "oldest_open_transaction_start_offset": 1990,
                "oldest_open_transaction_age_ms": 30_000,
            },
            '<td class="txn-open">LSO 1990 (HW 2072); 1 open since offset 1990; its producer'
            " last wrote 30 s before the snapshot</td></tr>",
        ),
        (
            {"last_stable_offset": 2072, "open_transactions": 0},
            '<td class="txn">none open</td></tr>',
        ),
        ({}, '<td class="txn">-</td></tr>'),
    ],
)
def test_the_page_has_a_transactions_column(
    tmp_path: Path, fields: dict[str, int], cell: str
) -> None:
    from tiered_storage_plugin import status

    from jobs.common.summary import RunSummary

    summary = RunSummary(job="cluster_status")
    summary.details.update(dag_id="tiering", run_id="manual__t", task_id="status")
    summary.partition("events-0", "ok", leader=2, high_watermark=2072, **fields)
    summary.finish()
    summary.write(tmp_path / "runs" / "tiering" / "manual__t" / "status" / "summary.json")
    page = status.status_page(
        status.read_summaries(tmp_path), docs_href=None, now=datetime.now(UTC)
    )
    assert '<th rowspan="2">transactions</th>' in page
    assert cell in page
