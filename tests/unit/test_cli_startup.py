"""What ``python -m storage_core.cli broker`` imports as it starts: the broker's own modules,
not hypothesis (which kio's phantom types import when it is installed, as in a development
install, pulling in pytest and trio: half a second of every broker start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def imported_modules(stderr: str) -> set[str]:
    """The module names of ``-X importtime``'s lines (``import time: self | total | name``)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


def test_the_broker_command_loads_the_broker_without_hypothesis(tmp_path: Path) -> None:
    missing = tmp_path / "server.properties"  # the broker's modules load before the config
    command = ["-X", "importtime", "-m", "storage_core.cli", "broker", "--config", str(missing)]
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert f"cannot read broker config {missing}" in done.stderr
    modules = imported_modules(done.stderr)
    assert {"storage_core.server.kafka_broker", "kio.static.primitive"} <= modules
    # (``hypothesis.strategies`` is listed: kio's attempt, refused at once)
    assert not modules & {"hypothesis", "pytest", "trio"}
