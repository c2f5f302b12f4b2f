"""What the security tests share: KafkaJS, installed once per session with npm (skipped, with
the reason, where node or npm is absent or the registry cannot be reached)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NPM_TIMEOUT_S = 180


@pytest.fixture(scope="session")
def kafkajs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node_modules directory holding kafkajs."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("KafkaJS needs node and npm, and this machine lacks them")
    directory = tmp_path_factory.mktemp("kafkajs")
    try:
        install = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "kafkajs@2"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm install kafkajs did not finish in {NPM_TIMEOUT_S} s (registry unreachable?)"
        )
    if install.returncode != 0:
        reason = install.stderr[-500:]
        pytest.skip(f"npm install kafkajs failed (registry unreachable?): {reason}")
    return directory / "node_modules"
