"""DescribeUserScramCredentials and AlterUserScramCredentials as Kafka's ZooKeeper mode serves
them (``ZkAdminManager.describeUserScramCredentials`` / ``alterUserScramCredentials``, KIP-554),
over the users' config entities (``zk.config_entity``). Any broker serves both: an Alter
writes ZooKeeper (or the single-node store) directly and notifies every broker, so that
kafka-python, which sends Alter to any broker, works as well as librdkafka, which sends it to
the controller.

Describe, per user (results in request order, each user once; all users sorted by name):
    a user with SCRAM credentials             NONE, [(mechanism type, iterations)...]
    asked by name and without any             RESOURCE_NOT_FOUND (91)
    "" or asked twice                         RESOURCE_NOT_FOUND / DUPLICATE_RESOURCE (92)

Alter, per user (a user with any bad entry gets one error and nothing of it is written):
    "" as name                                UNACCEPTABLE_CREDENTIAL (93) "Username must not
                                              be empty"
    an unknown mechanism type                 UNSUPPORTED_SASL_MECHANISM (33)
    iterations < 4096 / > 16384               UNACCEPTABLE_CREDENTIAL "Too few/many iterations"
    one (user, mechanism) twice               DUPLICATE_RESOURCE "A user credential cannot be
                                              altered twice in the same request"
    deleting a credential that does not exist RESOURCE_NOT_FOUND
The broker stores StoredKey and ServerKey derived from the client's salted password.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from storage_core.security.sanitizer import desanitize, sanitize
from storage_core.security.scram.scram_credential import (
    InvalidScramCredentialError,
    ScramCredential,
    credential_from_string,
    credential_to_string,
)
from storage_core.security.scram.scram_mechanism import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
)
from storage_core.zk.config_entity import ConfigEntityZkStore

logger = logging.getLogger(__name__)

USERNAME_MUST_NOT_BE_EMPTY = "Username must not be empty"
UNKNOWN_SCRAM_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW_ITERATIONS = "Too few iterations"
TOO_MANY_ITERATIONS = "Too many iterations"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserResult:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    credential_infos: tuple[tuple[int, int], ...] = ()
    """(mechanism type, iterations) per credential (Describe only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password stays out of logs
        return f"Upsertion(name={self.name!r}, mechanism={self.mechanism})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Deletion:
    name: str
    mechanism: int


def describe(store: ConfigEntityZkStore, users: Sequence[str] | None) -> list[UserResult]:
    if not users:
        results = []
        for sanitized in store.get_all_users():
            result = _describe_one(desanitize(sanitized), store.get_user_config(sanitized), False)
            if result is not None:
                results.append(result)
        return sorted(results, key=lambda r: r.user)
    counts = Counter(users)
    by_user: dict[str, UserResult] = {}
    for user in dict.fromkeys(users):
        if not user:
            by_user[user] = UserResult(
                user=user,
                error_code=ErrorCode.resource_not_found,
                error_message="Cannot describe SCRAM credentials for empty username",
            )
        elif counts[user] > 1:
            by_user[user] = UserResult(
                user=user,
                error_code=ErrorCode.duplicate_resource,
                error_message="Cannot describe SCRAM credentials for the same user twice in a"
                f" single request: {user}",
            )
        else:
            result = _describe_one(user, store.get_user_config(sanitize(user)), True)
            if result is not None:
                by_user[user] = result
    return [by_user[user] for user in dict.fromkeys(users)]


def _describe_one(user: str, config: dict[str, str], explicit: bool) -> UserResult | None:
    infos = []
    for mechanism in ScramMechanism:
        text = config.get(mechanism.mechanism_name)
        if text is None:
            continue
        try:
            infos.append((mechanism.type_id, credential_from_string(text).iterations))
        except InvalidScramCredentialError as error:
            return UserResult(
                user=user,
                error_code=ErrorCode.unknown_server_error,
                error_message=f"Error retrieving credentials: {error}",
            )
    if infos:
        return UserResult(user=user, credential_infos=tuple(infos))
    if explicit:
        return UserResult(
            user=user,
            error_code=ErrorCode.resource_not_found,
            error_message=f"Attempt to describe a user credential that does not exist: {user}",
        )
    return None


def alter(
    store: ConfigEntityZkStore, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]
) -> list[UserResult]:
    results: list[UserResult] = []
    illegal: dict[str, tuple[ErrorCode, str]] = {}
    for deletion in deletions:
        if not deletion.name:
            illegal[deletion.name] = (ErrorCode.unacceptable_credential, USERNAME_MUST_NOT_BE_EMPTY)
        elif ScramMechanism.from_type(deletion.mechanism) is None:
            illegal[deletion.name] = (ErrorCode.unsupported_sasl_mechanism, UNKNOWN_SCRAM_MECHANISM)
    for upsertion in upsertions:
        if not upsertion.name:
            illegal[upsertion.name] = (
                ErrorCode.unacceptable_credential,
                USERNAME_MUST_NOT_BE_EMPTY,
            )
        elif ScramMechanism.from_type(upsertion.mechanism) is None:
            illegal[upsertion.name] = (
                ErrorCode.unsupported_sasl_mechanism,
                UNKNOWN_SCRAM_MECHANISM,
            )
        elif upsertion.iterations < MIN_ITERATIONS:
            illegal[upsertion.name] = (ErrorCode.unacceptable_credential, TOO_FEW_ITERATIONS)
        elif upsertion.iterations > MAX_ITERATIONS:
            illegal[upsertion.name] = (ErrorCode.unacceptable_credential, TOO_MANY_ITERATIONS)
    for user, (code, message) in illegal.items():
        results.append(UserResult(user=user, error_code=code, error_message=message))
    pairs = [(u.name, u.mechanism) for u in upsertions if u.name not in illegal] + [
        (d.name, d.mechanism) for d in deletions if d.name not in illegal
    ]
    duplicated = {user for (user, _m), count in Counter(pairs).items() if count > 1}
    for user in sorted(duplicated):
        results.append(
            UserResult(
                user=user,
                error_code=ErrorCode.duplicate_resource,
                error_message="A user credential cannot be altered twice in the same request",
            )
        )
    candidates = list(dict.fromkeys(user for user, _m in pairs if user not in duplicated))
    for user in candidates:
        results.append(_alter_user(store, user, upsertions, deletions))
    return results


