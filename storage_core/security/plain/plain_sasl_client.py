"""The client's side of SASL/PLAIN: one message, ``NUL username NUL password`` (no authzid, as
Kafka's ``PlainLoginModule`` client sends it)."""

from __future__ import annotations


class PlainSaslClient:
    mechanism_name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._username = username
        self._password = password
        self.is_complete = False

    def __repr__(self) -> str:
        return f"PlainSaslClient(user={self._username!r})"

    def first(self) -> bytes:
        return b"\0" + self._username.encode("utf-8") + b"\0" + self._password.encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes:
        self.is_complete = True
        return b""
