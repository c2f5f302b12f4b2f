"""The chunked, self-describing format of remote segments (``ChunkedRemoteStorageManager``):
chunks with an index, optional zstd and AES-256-GCM per chunk, a key ring of RSA key pairs,
and a segment manifest written last. Segments without a manifest are read as copied."""
