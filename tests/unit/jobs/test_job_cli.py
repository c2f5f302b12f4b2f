"""The job contract of copy_segments and expire_remote: ``--help`` documents the job, bad
options exit 2, a failure is one ``<job>: error:`` line, exit 1 and a ``failed`` summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embedded.ports import free_port
from jobs import copy_segments, expire_remote


@pytest.mark.parametrize(
    ("job", "own_option"),
    [(copy_segments, "--copy-timeout-s"), (expire_remote, "--num-work-units")],
)
def test_help_documents_the_job(job, own_option: str, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit) as exc:
        job.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--bootstrap-server", "--log-dir", "--summary-path", "--dry-run", own_option):
        assert option in out
    assert f"python -m jobs.{job.JOB}" in out


def test_bad_options_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        copy_segments.main(["--num-work-units", "0", "--log-dir", "/tmp"])
    assert exc.value.code == 2
    assert "--num-work-units must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        copy_segments.main(["--copy-timeout-s", "-5"])


@pytest.mark.parametrize("job", [copy_segments, expire_remote])
def test_an_unreachable_cluster_is_one_clear_line_and_a_failed_summary(  # type: ignore[no-untyped-def]
    job, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary_path = tmp_path / "summary.json"
    argv = [
        "--bootstrap-server",
        f"127.0.0.1:{free_port()}",
        "--log-dir",
        str(tmp_path),
        "--lock-dir",
        str(tmp_path / "locks"),
        "--summary-path",
        str(summary_path),
    ]
    assert job.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{job.JOB}: error: cannot connect to broker 127.0.0.1:")
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "failed"
    assert "BrokerUnreachableError" in summary["errors"][0]["error"]
