"""The broker's side of SASL on one connection (Kafka's ``SaslServerAuthenticator`` with the
re-authentication of its ``KafkaChannel``). The socket server hands it every frame of a
connection of a SASL listener until authentication completes, and a SaslHandshake that starts a
re-authentication (KIP-368) later on::

    INITIAL_REQUEST --any Kafka request--> HANDSHAKE_OR_VERSIONS_REQUEST
    HANDSHAKE_OR_VERSIONS_REQUEST --ApiVersions (answered)--> HANDSHAKE_REQUEST
    HANDSHAKE_OR_VERSIONS_REQUEST, HANDSHAKE_REQUEST --SaslHandshake, enabled--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (v1+) or a raw token (after SaslHandshake v0)--> AUTHENTICATE
                                                                  until the mechanism completes
    AUTHENTICATE --last token--> COMPLETE   (principal User:<authorization id>)
    COMPLETE --SaslHandshake, connections.max.reauth.ms > 0--> REAUTH_PROCESS_HANDSHAKE
    REAUTH_PROCESS_HANDSHAKE --same mechanism--> AUTHENTICATE --> COMPLETE (same principal)
    REAUTH_PROCESS_HANDSHAKE --other mechanism--> REAUTH_BAD_MECHANISM --next token--> FAILED
    any --a failure--> FAILED: the connection closes after connection.failed.authentication.
                               delay.ms, the failure's response (if any) sent first

What a client sees, as from Kafka:

- before authentication, a request other than ApiVersions and SaslHandshake: disconnect, no
  answer ("Unexpected Kafka request of type ... during SASL handshake"); a second ApiVersions
  too;
- a mechanism the listener does not enable: SaslHandshake UNSUPPORTED_SASL_MECHANISM (33) with
  the enabled list, then disconnect;
- in AUTHENTICATE, another request: ILLEGAL_SASL_STATE (34) (answered for SaslHandshake; other
  APIs are closed without an answer here), then disconnect;
- bad credentials: SaslAuthenticate SASL_AUTHENTICATION_FAILED (58) with PLAIN's message, or
  for SCRAM "Authentication failed during authentication due to invalid credentials with SASL
  mechanism SCRAM-SHA-256" whatever the reason, then disconnect;
- a frame larger than sasl.server.max.receive.size before authentication: disconnect.

Once COMPLETE, the session expires ``connections.max.reauth.ms`` after authentication (0: never;
the final SaslAuthenticate v1+ tells the client as SessionLifetimeMs); the socket server closes
a connection that sends anything but a re-authenticating SaslHandshake after that.
Thread-safety: one connection's task.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from storage_core.protocol.messages import build, response_schema
from storage_core.security.credential_cache import CredentialCache
from storage_core.security.kafka_principal import USER_TYPE, KafkaPrincipal
from storage_core.security.plain.plain_sasl_server import PLAIN_MECHANISM, PlainSaslServer
from storage_core.security.sasl_errors import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    SaslError,
    UnsupportedSaslMechanismError,
)
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_sasl_server import ScramSaslServer
from storage_core.server.protocol import (
    MalformedRequestError,
    encode_response,
    parse_request,
    peek_key_version_correlation,
)
from storage_core.server.sasl_config import SaslListenerConfig

logger = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
SASL_HANDSHAKE_VERSIONS = (0, 1)  # inclusive
SASL_AUTHENTICATE_VERSIONS = (0, 2)  # inclusive
MIN_REAUTH_INTERVAL_NS = 1_000_000_000  # Kafka: at most one re-authentication a second
_SIZE_BYTES = 4


class SaslState(Enum):
    INITIAL_REQUEST = "INITIAL_REQUEST"
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    REAUTH_PROCESS_HANDSHAKE = "REAUTH_PROCESS_HANDSHAKE"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"


_S = SaslState
_VALID_TRANSITIONS: dict[SaslState, frozenset[SaslState]] = {
    _S.INITIAL_REQUEST: frozenset({_S.HANDSHAKE_OR_VERSIONS_REQUEST}),
    _S.HANDSHAKE_OR_VERSIONS_REQUEST: frozenset({_S.HANDSHAKE_REQUEST, _S.AUTHENTICATE}),
    _S.HANDSHAKE_REQUEST: frozenset({_S.AUTHENTICATE}),
    _S.AUTHENTICATE: frozenset({_S.COMPLETE}),
    _S.COMPLETE: frozenset({_S.REAUTH_PROCESS_HANDSHAKE}),
    _S.REAUTH_PROCESS_HANDSHAKE: frozenset({_S.AUTHENTICATE, _S.REAUTH_BAD_MECHANISM}),
    _S.REAUTH_BAD_MECHANISM: frozenset(),
    _S.FAILED: frozenset(),
}
"""The arrows of the module docstring; any state but FAILED may also go to FAILED."""


def is_valid_transition(current: SaslState, target: SaslState) -> bool:
    """Repeating the current state is idempotent; FAILED is reachable from every state."""
    return target is current or target is SaslState.FAILED or target in _VALID_TRANSITIONS[current]


@dataclass(frozen=True, slots=True)
class AuthenticationStep:
    """What the socket server does with a frame the authenticator took: send ``response`` (a
    whole frame) if any; if ``close``, close the connection, after ``delay_ms`` (the response,
    if any, goes out at the end of the delay)."""

    response: bytes | None = None
    close: bool = False
    delay_ms: int = 0


class SaslServer(Protocol):
    """What a mechanism's server offers (PlainSaslServer, ScramSaslServer)."""

    mechanism_name: str
    is_complete: bool

    def evaluate_response(self, response: bytes) -> bytes: ...

    @property
    def authorization_id(self) -> str: ...


