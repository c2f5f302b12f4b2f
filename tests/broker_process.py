"""Run a real broker process (``storage-core broker``) on a free loopback port for a test.

    with BrokerProcess(tmp_path) as broker:
        KafkaProducer(bootstrap_servers=broker.bootstrap)...
        broker.restart()            # SIGTERM, then start again on the same port and dirs
        broker.kill(); broker.start()   # SIGKILL: an unclean shutdown

Output of the process goes to ``<dir>/broker.log`` so a failing test can show it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from embedded.ports import free_port

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 30.0


class BrokerProcess:
    def __init__(
        self,
        directory: Path,
        *,
        overrides: dict[str, str] | None = None,
        port: int | None = None,
        log_level: str = "INFO",
    ) -> None:
        self.directory = directory
        self.log_level = log_level
        self.port = port or free_port()
        self.log_dir = directory / "kafka-logs"
        self.config_path = directory / "server.properties"
        self.output_path = directory / "broker.log"
        props = {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "offsets.topic.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(overrides or {})
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start and wait until the broker serves: its port accepts connections as soon as it is
        bound (clients wait in the backlog while it starts), so readiness is the line it prints
        once it has started."""
        started_at = self.output_path.stat().st_size if self.output_path.exists() else 0
        output = self.output_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storage_core.cli",
                "--log-level",
                self.log_level,
                "broker",
                "--config",
                str(self.config_path),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        output.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RuntimeError(f"broker exited with {code}:\n{self.output()}")
            if self._serving_since(started_at):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {timeout_s}s:\n{self.output()}")

    def _serving_since(self, offset: int) -> bool:
        with self.output_path.open("rb") as output:
            output.seek(offset)
            return b" listening on " in output.read()

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"broker ignored SIGTERM:\n{self.output()}") from None
        self.process = None
        return code

    def kill(self) -> None:
        """SIGKILL: an unclean shutdown."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def output(self) -> str:
        try:
            return self.output_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None:
            try:
                self.stop()
            except RuntimeError:
                self.kill()
