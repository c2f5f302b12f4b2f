"""Great Expectations suites over the quality tables (``jobs.tables``), as Python code.

- ``definitions``: the named expectations and the suites (the list is there).
- ``runner``: ``QualityContext`` (file-mode context, checkpoints with Data Docs) and the
  readable ``SuiteOutcome`` / ``FailedExpectation`` results.
- ``restore_drill``: the restore drill's suites over its tables (``jobs.restore_drill``)
  and ``DrillContext``, the same way on pandas.
"""

from expectations.definitions import (
    DESCRIPTIONS,
    PARTITION_OFFSETS_SUITE,
    QUALITY_EXPECTATIONS,
    REMOTE_SEGMENTS_SUITE,
    REPLICA_WARNINGS_SUITE,
    REPLICAS_SUITE,
    SUITE_TABLES,
    WARNING_SUITES,
    partition_offsets_suite,
    remote_segments_suite,
    replica_warnings_suite,
    replicas_suite,
)
from expectations.runner import (
    FailedExpectation,
    QualityContext,
    SuiteOutcome,
    data_docs_index,
)

__all__ = [
    "DESCRIPTIONS",
    "PARTITION_OFFSETS_SUITE",
    "QUALITY_EXPECTATIONS",
    "REMOTE_SEGMENTS_SUITE",
    "REPLICAS_SUITE",
    "REPLICA_WARNINGS_SUITE",
    "SUITE_TABLES",
    "WARNING_SUITES",
    "FailedExpectation",
    "QualityContext",
    "SuiteOutcome",
    "data_docs_index",
    "partition_offsets_suite",
    "remote_segments_suite",
    "replica_warnings_suite",
    "replicas_suite",
]
