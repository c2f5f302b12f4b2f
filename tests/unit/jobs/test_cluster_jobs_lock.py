"""``delete_partitions`` and ``reconcile`` take one run lock per cluster: a second run while
the first holds it reports ``skipped`` and touches nothing (not even the cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import delete_partitions, reconcile
from jobs.common import cluster_lock_key, log_dir_locks

# Nothing listens here: a run that got past the lock would fail to connect.
UNREACHABLE = "127.0.0.1:9"


@pytest.mark.parametrize(
    ("module", "job"), [(delete_partitions, "delete_partitions"), (reconcile, "reconcile")]
)
def test_a_second_run_is_skipped_while_the_first_holds_the_lock(
    module: object, job: str, tmp_path: Path
) -> None:
    summary_path = tmp_path / "summary.json"
    argv = [
        "--bootstrap-server",
        UNREACHABLE,
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(summary_path),
        "--rsm-config",
        f"local.storage.dir={tmp_path / 'remote'}",
    ]
    with log_dir_locks(tmp_path / "locks", job, [cluster_lock_key(UNREACHABLE)], wait_s=0) as held:
        assert held is None
        code = module.main(argv)  # type: ignore[attr-defined]
    summary = json.loads(summary_path.read_text())
    assert (code, summary["status"]) == (0, "skipped")
    assert "another run holds" in summary["details"]["skipped"]


def test_runs_on_different_clusters_do_not_share_a_lock() -> None:
    assert cluster_lock_key("a:9092") != cluster_lock_key("b:9092")
