"""A broker asked for what it cannot honour (GSSAPI or OAUTHBEARER, Kerberos settings, a
broker-wide JAAS config, an authorizer other than Kafka's AclAuthorizer, Java's TLS plumbing, a
JKS store) refuses to start rather than ignore it.

The real ``storage-core broker`` command is started with one security setting each time: it
must exit non-zero before listening, with one ``error:`` line naming the setting.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embedded.ports import free_port

pytestmark = pytest.mark.timeout(120)

START_TIMEOUT_S = 60.0


def _start(tmp_path: Path, settings: dict[str, str]) -> tuple[int, list[str], int]:
    """Exit code, stderr lines that say ``error:``, and the port that was asked for."""
    port = free_port()
    props = {
        "broker.id": "0",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(tmp_path / "kafka-logs"),
        **{k: v.replace("{port}", str(port)) for k, v in settings.items()},
    }
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    done = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        check=False,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return done.returncode, errors, port


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:{port}"},
            "sasl.enabled.mechanisms (Kafka's default)=GSSAPI asks for GSSAPI",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:{port}",
                "sasl.enabled.mechanisms": "PLAIN",
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set",
        ),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER"}, "names OAUTHBEARER"),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name=kafka"),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:0",
                "ssl.keystore.location": "/etc/kafka/broker.jks",
                "ssl.keystore.password": "s3cret-keystore-pw",
            },
            "ssl.keystore.type=JKS (Kafka's default) is not supported",
        ),
        ({"ssl.engine.factory.class": "com.example.Engines"}, "ssl.engine.factory.class"),
        ({"ssl.trustmanager.algorithm": "SunPKIX2"}, "ssl.trustmanager.algorithm=SunPKIX2"),
        (
            {"listener.name.ssl.ssl.secure.random.implementation": "SHA1PRNG"},
            "listener.name.ssl.ssl.secure.random.implementation=SHA1PRNG",
        ),
        ({"listener.security.protocol.map": "PLAINTEXT:SASL_SSL"}, "listener.security.protocol"),
        ({"sasl.jaas.config": "PlainLoginModule required;"}, "sasl.jaas.config=<hidden>"),
        (
            {"listener.name.plaintext.oauthbearer.sasl.jaas.config": "PlainLoginModule required;"},
            "listener.name.plaintext.oauthbearer.sasl.jaas.config=<hidden>",
        ),
        (  # Kafka's message: the SASL_PLAINTEXT listener it names does not exist
            {"security.inter.broker.protocol": "SASL_PLAINTEXT"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
        (
            {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
            "authorizer.class.name",
        ),
        (
            {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"},
            "authorizer.class.name=kafka.security.auth.SimpleAclAuthorizer",
        ),
    ],
)
def test_security_settings_stop_the_broker_with_one_line(
    tmp_path: Path, settings: dict[str, str], named: str
) -> None:
    code, errors, port = _start(tmp_path, settings)

    assert code != 0
    assert len(errors) == 1, errors
    assert named in errors[0]
    assert "PlainLoginModule" not in errors[0]  # a JAAS config may hold a password
    assert "s3cret" not in errors[0]
    assert not _listening(port)


def test_kafkas_sample_protocol_map_and_empty_defaults_still_start(tmp_path: Path) -> None:
    """Kafka's sample server.properties maps unused listeners to SSL/SASL; that is harmless."""
    port = free_port()
    config = tmp_path / "server.properties"
    config.write_text(
        f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={tmp_path / 'logs'}\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "authorizer.class.name=\nsecurity.inter.broker.protocol=PLAINTEXT\n"
        "ssl.keymanager.algorithm=SunX509\nssl.trustmanager.algorithm=PKIX\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "storage_core.cli", "broker", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None or _listening(port):
                break
            time.sleep(0.2)
        assert process.poll() is None
        assert _listening(port)
    finally:
        process.terminate()
        process.wait(timeout=30)
