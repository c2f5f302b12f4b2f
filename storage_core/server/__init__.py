"""The broker: the Kafka wire-protocol listener, one handler per API, and the process."""
