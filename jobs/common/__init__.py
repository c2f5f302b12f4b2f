"""What every job shares: options, the run summary, log lines, progress, the Spark session,
the per-log-dir (or per-cluster) run lock and the copy deadline; ``jobs.common.remote_deletion``
executes the planned deletions of the jobs that delete remote objects.

The contract of a job module ``jobs.<name>``::

    def main(argv: list[str] | None = None) -> int:
        parser = job_parser("<name>", __doc__)            # the shared options + the job's
        args = parse_job_args(parser, argv)                # JobArgs (validated)
        return run_job(args, lambda summary: <extract -> plan -> load>)

``run_job`` writes the summary (``--summary-path``) whatever happens, turns a failure into
one ``<job>: error: <message>`` line on stderr and exit code 1, and returns 1 when the
summary holds errors, else 0. ``--help`` documents each job.
"""

from jobs.common.args import (
    BOOTSTRAP_SERVER_ENV,
    BROKER_CONFIG_ENV,
    BROKER_LOG_DIRS_ENV,
    DEFAULT_BOOTSTRAP_SERVER,
    DEFAULT_SPARK_MASTER,
    LOG_DIRS_ENV,
    SPARK_MASTER_ENV,
    JobArgs,
    JobArgumentError,
    job_parser,
    parse_job_args,
)
from jobs.common.deadline import (
    COPY_TIMEOUT_S_DEFAULT,
    CopyDeadlineExceededError,
    deadline_fence,
)
from jobs.common.locking import LOCK_DIR_ENV, cluster_lock_key, default_lock_dir, log_dir_locks
from jobs.common.output import Progress, format_fields, log_line, log_partition
from jobs.common.run import exclusive_run, run_job
from jobs.common.settings import StoreSettings, resolve_job_broker_id
from jobs.common.spark import spark_session
from jobs.common.summary import RunSummary, utc_now_iso

__all__ = [
    "BOOTSTRAP_SERVER_ENV",
    "BROKER_CONFIG_ENV",
    "BROKER_LOG_DIRS_ENV",
    "COPY_TIMEOUT_S_DEFAULT",
    "DEFAULT_BOOTSTRAP_SERVER",
    "DEFAULT_SPARK_MASTER",
    "LOCK_DIR_ENV",
    "LOG_DIRS_ENV",
    "SPARK_MASTER_ENV",
    "CopyDeadlineExceededError",
    "JobArgs",
    "JobArgumentError",
    "Progress",
    "RunSummary",
    "StoreSettings",
    "cluster_lock_key",
    "deadline_fence",
    "default_lock_dir",
    "exclusive_run",
    "format_fields",
    "job_parser",
    "log_dir_locks",
    "log_line",
    "log_partition",
    "parse_job_args",
    "resolve_job_broker_id",
    "run_job",
    "spark_session",
    "utc_now_iso",
]
