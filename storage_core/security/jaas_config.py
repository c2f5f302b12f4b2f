"""The JAAS configuration a ``sasl.jaas.config`` setting holds (Kafka's ``JaasConfig``):

    <login module class> <flag> [<option>=<value> ...];

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="pw";
    org.apache.kafka.common.security.scram.ScramLoginModule required
        username="broker" password="broker-secret";

A value is a word (letters, digits and ``_-.$/:@``) or a string in double or single quotes, in
which a backslash escapes the next character. The flag is one of required, requisite,
sufficient, optional. A ``sasl.jaas.config`` holds exactly one login module, as Kafka requires.
Errors name the problem and the position, never the value (it may be a password).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from storage_core.errors import InvalidConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
MAX_JAAS_CONFIG_CHARS = 1024 * 1024
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.$/:@")
USER_PREFIX = "user_"  # PLAIN's users on the broker: user_<name>="<password>"


@dataclass(frozen=True, slots=True, kw_only=True)
class AppConfigurationEntry:
    """One login module with its flag and options (Java's ``AppConfigurationEntry``)."""

    login_module: str
    flag: str
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __repr__(self) -> str:  # options hold passwords: never printed
        return f"AppConfigurationEntry(login_module={self.login_module!r}, flag={self.flag!r})"

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users on the broker: ``user_<name>`` options -> {name: password}."""
        return {
            key[len(USER_PREFIX) :]: value
            for key, value in self.options.items()
            if key.startswith(USER_PREFIX) and len(key) > len(USER_PREFIX)
        }


def parse_jaas_config(text: str, *, setting: str = "sasl.jaas.config") -> AppConfigurationEntry:
    """The one login module of a ``sasl.jaas.config`` value; InvalidConfigError naming
    ``setting`` if the text is not one ``<module> <flag> options;`` entry."""
    entries = parse_jaas_entries(text, setting=setting)
    if len(entries) != 1:
        raise InvalidConfigError(
            f"{setting} must contain exactly one login module, found {len(entries)}"
        )
    return entries[0]


def parse_jaas_entries(text: str, *, setting: str) -> list[AppConfigurationEntry]:
    if len(text) > MAX_JAAS_CONFIG_CHARS:
        raise InvalidConfigError(f"{setting} is longer than {MAX_JAAS_CONFIG_CHARS} characters")
    tokens = _tokens(text, setting)
    entries: list[AppConfigurationEntry] = []
    i = 0
    while i < len(tokens):
        module, kind = tokens[i]
        if kind != "word":
            raise InvalidConfigError(f"{setting}: expected a login module class name")
        if i + 1 >= len(tokens) or tokens[i + 1][0].lower() not in FLAGS:
            raise InvalidConfigError(
                f"{setting}: login module {module} needs a flag (required, requisite,"
                " sufficient or optional) after its name"
            )
        flag = tokens[i + 1][0].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise InvalidConfigError(f"{setting}: login module {module} must end with ';'")
            token, kind = tokens[i]
            if kind == ";":
                i += 1
                break
            if (
                kind != "word"
                or i + 2 >= len(tokens)
                or tokens[i + 1][1] != "="
                or tokens[i + 2][1] not in ("word", "quoted")
            ):
                raise InvalidConfigError(
                    f"{setting}: login module {module}: expected option=value or ';'"
                    f" after {len(options)} option(s)"
                )
            options[token] = tokens[i + 2][0]
            i += 3
        entries.append(
            AppConfigurationEntry(login_module=module, flag=flag, options=MappingProxyType(options))
        )
    return entries


def _tokens(text: str, setting: str) -> list[tuple[str, str]]:
    """(text, kind) with kind "word", "quoted", "=" or ";"."""
    tokens: list[tuple[str, str]] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            tokens.append((c, c))
            i += 1
        elif c in "\"'":
            quote = c
            i += 1
            out: list[str] = []
            while True:
                if i >= n:
                    raise InvalidConfigError(f"{setting}: a quoted value is not closed")
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    out.append(text[i + 1])
                    i += 2
                elif ch == quote:
                    i += 1
                    break
                else:
                    out.append(ch)
                    i += 1
            tokens.append(("".join(out), "quoted"))
        elif c in _WORD_CHARS:
            start = i
            while i < n and text[i] in _WORD_CHARS:
                i += 1
            tokens.append((text[start:i], "word"))
        else:
            raise InvalidConfigError(
                f"{setting}: unexpected character at position {i}; quote values that hold"
                " characters other than letters, digits and _-.$/:@"
            )
    return tokens
