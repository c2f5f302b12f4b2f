"""SASL/PLAIN (RFC 4616) as Kafka implements it (``security.plain.internals``): the broker's
side checks the user against ``user_<name>="<password>"`` entries of its JAAS configuration;
the client's side sends ``authzid NUL authcid NUL passwd``."""
