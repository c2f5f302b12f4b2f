"""The ``storage-core`` command."""


def main() -> int:
    return 0
