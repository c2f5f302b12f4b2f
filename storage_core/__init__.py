"""A Kafka-compatible log engine with KIP-405 tiered storage."""
