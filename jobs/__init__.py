"""Batch jobs of the tiering pipeline (PySpark), one module per job.

Every job is ``python -m jobs.<name> --help`` and spark-submit-able, exposes
``main(argv: list[str] | None = None) -> int`` and follows ``jobs.common``'s contract:
the shared options, a JSON run summary, one ``key=value`` line per partition, progress on
stderr, and exit codes 0 (done), 1 (a partition or the run failed; one ``<job>: error:``
line on stderr), 2 (bad arguments). ``jobs`` never imports Airflow.
"""
