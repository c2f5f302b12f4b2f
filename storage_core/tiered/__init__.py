"""KIP-405 tiered storage: remote storage managers, remote log metadata and the remote tier."""
