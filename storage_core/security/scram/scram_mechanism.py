"""Kafka's ``ScramMechanism``: the SCRAM mechanisms, their hash, their type id on the wire
(AlterUserScramCredentials / DescribeUserScramCredentials ``Mechanism``) and their iteration
bounds (inclusive)."""

from __future__ import annotations

from enum import Enum


class ScramMechanism(Enum):
    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 2)

    def __init__(self, mechanism_name: str, hash_name: str, type_id: int) -> None:
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.type_id = type_id

    @property
    def min_iterations(self) -> int:
        return MIN_ITERATIONS

    @property
    def max_iterations(self) -> int:
        return MAX_ITERATIONS

    @staticmethod
    def for_mechanism_name(name: str) -> ScramMechanism | None:
        for mechanism in ScramMechanism:
            if mechanism.mechanism_name == name:
                return mechanism
        return None

    @staticmethod
    def from_type(type_id: int) -> ScramMechanism | None:
        for mechanism in ScramMechanism:
            if mechanism.type_id == type_id:
                return mechanism
        return None


MIN_ITERATIONS = 4096  # RFC 7677, Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations (also for AlterUserScramCredentials)
MECHANISM_NAMES = tuple(m.mechanism_name for m in ScramMechanism)