def _alter_user(
    store: ConfigEntityZkStore,
    user: str,
    upsertions: Sequence[Upsertion],
    deletions: Sequence[Deletion],
) -> UserResult:
    mine_deleted = [d for d in deletions if d.name == user]
    mine_upserted = [u for u in upsertions if u.name == user]
    missing: list[str] = []

    def change(config: dict[str, str]) -> dict[str, str]:
        missing.clear()
        for deletion in mine_deleted:
            name = _mechanism(deletion.mechanism).mechanism_name
            if name not in config:
                missing.append(name)
            config.pop(name, None)
        if missing:
            raise _NothingToDeleteError
        for upsertion in mine_upserted:
            mechanism = _mechanism(upsertion.mechanism)
            credential = ScramCredential.from_salted_password(
                mechanism,
                salt=upsertion.salt,
                salted_password=upsertion.salted_password,
                iterations=upsertion.iterations,
            )
            config[mechanism.mechanism_name] = credential_to_string(credential)
        return config

    try:
        store.change_user_config(sanitize(user), change)
    except _NothingToDeleteError:
        return UserResult(
            user=user,
            error_code=ErrorCode.resource_not_found,
            error_message="Attempt to delete a user credential that does not exist",
        )
    except Exception:
        logger.exception("Error encountered while altering user SCRAM credentials user=%s", user)
        return UserResult(
            user=user,
            error_code=ErrorCode.unknown_server_error,
            error_message="The server experienced an unexpected error when processing the request.",
        )
    logger.info(
        "user SCRAM credentials altered user=%s upserted=%s deleted=%s",
        user,
        [_mechanism(u.mechanism).mechanism_name for u in mine_upserted],
        [_mechanism(d.mechanism).mechanism_name for d in mine_deleted],
    )
    return UserResult(user=user)


def _mechanism(type_id: int) -> ScramMechanism:
    mechanism = ScramMechanism.from_type(type_id)
    if mechanism is None:  # checked before; kept as a guard
        raise ValueError(f"unknown SCRAM mechanism type {type_id}")
    return mechanism


class _NothingToDeleteError(Exception):
    """A deletion names a credential the user does not have: nothing of the user is written."""
