"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677) exactly as Kafka implements them
(``org.apache.kafka.common.security.scram.internals``): no SASLprep (a password is its UTF-8
bytes), user names escaped ``,`` -> ``=2C`` and ``=`` -> ``=3D``, no channel binding
(``c=biws``), iterations between 4096 and 16384 (inclusive).

    scram_mechanism   ScramMechanism: names, hash, Kafka's type ids, iteration bounds
    scram_formatter   ScramFormatter: Hi(), keys, proofs and signatures
    scram_messages    the four messages, parsed and written
    scram_credential  ScramCredential and its ZooKeeper text (ScramCredentialUtils)
    scram_sasl_server ScramSaslServer, the broker's side of one exchange
    scram_sasl_client ScramSaslClient, the client's side (the broker's own connections, CLI)
"""
