"""The errors of a SASL exchange, as Kafka names them (``org.apache.kafka.common.errors``), and
what a client is told of each.

- ``SaslAuthenticationError``: the client sees its message (PLAIN's "Invalid username or
  password", a principal changed at re-authentication). Error SASL_AUTHENTICATION_FAILED (58).
- ``SaslError`` (Java's ``javax.security.sasl.SaslException``): the reason stays in the broker;
  the client sees Kafka's generic "Authentication failed during authentication due to invalid
  credentials with SASL mechanism <m>", so that an unknown user and a wrong password look the
  same. Also SASL_AUTHENTICATION_FAILED (58).
- ``IllegalSaslStateError``: a request out of turn. ILLEGAL_SASL_STATE (34).
- ``UnsupportedSaslMechanismError``: a mechanism this listener does not enable.
  UNSUPPORTED_SASL_MECHANISM (33).

None of these messages ever holds a password, a proof or a key.
"""

from __future__ import annotations


class SaslError(Exception):
    """A failed exchange whose reason is not told to the client (Java's SaslException)."""


class SaslAuthenticationError(Exception):
    """A failed exchange whose message is told to the client (SASL_AUTHENTICATION_FAILED)."""


class IllegalSaslStateError(Exception):
    """A request that the SASL state machine does not expect now (ILLEGAL_SASL_STATE)."""


class UnsupportedSaslMechanismError(Exception):
    """A mechanism the listener does not enable (UNSUPPORTED_SASL_MECHANISM)."""
