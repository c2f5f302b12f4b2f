"""The broker's side of one SCRAM exchange (Kafka's ``ScramSaslServer``):

    RECEIVE_CLIENT_FIRST_MESSAGE --client-first--> RECEIVE_CLIENT_FINAL_MESSAGE
    RECEIVE_CLIENT_FINAL_MESSAGE --client-final--> COMPLETE     (server-final: v=<signature>)
    any state --a bad message, a wrong proof...--> FAILED  (SaslError, SaslAuthenticationError)

The proof is checked as Kafka does, StoredKey == H(ClientSignature XOR ClientProof), compared in
constant time. An unknown user is not told apart from a wrong password: it gets a
server-first message with a salt derived from its name and a per-broker secret (the same salt at
every attempt, as a real user's) and fails at the proof, after the same computations, with the
same generic error. (Kafka 3.9 fails an unknown user at the first message already; the
response text is the same generic one either way, see ``sasl_errors``.)

Delegation tokens (the ``tokenauth=true`` extension) are not supported: such an exchange fails.
One instance per exchange; not thread-safe (one connection's task uses it).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from enum import Enum

from storage_core.security.sasl_errors import SaslAuthenticationError, SaslError
from storage_core.security.scram.scram_credential import ScramCredential
from storage_core.security.scram.scram_formatter import (
    ScramFormatter,
    auth_message,
    secure_random_string,
    username,
)
from storage_core.security.scram.scram_mechanism import ScramMechanism
from storage_core.security.scram.scram_messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ServerFinalMessage,
    ServerFirstMessage,
)

TOKEN_AUTH_EXTENSION = "tokenauth"  # noqa: S105 (an extension's name)
FAKE_SALT_BYTES = 32
CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]
_PROCESS_SECRET = secrets.token_bytes(32)  # for the fake credentials of unknown users


class State(Enum):
    RECEIVE_CLIENT_FIRST_MESSAGE = "RECEIVE_CLIENT_FIRST_MESSAGE"
    RECEIVE_CLIENT_FINAL_MESSAGE = "RECEIVE_CLIENT_FINAL_MESSAGE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramSaslServer:
    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialLookup,
        *,
        fake_secret: bytes = _PROCESS_SECRET,
    ) -> None:
        self.mechanism = mechanism
        self.mechanism_name = mechanism.mechanism_name
        self._formatter = ScramFormatter(mechanism)
        self._credentials = credentials
        self._fake_secret = fake_secret
        self._state = State.RECEIVE_CLIENT_FIRST_MESSAGE
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self._credential: ScramCredential | None = None
        self._user_known = False
        self._authorization_id: str | None = None

    @property
    def is_complete(self) -> bool:
        return self._state is State.COMPLETE

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None or not self.is_complete:
            raise SaslError("the SCRAM exchange is not complete")
        return self._authorization_id

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            if self._state is State.RECEIVE_CLIENT_FIRST_MESSAGE:
                return self._on_client_first(response)
            if self._state is State.RECEIVE_CLIENT_FINAL_MESSAGE:
                return self._on_client_final(response)
            raise SaslError(f"Unexpected challenge in Sasl server state {self._state.value}")
        except (SaslError, SaslAuthenticationError):
            self._credential = None
            self._state = State.FAILED
            raise

    def _on_client_first(self, response: bytes) -> bytes:
        client_first = ClientFirstMessage.parse(response)
        if client_first.extensions.get(TOKEN_AUTH_EXTENSION, "").lower() == "true":
            raise SaslError("Token Authentication failed: delegation tokens are not supported")
        try:
            name = username(client_first.sasl_name)
        except ValueError as error:
            raise SaslError("Authentication failed: Invalid user name") from error
        fake = self._fake_credential(name)  # made for every user: the same work either way
        credential = self._credentials(name, self.mechanism)
        self._user_known = credential is not None
        if credential is None:
            credential = fake
        if client_first.authorization_id and client_first.authorization_id != name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different"
                " from username"
            )
        if credential.iterations < self.mechanism.min_iterations:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum"
                f" {self.mechanism.min_iterations} for {self.mechanism_name}"
            )
        self._client_first = client_first
        self._credential = credential
        self._authorization_id = name
        self._server_first = ServerFirstMessage(
            nonce=client_first.nonce + secure_random_string(),
            salt=credential.salt,
            iterations=credential.iterations,
        )
        self._state = State.RECEIVE_CLIENT_FINAL_MESSAGE
        return self._server_first.to_bytes()

    def _on_client_final(self, response: bytes) -> bytes:
        client_first, server_first, credential = (
            self._client_first,
            self._server_first,
            self._credential,
        )
        if client_first is None or server_first is None or credential is None:
            raise SaslError("the SCRAM exchange lost its state")
        client_final = ClientFinalMessage.parse(response)
        # Kafka checks endsWith, not equality: librdkafka before 2.2 sends its own nonce again
        # in front of the server's (r=<cnonce><cnonce><snonce>) and Kafka accepts it
        if not client_final.nonce.endswith(server_first.nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        message = auth_message(
            client_first.bare, server_first.to_message(), client_final.without_proof()
        )
        signature = self._formatter.client_signature(credential.stored_key, message)
        if len(client_final.proof) != len(signature):
            raise SaslError("Invalid client credentials")
        computed = self._formatter.stored_key_from_proof(signature, client_final.proof)
        # both checks run for every user: a known and an unknown one take the same time
        matches = hmac.compare_digest(computed, credential.stored_key)
        if not (matches and self._user_known):
            raise SaslError("Invalid client credentials")
        server_signature = self._formatter.server_signature(credential.server_key, message)
        self._credential = None
        self._state = State.COMPLETE
        return ServerFinalMessage(server_signature=server_signature).to_bytes()

    def _fake_credential(self, name: str) -> ScramCredential:
        """What an unknown user is answered with: stable per user and broker, matching no
        password (its keys are random)."""
        digest = hmac.new(
            self._fake_secret,
            f"{self.mechanism_name}\0{name}".encode(),
            self.mechanism.hash_name,
        ).digest()
        return ScramCredential(
            salt=digest[:FAKE_SALT_BYTES],
            stored_key=secrets.token_bytes(len(digest)),
            server_key=secrets.token_bytes(len(digest)),
            iterations=self.mechanism.min_iterations,
        )
