"""What a handler knows about the request it serves (Kafka's ``RequestContext``): who sent it
(the connection's principal), through which listener, and the broker's managers it may use
(``BrokerServices``)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from storage_core.protocol.messages import response_module
from storage_core.security.kafka_principal import ANONYMOUS, KafkaPrincipal, SecurityProtocol
from storage_core.server.broker_services import BrokerServices


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    services: BrokerServices
    principal: KafkaPrincipal = ANONYMOUS
    listener_name: str = "PLAINTEXT"
    """The listener the request came through; Metadata answers with its endpoints."""
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT

    @property
    def response_module(self) -> ModuleType:
        """The kio module of the response at the request's version (its message classes)."""
        return response_module(self.api_key, self.api_version)
