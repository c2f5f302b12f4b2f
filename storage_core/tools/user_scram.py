"""``storage-core user-scram``: add, delete and describe users' SCRAM credentials over the
Kafka protocol (AlterUserScramCredentials / DescribeUserScramCredentials), what
``kafka-configs.sh --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'`` does:

    storage-core user-scram --bootstrap-server H:P --command-config client.properties \\
        --add alice --mechanism SCRAM-SHA-256 --iterations 8192 [--password-file F]
    storage-core user-scram ... --delete alice --mechanism SCRAM-SHA-256
    storage-core user-scram ... --describe [alice ...]

The password comes from ``--password-file`` (its first line) or a prompt without echo, never
from the command line; the tool salts it (PBKDF2 with a random 32-byte salt) and sends only the
salted password. ``--command-config`` holds the client settings with Kafka's names:
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``ssl.truststore.*``,
``sasl.mechanism`` and ``sasl.jaas.config`` (a PlainLoginModule or ScramLoginModule with
username and password). Output follows
kafka-configs.sh: ``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192``.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from kio.schema.alter_user_scram_credentials.v0 import request as alter_request
from kio.schema.alter_user_scram_credentials.v0 import response as alter_response
from kio.schema.describe_user_scram_credentials.v0 import request as describe_request
from kio.schema.describe_user_scram_credentials.v0 import response as describe_response

from storage_core.client.client_properties import load_client_properties
from storage_core.client.connection import ConnectionConfig, KafkaConnection, parse_host_port
from storage_core.errors import InvalidConfigError
from storage_core.security.client_transport import ClientSecurityConfig, open_socket
from storage_core.security.sasl_client_authenticator import SaslAuthenticationFailedError
from storage_core.security.scram.scram_credential import SALT_BYTES
from storage_core.security.scram.scram_formatter import ScramFormatter
from storage_core.security.scram.scram_mechanism import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
)

DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default when iterations are not given
MAX_PASSWORD_FILE_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0


class UserScramError(ValueError):
    """A bad option or a refusal by the broker; the message says which and what to do."""


def client_settings(path: Path | None) -> dict[str, str]:
    """The settings of ``--command-config`` (``load_client_properties``: refused when it holds
    a secret that other users may read)."""
    if path is None:
        return {}
    try:
        return load_client_properties(path)
    except InvalidConfigError as error:
        raise UserScramError(f"--command-config: {error}") from None


def open_connection(bootstrap_server: str, settings: Mapping[str, str]) -> KafkaConnection:
    """A connection to the first bootstrap server, with the settings' security protocol (TLS
    and SASL as ``client_transport`` does them)."""
    host, port = parse_host_port(bootstrap_server.split(",", maxsplit=1)[0])
    security = ClientSecurityConfig.from_properties(settings, where="--command-config")
    try:
        sock = open_socket(host, port, security, timeout_s=CONNECT_TIMEOUT_S)
    except SaslAuthenticationFailedError as error:
        raise UserScramError(str(error)) from None
    except OSError as error:
        raise UserScramError(
            f"cannot connect to {host}:{port}: {error.strerror or error}; check"
            " --bootstrap-server and that the broker runs"
        ) from None
    return KafkaConnection(
        sock, host=host, port=port, config=ConnectionConfig(client_id="storage-core-user-scram")
    )


def read_password(password_file: Path | None, prompt: Callable[[str], str]) -> str:
    if password_file is not None:
        try:
            with password_file.open("rb") as file:
                data = file.read(MAX_PASSWORD_FILE_BYTES + 1)
        except OSError as error:
            raise UserScramError(
                f"cannot read --password-file {password_file}: {error.strerror}"
            ) from None
        if len(data) > MAX_PASSWORD_FILE_BYTES:
            raise UserScramError(f"--password-file is larger than {MAX_PASSWORD_FILE_BYTES} bytes")
        password = data.decode("utf-8").splitlines()[0] if data.strip() else ""
    else:
        password = prompt("Password: ")
        if password != prompt("Password again: "):
            raise UserScramError("the two passwords differ; nothing was changed")
    if not password:
        raise UserScramError("the password is empty; nothing was changed")
    return password


def _mechanism(name: str) -> ScramMechanism:
    mechanism = ScramMechanism.for_mechanism_name(name.strip().upper())
    if mechanism is None:
        raise UserScramError(f"--mechanism {name}: use SCRAM-SHA-256 or SCRAM-SHA-512")
    return mechanism


def run_user_scram(
    *,
    bootstrap_server: str,
    command_config: Path | None,
    add: str | None,
    delete: str | None,
    describe: Sequence[str] | None,
    mechanism: str | None,
    iterations: int,
    password_file: Path | None,
    out: TextIO,
    prompt: Callable[[str], str] = getpass.getpass,
) -> int:
    settings = client_settings(command_config)
    if add is not None or delete is not None:
        if mechanism is None:
            raise UserScramError("--add and --delete need --mechanism SCRAM-SHA-256|SCRAM-SHA-512")
        scram = _mechanism(mechanism)
        if add is not None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise UserScramError(
                f"--iterations {iterations} is outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
            )
        upsertions: tuple[alter_request.ScramCredentialUpsertion, ...] = ()
        deletions: tuple[alter_request.ScramCredentialDeletion, ...] = ()
        if add is not None:
            password = read_password(password_file, prompt)
            salt = os.urandom(SALT_BYTES)
            salted = ScramFormatter(scram).salted_password(password, salt, iterations)
            upsertions = (
                alter_request.ScramCredentialUpsertion(
                    name=add,
                    mechanism=scram.type_id,  # type: ignore[arg-type]
                    iterations=iterations,  # type: ignore[arg-type]
                    salt=salt,
                    salted_password=salted,
                ),
            )
        else:
            deletions = (
                alter_request.ScramCredentialDeletion(
                    name=str(delete),
                    mechanism=scram.type_id,  # type: ignore[arg-type]
                ),
            )
        with open_connection(bootstrap_server, settings) as connection:
            response = connection.send(
                alter_request.AlterUserScramCredentialsRequest(
                    deletions=deletions, upsertions=upsertions
                ),
                alter_response.AlterUserScramCredentialsResponse,
            )
        for altered in response.results:
            if int(altered.error_code) != 0:
                raise UserScramError(
                    f"user {altered.user}: {altered.error_message} (error"
                    f" {int(altered.error_code)} {altered.error_code.name})"
                )
        print(f"Completed updating config for user {add if add is not None else delete}.", file=out)
        return 0
    users = tuple(describe_request.UserName(name=u) for u in describe or ())
    with open_connection(bootstrap_server, settings) as connection:
        described = connection.send(
            describe_request.DescribeUserScramCredentialsRequest(users=users or None),
            describe_response.DescribeUserScramCredentialsResponse,
        )
    if int(described.error_code) != 0:
        raise UserScramError(
            f"DescribeUserScramCredentials failed: {described.error_message} (error"
            f" {int(described.error_code)} {described.error_code.name})"
        )
    status = 0
    for result in described.results:
        if int(result.error_code) != 0:
            print(f"user {result.user}: {result.error_message}", file=out)
            status = 1
            continue
        credentials = ", ".join(
            f"{_name(int(info.mechanism))}=iterations={int(info.iterations)}"
            for info in result.credential_infos
        )
        print(
            f"SCRAM credential configs for user-principal '{result.user}' are {credentials}",
            file=out,
        )
    return status


def _name(type_id: int) -> str:
    mechanism = ScramMechanism.from_type(type_id)
    return mechanism.mechanism_name if mechanism is not None else f"UNKNOWN({type_id})"
