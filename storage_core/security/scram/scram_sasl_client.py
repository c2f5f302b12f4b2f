"""The client's side of one SCRAM exchange (Kafka's ``ScramSaslClient``), for the broker's own
connections to a SASL listener and the project's client and CLI:

    SEND_CLIENT_FIRST_MESSAGE    first()              -> client-first
    RECEIVE_SERVER_FIRST_MESSAGE evaluate(server-first) -> client-final (with the proof)
    RECEIVE_SERVER_FINAL_MESSAGE evaluate(server-final) -> b"" once the server's signature
                                                          checks; SaslError otherwise

The server's iterations must be at least the mechanism's minimum (4096), and its nonce must
start with ours. Not thread-safe; one instance per exchange. The password never appears in a
message or a repr.
"""

from __future__ import annotations

import hmac

from storage_core.security.sasl_errors import SaslError
from storage_core.security.scram.scram_formatter import (
    ScramFormatter,
    auth_message,
    sasl_name,
    secure_random_string,
)
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ServerFinalMessage,
    ServerFirstMessage,
)

GS2_HEADER_NO_AUTHZID = b"n,,"


class ScramSaslClient:
    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._formatter = ScramFormatter(mechanism)
        self._username = username
        self._password = password
        self._client_first = ClientFirstMessage.build(
            sasl_name(username), nonce if nonce is not None else secure_random_string()
        )
        self._server_signature: bytes | None = None
        self._step = 0
        self.is_complete = False

    def __repr__(self) -> str:
        return f"ScramSaslClient({self.mechanism_name}, user={self._username!r})"

    def first(self) -> bytes:
        if self._step != 0:
            raise SaslError("the SCRAM client-first message was already sent")
        self._step = 1
        return self._client_first.to_bytes()

    def evaluate(self, challenge: bytes) -> bytes:
        if self._step == 1:
            return self._on_server_first(challenge)
        if self._step == 2:
            return self._on_server_final(challenge)
        raise SaslError(f"unexpected SCRAM challenge at step {self._step}")

    def _on_server_first(self, challenge: bytes) -> bytes:
        server_first = ServerFirstMessage.parse(challenge)
        if not server_first.nonce.startswith(self._client_first.nonce):
            raise SaslError("Invalid server nonce: does not start with client nonce")
        if server_first.iterations < self.mechanism.min_iterations:
            raise SaslError(
                f"Requested iterations {server_first.iterations} is less than the minimum"
                f" {self.mechanism.min_iterations} for {self.mechanism_name}"
            )
        salted = self._formatter.salted_password(
            self._password, server_first.salt, server_first.iterations
        )
        final = ClientFinalMessage(channel_binding=GS2_HEADER_NO_AUTHZID, nonce=server_first.nonce)
        message = auth_message(
            self._client_first.bare, server_first.to_message(), final.without_proof()
        )
        proof = self._formatter.client_proof(salted, message)
        self._server_signature = self._formatter.server_signature(
            self._formatter.server_key(salted), message
        )
        self._step = 2
        return ClientFinalMessage(
            channel_binding=final.channel_binding, nonce=final.nonce, proof=proof
        ).to_bytes()

    def _on_server_final(self, challenge: bytes) -> bytes:
        server_final = ServerFinalMessage.parse(challenge)
        if server_final.error is not None:
            raise SaslError(
                f"Sasl authentication using {self.mechanism_name} failed with error:"
                f" {server_final.error}"
            )
        expected = self._server_signature or b""
        if not hmac.compare_digest(server_final.server_signature or b"", expected):
            raise SaslError("Invalid server signature in server final message")
        self._step = 3
        self.is_complete = True
        return b""
