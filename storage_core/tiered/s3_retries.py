"""Bounded retries of one S3 request, and botocore's errors mapped to ``RemoteStorageError``.

botocore's own retries are off (one attempt per call, see ``S3RemoteStorageManager``) so that
``call_with_retries`` alone bounds attempts and total time: connection errors, timeouts,
throttling and 5xx answers are retried with full-jitter exponential backoff; anything else
fails at once. The error raised names the operation, ``s3://bucket/key`` and the endpoint; a
missing object raises ``RemoteResourceNotFoundError``. Log lines keep the manager's logger name.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

import botocore.exceptions

from storage_core.tiered.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from storage_core.tiered.s3_remote_storage_config import S3RemoteStorageConfig

logger = logging.getLogger("storage_core.tiered.s3_remote_storage_manager")

T = TypeVar("T")

# Error codes worth another attempt (besides any 5xx status and 429).
_RETRIABLE_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "InternalError",
        "ServiceUnavailable",
        "BadDigest",
        "XAmzContentSHA256Mismatch",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_RETRIABLE_EXCEPTIONS = (
    botocore.exceptions.ConnectionError,  # refused, DNS, connect timeout, proxy
    botocore.exceptions.HTTPClientError,  # read timeout, connection closed mid-response
    botocore.exceptions.IncompleteReadError,
    botocore.exceptions.ResponseStreamingError,
    botocore.exceptions.FlexibleChecksumError,
)


def call_with_retries(
    config: S3RemoteStorageConfig,
    endpoint_url: str,
    operation: str,
    key: str,
    call: Callable[[], T],
) -> T:
    """Run one S3 request with bounded retries (module docstring)."""
    started = time.monotonic()
    deadline = started + config.retry_total_timeout_ms / 1000
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            retriable = is_retriable(exc)
            backoff_s = (
                random.uniform(
                    0,
                    min(
                        config.retry_backoff_max_ms,
                        config.retry_backoff_ms * 2 ** (attempt - 1),
                    ),
                )
                / 1000
            )
            if (
                not retriable
                or attempt >= config.retry_max_attempts
                or time.monotonic() + backoff_s >= deadline
            ):
                raise translate_error(
                    config, endpoint_url, operation, key, exc, attempts=attempt, started=started
                ) from exc
            logger.warning(
                "s3 request failed, retrying operation=%s bucket=%s key=%s endpoint=%s"
                " attempt=%d backoff_ms=%d error=%s",
                operation,
                config.bucket,
                key,
                endpoint_url,
                attempt,
                backoff_s * 1000,
                exc,
            )
            time.sleep(backoff_s)


def translate_error(
    config: S3RemoteStorageConfig,
    endpoint_url: str,
    operation: str,
    key: str,
    exc: Exception,
    *,
    attempts: int,
    started: float,
) -> RemoteStorageError:
    where = f"s3://{config.bucket}/{key} at {endpoint_url}"
    elapsed_s = time.monotonic() - started
    if isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) in _NOT_FOUND_CODES:
        return RemoteResourceNotFoundError(f"{operation}: {where} does not exist")
    hint = ""
    if isinstance(exc, _RETRIABLE_EXCEPTIONS):
        hint = " (is the object store reachable? check s3.endpoint.url and the network)"
    elif isinstance(exc, botocore.exceptions.NoCredentialsError):
        hint = " (set credentials through the standard AWS chain, e.g. AWS_ACCESS_KEY_ID)"
    elif isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) == "NoSuchBucket":
        hint = " (create the bucket or fix s3.bucket.name)"
    return RemoteStorageError(
        f"{operation} of {where} failed after {attempts} attempt(s) in {elapsed_s:.1f}s:"
        f" {exc}{hint}"
    )


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_retriable(exc: Exception) -> bool:
    if isinstance(exc, _RETRIABLE_EXCEPTIONS):
        return True
    if isinstance(exc, botocore.exceptions.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return status >= 500 or status == 429 or error_code(exc) in _RETRIABLE_CODES
    return False
