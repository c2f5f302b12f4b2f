"""The local log: segments, indexes, epochs, checkpoints."""
