"""An S3 endpoint for tests: moto's server as a subprocess on a free loopback port.

    with S3Server(tmp_path) as s3:           # http://127.0.0.1:<port>
        s3.create_bucket("tiered")
        s3.stop()                              # the store goes away (an outage)
        s3.start()                             # back on the same port, empty

moto keeps its objects in memory: a restart comes back empty. Parts of multipart uploads
may be as small as ``min_part_size_bytes`` (real S3 wants 5 MiB) so tests can use small parts.
Output of the process goes to ``<dir>/moto.log``. Credentials come from the environment
(``aws_env``), never from library code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3

from embedded.ports import free_port

BUCKET = "tiered-storage"  # the bucket of the ``s3`` fixture (tests/integration/conftest.py)
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0

# What the standard AWS credential chain reads; moto accepts any values.
AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    def __init__(
        self, directory: Path, *, port: int | None = None, min_part_size_bytes: int = 1024
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.min_part_size_bytes = min_part_size_bytes
        self.output_path = directory / "moto.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("the S3 server is already running")
        self.directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(AWS_TEST_ENV)
        env["S3_UPLOAD_PART_MIN_SIZE"] = str(self.min_part_size_bytes)
        with open(self.output_path, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"moto server exited with {self.process.returncode}:"
                    f" {self.output_path.read_text()[-2000:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server did not listen on {self.port} in {START_TIMEOUT_S}s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> Any:
        """A plain boto3 client of this endpoint (for setting up and checking tests)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=AWS_TEST_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
        )

    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
