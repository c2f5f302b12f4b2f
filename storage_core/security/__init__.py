"""Security as Kafka's ZooKeeper mode has it (Kafka's ``org.apache.kafka.common.security`` and
``kafka.security``): who a connection is (``KafkaPrincipal``), how it proved it (TLS client
certificates, SASL PLAIN and SCRAM), and what it may do (the ACL authorizer).

The broker's listeners and their security protocols are read by ``server``; this package holds
what does not depend on a socket: principals, mechanisms, credentials and the authorizer, so
that the replica fetchers and the internal clients, which sit below the server, use the same
code on their side of a connection.
"""