ApiVersionsAnswer = Callable[[bytes], Awaitable[bytes | None]]


class SaslServerAuthenticator:
    def __init__(
        self,
        config: SaslListenerConfig,
        credentials: CredentialCache,
        *,
        client: str,
        answer_api_versions: ApiVersionsAnswer,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._config = config
        self._credentials = credentials
        self._client = client
        self._answer_api_versions = answer_api_versions
        self._clock_ns = clock_ns
        self.state = SaslState.INITIAL_REQUEST
        self._kafka_headers = True
        self._mechanism: str | None = None
        self._server: Any = None
        self.principal: KafkaPrincipal | None = None
        self._previous_mechanism: str | None = None
        self._previous_principal: KafkaPrincipal | None = None
        self._bad_mechanism_message = ""
        self._reauth_started_ns = 0
        self._session_expiration_ns: int | None = None
        self.session_lifetime_ms = 0

    # ------------------------------------------------------------------ what the server asks
    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def mechanism(self) -> str | None:
        return self._mechanism

    @property
    def max_receive_size(self) -> int | None:
        """The frame size limit while (first) authenticating; None once it no longer applies."""
        if self.complete or self._previous_mechanism is not None:
            return None
        return self._config.max_receive_size

    def session_expired(self, now_ns: int | None = None) -> bool:
        expiry = self._session_expiration_ns
        return expiry is not None and (now_ns or self._clock_ns()) > expiry

    def maybe_begin_reauthentication(self, frame: bytes) -> bool:
        """True if ``frame`` (on an authenticated connection) is a SaslHandshake that starts a
        re-authentication; False leaves it to the API handlers (which answer
        ILLEGAL_SASL_STATE), as Kafka does when re-authentication is off or asked for again
        within a second."""
        if not self.complete or _api_key(frame) != SASL_HANDSHAKE_KEY:
            return False
        if self._session_expiration_ns is None:
            return False
        now_ns = self._clock_ns()
        if self._reauth_started_ns and now_ns - self._reauth_started_ns < MIN_REAUTH_INTERVAL_NS:
            return False
        self._reauth_started_ns = now_ns
        self._previous_mechanism = self._mechanism
        self._previous_principal = self.principal
        self._server = None
        self._transition(SaslState.REAUTH_PROCESS_HANDSHAKE)
        return True

    def _transition(self, target: SaslState) -> None:
        if not is_valid_transition(self.state, target):
            raise _ExchangeFailedError(
                IllegalSaslStateError(f"SASL state {self.state.value} cannot go to {target.value}"),
                delay=False,
            )
        self.state = target

    @property
    def _reauthenticating(self) -> bool:
        return self._previous_mechanism is not None

    def _text(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    # ------------------------------------------------------------------ frames
    async def authenticate(self, frame: bytes) -> AuthenticationStep:
        """Take one frame of the exchange; see the module docstring for the states."""
        try:
            if self.state in (
                SaslState.INITIAL_REQUEST,
                SaslState.HANDSHAKE_OR_VERSIONS_REQUEST,
                SaslState.HANDSHAKE_REQUEST,
                SaslState.REAUTH_PROCESS_HANDSHAKE,
            ):
                return await self._handle_kafka_request(frame)
            if self.state is SaslState.REAUTH_BAD_MECHANISM:
                raise _ExchangeFailedError(SaslAuthenticationError(self._bad_mechanism_message))
            if self.state is SaslState.AUTHENTICATE:
                return self._handle_sasl_token(frame)
            raise _ExchangeFailedError(
                IllegalSaslStateError(f"Unexpected frame in SASL state {self.state}")
            )
        except _ExchangeFailedError as failure:
            self._transition(SaslState.FAILED)
            logger.info(
                "Failed %s with %s (%s)",  # Kafka's line; the reason never holds a secret
                self._text(),
                self._client,
                failure.reason,
            )
            return AuthenticationStep(
                response=failure.response,
                close=True,
                delay_ms=self._config.failed_authentication_delay_ms if failure.delay else 0,
            )

    async def _handle_kafka_request(self, frame: bytes) -> AuthenticationStep:
        try:
            key, version, correlation_id = peek_key_version_correlation(frame)
        except MalformedRequestError:
            key = -1
        if (
            key not in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY)
            and self.state
            in (
                SaslState.INITIAL_REQUEST,
                SaslState.HANDSHAKE_OR_VERSIONS_REQUEST,
            )
            and not _is_known_api(key)
        ):
            # Kafka would take a non-Kafka first packet for a 0.9 GSSAPI token; not enabled.
            raise _ExchangeFailedError(
                UnsupportedSaslMechanismError(
                    "Exception handling first SASL packet from client, GSSAPI is not supported"
                    " by server"
                )
            )
        if self.state is SaslState.INITIAL_REQUEST:
            self._transition(SaslState.HANDSHAKE_OR_VERSIONS_REQUEST)
        if key not in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY):
            raise _ExchangeFailedError(
                IllegalSaslStateError(
                    f"Unexpected Kafka request of type {_api_name(key)} during SASL handshake."
                )
            )
        if key == API_VERSIONS_KEY:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
                raise _ExchangeFailedError(
                    IllegalSaslStateError(
                        "Unexpected ApiVersions request received during SASL authentication"
                        f" state {self.state.value}"
                    ),
                    delay=False,
                )
            answer = await self._answer_api_versions(frame)
            if answer is None:
                raise _ExchangeFailedError(
                    IllegalSaslStateError("ApiVersions not answered"), delay=False
                )
            # A version this broker does not serve is answered with UNSUPPORTED_VERSION (KIP-511)
            # and the client may ask again; only a served ApiVersions moves on, as in Kafka.
            if _api_versions_error(answer) == 0:
                self._transition(SaslState.HANDSHAKE_REQUEST)
            return AuthenticationStep(response=answer)
        return self._handle_handshake(frame, version, correlation_id)

    def _handle_handshake(
        self, frame: bytes, version: int, correlation_id: int
    ) -> AuthenticationStep:
        low, high = SASL_HANDSHAKE_VERSIONS
        if not low <= version <= high:
            raise _ExchangeFailedError(
                IllegalSaslStateError(f"SaslHandshake v{version} is not supported"), delay=False
            )
        try:
            _header, request = parse_request(frame)
        except MalformedRequestError as error:
            raise _ExchangeFailedError(IllegalSaslStateError(str(error)), delay=False) from None
        mechanism = str(request.mechanism)
        enabled = self._config.enabled_mechanisms

        def answer(error: ErrorCode) -> bytes:
            body = build(
                response_schema(SASL_HANDSHAKE_KEY, version),
                error_code=error,
                mechanisms=tuple(enabled),
            )
            return encode_response(SASL_HANDSHAKE_KEY, version, correlation_id, body)

        if mechanism not in enabled:
            raise _ExchangeFailedError(
                UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism!r}"),
                response=answer(ErrorCode.unsupported_sasl_mechanism),
            )
        self._kafka_headers = version >= 1
        if self._reauthenticating and mechanism != self._previous_mechanism:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for"
                f" re-authentication of mechanism '{self._previous_mechanism}'"
            )
            self._transition(SaslState.REAUTH_BAD_MECHANISM)
            return AuthenticationStep(response=answer(ErrorCode.none))
        self._mechanism = mechanism
        self._server = self._create_sasl_server(mechanism)
        self._transition(SaslState.AUTHENTICATE)
        return AuthenticationStep(response=answer(ErrorCode.none))

    def _create_sasl_server(self, mechanism: str) -> Any:
        if mechanism == PLAIN_MECHANISM:
            return PlainSaslServer(self._config.plain_users)
        scram = ScramMechanism.for_mechanism_name(mechanism)
        if scram is None:  # enabled mechanisms are checked at start; kept as a guard
            raise _ExchangeFailedError(
                UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism!r}")
            )
        return ScramSaslServer(scram, self._credentials.get)

    def _handle_sasl_token(self, frame: bytes) -> AuthenticationStep:
        server = self._server
        if not self._kafka_headers:  # after SaslHandshake v0: raw size-prefixed tokens
            try:
                token = server.evaluate_response(frame)
            except (SaslError, SaslAuthenticationError) as error:
                raise _ExchangeFailedError(error) from None
            self._maybe_complete(server)
            return AuthenticationStep(response=len(token).to_bytes(_SIZE_BYTES, "big") + token)
        try:
            key, version, correlation_id = peek_key_version_correlation(frame)
        except MalformedRequestError as error:
            raise _ExchangeFailedError(IllegalSaslStateError(str(error)), delay=False) from None
        if key != SASL_AUTHENTICATE_KEY:
            failure = IllegalSaslStateError(
                f"Unexpected Kafka request of type {_api_name(key)} during SASL authentication."
            )
            response = None
            if key == SASL_HANDSHAKE_KEY and version in SASL_HANDSHAKE_VERSIONS:
                body = build(
                    response_schema(key, version),
                    error_code=ErrorCode.illegal_sasl_state,
                    mechanisms=tuple(self._config.enabled_mechanisms),
                )
                response = encode_response(key, version, correlation_id, body)
            raise _ExchangeFailedError(failure, response=response)
        low, high = SASL_AUTHENTICATE_VERSIONS
        if not low <= version <= high:
            raise _ExchangeFailedError(
                IllegalSaslStateError(
                    f"Version {version} is not supported for apiKey SASL_AUTHENTICATE"
                ),
                delay=False,
            )
        try:
            _header, request = parse_request(frame)
        except MalformedRequestError as error:
            raise _ExchangeFailedError(IllegalSaslStateError(str(error)), delay=False) from None

        def answer(error: ErrorCode, message: str | None, token: bytes, lifetime_ms: int) -> bytes:
            body = build(
                response_schema(key, version),
                error_code=error,
                error_message=message,
                auth_bytes=token,
                session_lifetime=_timedelta_ms(lifetime_ms),
            )
            return encode_response(key, version, correlation_id, body)

        try:
            token = server.evaluate_response(bytes(request.auth_bytes))
            lifetime_ms = self._maybe_complete(server)
        except SaslAuthenticationError as error:
            raise _ExchangeFailedError(
                error, response=answer(ErrorCode.sasl_authentication_failed, str(error), b"", 0)
            ) from None
        except SaslError as error:
            # the reason stays here: it may tell whether the user exists
            message = (
                f"Authentication failed during {self._text()} due to invalid credentials with"
                f" SASL mechanism {self._mechanism}"
            )
            raise _ExchangeFailedError(
                error, response=answer(ErrorCode.sasl_authentication_failed, message, b"", 0)
            ) from None
        return AuthenticationStep(response=answer(ErrorCode.none, None, token, lifetime_ms))

    def _maybe_complete(self, server: Any) -> int:
        """Once the mechanism completes: the principal (unchanged on re-authentication), the
        session's expiry; returns SessionLifetimeMs (0 while not complete)."""
        if not server.is_complete:
            return 0
        principal = KafkaPrincipal(USER_TYPE, server.authorization_id)
        previous = self._previous_principal
        if self._reauthenticating and previous is not None and previous != principal:
            raise SaslAuthenticationError(
                "Cannot change principals during re-authentication from"
                f" {previous.principal_type}.{previous.name}:"
                f" {principal.principal_type}.{principal.name}"
            )
        self.principal = principal
        lifetime_ms = self._config.connections_max_reauth_ms.get(str(self._mechanism), 0)
        self._session_expiration_ns = (
            self._clock_ns() + lifetime_ms * 1_000_000 if lifetime_ms > 0 else None
        )
        self.session_lifetime_ms = lifetime_ms
        self._transition(SaslState.COMPLETE)
        self._server = None
        logger.debug(
            "%s complete principal=%s mechanism=%s session_lifetime_ms=%d client=%s",
            self._text(),
            principal,
            self._mechanism,
            lifetime_ms,
            self._client,
        )
        return lifetime_ms


class _ExchangeFailedError(Exception):
    """A failed exchange: its reason (logged), the response to send (if any) and whether the
    close waits for connection.failed.authentication.delay.ms (authentication failures do;
    protocol violations Kafka treats as I/O errors do not)."""

    def __init__(
        self, reason: Exception, *, response: bytes | None = None, delay: bool = True
    ) -> None:
        super().__init__(str(reason))
        self.reason = f"{type(reason).__name__}: {reason}"
        self.response = response
        self.delay = delay


def _api_versions_error(response: bytes) -> int:
    """The error code of an encoded ApiVersions response (size, correlation id, error code:
    its header is v0 at every version)."""
    return int.from_bytes(response[8:10], "big", signed=True) if len(response) >= 10 else -1


def _api_key(frame: bytes) -> int:
    return int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1


def _is_known_api(key: int) -> bool:
    return key in api_key_map


def _api_name(key: int) -> str:
    """Kafka's ApiKeys name: ``SASL_AUTHENTICATE``."""
    return str(api_key_map.get(key, key)).upper()


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
