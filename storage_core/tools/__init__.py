"""Read-only tools over log dirs and segment files."""
