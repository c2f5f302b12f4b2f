"""Kafka's ZooKeeper-mode authorizer (``kafka.security.authorizer.AclAuthorizer``): ACLs kept
in ZooKeeper (or the single-node store), cached on every broker and refreshed from change
notifications, and the decision each request's checks ask of it."""
