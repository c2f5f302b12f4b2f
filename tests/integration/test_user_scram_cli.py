"""``storage-core user-scram`` against a real broker process: add a credential from a password
file, describe it as kafka-configs.sh prints it, delete it; the broker's errors come back as
one line naming the user; and no password or salted password reaches the command line."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from storage_core.cli import main
from storage_core.tools.user_scram import UserScramError, run_user_scram
from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("user-scram")) as process:
        yield process


def test_add_describe_delete(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password_file = tmp_path / "pw"
    password_file.write_text("s3cret-pass\n")
    common = ["user-scram", "--bootstrap-server", broker.bootstrap]
    assert (
        main(
            [
                *common,
                "--add",
                "alice",
                "--mechanism",
                "SCRAM-SHA-256",
                "--iterations",
                "8192",
                "--password-file",
                str(password_file),
            ]
        )
        == 0
    )
    assert main([*common, "--describe", "alice"]) == 0
    out = capsys.readouterr().out
    assert "Completed updating config for user alice." in out
    assert (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192"
        in out
    )
    assert "s3cret" not in out
    # confluent-kafka's admin client sees what the tool wrote
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: futures need it
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=15)
    assert [(i.mechanism.value, i.iterations) for i in described.scram_credential_infos] == [
        (1, 8192)
    ]
    assert main([*common, "--delete", "alice", "--mechanism", "SCRAM-SHA-256"]) == 0
    assert main([*common, "--describe", "alice"]) == 1
    assert "Attempt to describe a user credential that does not exist: alice" in (
        capsys.readouterr().out
    )
    assert main([*common, "--delete", "alice", "--mechanism", "SCRAM-SHA-256"]) == 1
    assert "user alice: Attempt to delete a user credential that does not exist" in (
        capsys.readouterr().err
    )


def test_prompted_password_must_match_and_iterations_are_bounded(broker: BrokerProcess) -> None:
    answers = iter(["one", "two"])
    with pytest.raises(UserScramError, match="differ"):
        run_user_scram(
            bootstrap_server=broker.bootstrap,
            command_config=None,
            add="bob",
            delete=None,
            describe=None,
            mechanism="SCRAM-SHA-512",
            iterations=4096,
            password_file=None,
            out=io.StringIO(),
            prompt=lambda _text: next(answers),
        )
    with pytest.raises(UserScramError, match="outside"):
        run_user_scram(
            bootstrap_server=broker.bootstrap,
            command_config=None,
            add="bob",
            delete=None,
            describe=None,
            mechanism="SCRAM-SHA-512",
            iterations=20000,
            password_file=None,
            out=io.StringIO(),
            prompt=lambda _text: "pw",
        )
    answers = iter(["pw", "pw"])
    out = io.StringIO()
    assert (
        run_user_scram(
            bootstrap_server=broker.bootstrap,
            command_config=None,
            add="bob",
            delete=None,
            describe=None,
            mechanism="SCRAM-SHA-512",
            iterations=4096,
            password_file=None,
            out=out,
            prompt=lambda _text: next(answers),
        )
        == 0
    )
    assert out.getvalue() == "Completed updating config for user bob.\n"


def test_the_password_is_not_a_command_line_option() -> None:
    with pytest.raises(SystemExit):
        main(["user-scram", "--add", "x", "--mechanism", "SCRAM-SHA-256", "--password", "pw"])
