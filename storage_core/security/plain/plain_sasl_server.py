"""The broker's side of SASL/PLAIN (Kafka's ``PlainSaslServer`` with its default
``PlainServerCallbackHandler``). One message from the client, RFC 4616:

    [authzid] NUL authcid NUL passwd       (UTF-8; exactly three tokens)

The password is compared in constant time with the user's ``user_<name>`` entry of the
listener's ``plain.sasl.jaas.config``. Failures raise ``SaslAuthenticationError`` with Kafka's
messages (told to the client: "Authentication failed: Invalid username or password", the same
for an unknown user and a wrong password). One instance per exchange.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from storage_core.security.sasl_errors import SaslAuthenticationError, SaslError

PLAIN_MECHANISM = "PLAIN"
MAX_TOKENS = 4
_NO_PASSWORD = "\0no user\0"  # noqa: S105 (compared for an unknown user: same time)


class PlainSaslServer:
    mechanism_name = PLAIN_MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._authorization_id: str | None = None
        self.is_complete = False

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None:
            raise SaslError("the PLAIN exchange is not complete")
        return self._authorization_id

    def evaluate_response(self, response: bytes) -> bytes:
        if self.is_complete:
            raise SaslError("the PLAIN exchange is already complete")
        tokens = response.decode("utf-8", errors="replace").split("\0", MAX_TOKENS - 1)
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authorization_id, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        matches = hmac.compare_digest(
            password.encode("utf-8"), (expected if expected is not None else _NO_PASSWORD).encode()
        )
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different"
                " from username"
            )
        self._authorization_id = username
        self.is_complete = True
        return b""
