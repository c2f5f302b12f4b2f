"""The README's main command on the embedded default: ``python -m embedded.demo`` (what
``make demo`` runs) succeeds end to end, leaves the reports where it says, and stops every
process it started."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.embedded.process_tree import descendants
from tests.integration.embedded.test_airflow_ui import REPO, clean_env

pytestmark = pytest.mark.timeout(900)


def test_demo_tiers_consumes_expires_and_reports(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "embedded.demo", "--dir", str(work)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        env=clean_env(),
    )
    seen: set[int] = set()
    finished = threading.Event()

    def sample_descendants() -> None:  # what it starts, while it runs (not only when it prints)
        while not finished.wait(0.2):
            seen.update(descendants(demo.pid))

    sampler = threading.Thread(target=sample_descendants, daemon=True)
    sampler.start()
    lines = []
    assert demo.stdout is not None
    for raw in demo.stdout:
        lines.append(raw.decode(errors="replace"))
    finished.set()
    sampler.join(5)
    output = "".join(lines)
    assert demo.wait(60) == 0, output
    assert "Demo succeeded" in output

    steps = re.findall(r"\] (\d)/7 ", output)
    assert steps == [str(i) for i in range(1, 8)], output
    from_remote = int(re.search(r"; (\d+) came from the remote tier", output).group(1))
    assert from_remote > 0
    assert re.search(r"copy_segments: ok in [\d.]+ s; .*segments_copied=\d+", output)
    assert re.search(r"expire_remote: ok in [\d.]+ s; .*segments_deleted=\d+", output)

    # the reports it names exist: Data Docs and summaries of both DAGs, the retention report
    named = re.findall(r"(/\S+\.(?:html|json))", output)
    assert len(named) == 5
    for path in map(Path, named):
        assert path.is_file() and path.is_relative_to(work)
    report = json.loads(Path(next(p for p in named if p.endswith("report.json"))).read_text())
    assert report["failed"] == [] and set(report["jobs"]) == {
        "reconcile",
        "expire_remote",
        "quality",
    }

    # it started a broker, Airflow commands and jobs, and stopped all of them
    assert len(seen) >= 3
    assert processes_mentioning(str(work)) == []


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(cmdline)
    return found


def test_demo_refuses_a_directory_it_did_not_create(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    result = subprocess.run(
        [sys.executable, "-m", "embedded.demo", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "was not created by the embedded cluster" in result.stderr
    assert precious.read_text() == "keep me"
