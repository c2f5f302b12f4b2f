"""A Jepsen-style harness for the replicated log: a TCP relay in front of each broker that cuts
links by client id, a seeded nemesis, a ledger of acknowledged records and its checker, and a
comparison of the replicas' logs below the high watermark."""
