"""The tiered-storage connection carries how the jobs authenticate: Airflow's Login and
Password fields and the protocol, mechanism and CA in the extra. A job receives them as a
client settings file readable only by its user, named in its environment, gone after the
run; the password never reaches the job's command line or the settings' repr."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.security_support import TestPki

SECRET = "pipeline-pw-3b1f"


def connection(extra: dict[str, Any], **fields: Any) -> str:
    return json.dumps(
        {"conn_type": "generic", "host": "b1:9093", "extra": {"log_dirs": ["/d"], **extra}} | fields
    )


def settings_of(monkeypatch: pytest.MonkeyPatch, value: str) -> Any:
    from tiered_storage_plugin.hooks import TieredStorageHook

    monkeypatch.setenv("AIRFLOW_CONN_TS_SECURED", value)
    return TieredStorageHook("ts_secured").settings()


def test_a_sasl_ssl_connection_reaches_the_job_as_a_private_client_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tiered_storage_plugin.client_security import CLIENT_CONFIG_ENV, client_config_environment

    from jobs.common import job_parser, parse_job_args
    from jobs.common.clients import connection_config
    from storage_core.security.kafka_principal import SecurityProtocol

    ca = TestPki(tmp_path).ca_pem
    settings = settings_of(
        monkeypatch,
        connection(
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "scram-sha-512",
                "ssl_ca_location": str(ca),
            },
            login="pipeline",
            password=SECRET,
        ),
    )
    assert SECRET not in repr(settings)
    assert SECRET not in " ".join(settings.job_arguments())
    with client_config_environment(settings.security) as env:
        path = Path(env[CLIENT_CONFIG_ENV])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        args = parse_job_args(
            job_parser("status", None), settings.job_arguments(), job="status", environ=env
        )
        security = connection_config(args).security
        assert security.security_protocol is SecurityProtocol.SASL_SSL
        assert security.settings["sasl.mechanism"] == "SCRAM-SHA-512"
        assert security.settings["sasl.username"] == "pipeline"
        assert security.settings["ssl.truststore.location"] == str(ca)
    assert not path.exists() and not path.parent.exists()


def test_a_plaintext_connection_gives_the_job_no_client_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tiered_storage_plugin.client_security import client_config_environment

    settings = settings_of(monkeypatch, connection({}))
    with client_config_environment(settings.security) as env:
        assert env == {}


@pytest.mark.parametrize(
    ("extra", "fields", "named"),
    [
        ({"security_protocol": "SASL_SSL", "sasl_password": SECRET}, {}, "'sasl_password'"),
        (
            {"security_protocol": "SASL_PLAINTEXT"},
            {"login": "p", "password": SECRET},
            "sasl_mechanism",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
            {"login": "p"},
            "Password",
        ),
        ({"security_protocol": "GSSAPI"}, {}, "security_protocol"),
        ({"sasl_mechanism": "PLAIN", "ssl_ca_location": "/ca.pem"}, {}, "ssl_ca_location"),
    ],
)
def test_an_incomplete_connection_is_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], fields: dict[str, str], named: str
) -> None:
    from tiered_storage_plugin.hooks import TieredStorageConnectionError

    with pytest.raises(TieredStorageConnectionError, match=named) as refused:
        settings_of(monkeypatch, connection(extra, **fields))
    assert SECRET not in str(refused.value)


def test_a_client_config_others_may_read_is_refused_when_it_holds_a_password(
    tmp_path: Path,
) -> None:
    from storage_core.client.client_properties import load_client_properties
    from storage_core.errors import InvalidConfigError

    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.password={SECRET}\n")
    path.chmod(0o644)
    with pytest.raises(InvalidConfigError, match=r"sasl.password .*mode 0644.*chmod 600") as bad:
        load_client_properties(path)
    assert SECRET not in str(bad.value)
    path.chmod(0o600)
    assert load_client_properties(path)["security.protocol"] == "SASL_PLAINTEXT"
    public = tmp_path / "public.properties"
    public.write_text("security.protocol=SSL\n")
    public.chmod(0o644)
    assert load_client_properties(public) == {"security.protocol": "SSL"}
