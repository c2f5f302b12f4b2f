"""Every `storage-core` client command takes `--command-config` (Kafka's client.properties):
on a SASL listener the tools authenticate with it, without it the broker refuses them, and a
settings file that holds a password while others may read it is refused before anything is
sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from embedded.ports import free_port
from storage_core.cli import main
from tests.broker_process import BrokerProcess
from tests.integration.test_sasl_authentication import ADMIN, sasl_overrides


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    directory = tmp_path_factory.mktemp("cli-sasl")
    with BrokerProcess(directory, port=port, overrides=sasl_overrides(port)) as process:
        yield process


def _admin_properties(tmp_path: Path) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\n"
    )
    path.chmod(0o600)
    return path


def test_topics_produce_and_consume_authenticate_with_the_command_config(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--bootstrap-server", broker.bootstrap, "--command-config"]
    config = str(_admin_properties(tmp_path))
    assert main(["topics", "create", *common, config, "--topic", "audited"]) == 0
    assert main(["produce", *common, config, "--topic", "audited", "--count", "5"]) == 0
    capsys.readouterr()
    consume = ["consume", *common, config, "--topic", "audited", "--offset", "earliest"]
    assert main([*consume, "--count", "5"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["topics", "list", *common, config]) == 0
    assert "audited" in capsys.readouterr().out.split()

    # without it the broker closes the connection before any request is answered
    assert main(["topics", "list", "--bootstrap-server", broker.bootstrap]) == 1
    assert capsys.readouterr().err.startswith("error:")


def test_a_command_config_others_may_read_is_refused_naming_the_fix(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _admin_properties(tmp_path)
    config.chmod(0o644)
    command = ["topics", "list", "--bootstrap-server", broker.bootstrap]
    assert main([*command, "--command-config", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"chmod 600 {config}" in err
    assert ADMIN[1] not in err
