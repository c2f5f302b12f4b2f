"""Child processes that are started in their own process group and stopped as a group.

A child that starts children of its own (Airflow's standalone runs a scheduler, an api-server,
a dag-processor and a triggerer; a job starts a Spark JVM) leaves orphans when only its own
pid is signalled, so each child leads a new session and is stopped through its group: SIGTERM,
a grace period, then SIGKILL for whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_S = 30.0
KILL_WAIT_S = 5.0
_POLL_S = 0.1


class ProcessGroup:
    """One child process leading its own process group; output appended to ``log_path``."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.env = dict(env if env is not None else os.environ)
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.process.pid

    def start(self) -> ProcessGroup:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as output:
            self.process = subprocess.Popen(  # noqa: S603 (an argv list, no shell)
                self.command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, "PYTHONUNBUFFERED": "1"},
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    def exit_code(self) -> int | None:
        """None while running."""
        return None if self.process is None else self.process.poll()

    def wait(self, timeout_s: float) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` after ``timeout_s``."""
        if self.process is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.process.wait(timeout_s)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the whole group, then SIGKILL to what outlives ``grace_s``.
        Returns the leader's exit code (None if it was never started)."""
        if self.process is None:
            return None
        pgid = self.process.pid  # the leader of a new session leads its group
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(pgid):
            self.process.poll()
            time.sleep(_POLL_S)
        if group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
        code = self.process.wait()
        # SIGKILL is delivered asynchronously: wait (briefly) until the members are gone
        deadline = time.monotonic() + KILL_WAIT_S
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        return code

    def kill(self) -> int | None:
        """SIGKILL to the whole group at once, as a crash (no clean shutdown); waits until
        the members are gone. Returns the leader's exit code (None if never started)."""
        if self.process is None:
            return None
        pgid = self.process.pid
        _signal_group(pgid, signal.SIGKILL)
        code = self.process.wait()
        deadline = time.monotonic() + KILL_WAIT_S
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        return code

    def tail(self, max_chars: int = 4000) -> str:
        """The end of the output, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (zombies of our own children count
    until reaped, so poll the leader before asking)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _has_live_member(pgid)


def _has_live_member(pgid: int) -> bool:
    """``killpg(pgid, 0)`` also succeeds for zombies: look for a member that is not one."""
    if not Path("/proc").is_dir():
        return True
    return any(entry.group == pgid for entry in process_table().values())


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessEntry:
    parent: int
    group: int


def process_table() -> dict[int, ProcessEntry]:
    """Every live process (zombies left out) by pid, from ``/proc/<pid>/stat``."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # the command name may hold spaces and parentheses: split after the last ")"
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, parent, group = fields[0], int(fields[1]), int(fields[2])
        if state != "Z":
            table[int(entry.name)] = ProcessEntry(parent=parent, group=group)
    return table


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def run_to_completion(
    name: str,
    command: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    timeout_s: float,
    cwd: Path | None = None,
) -> int:
    """Run a command in its own group; on timeout (or Ctrl-C) stop the group and raise."""
    child = ProcessGroup(name, command, log_path=log_path, env=env, cwd=cwd).start()
    try:
        return child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        child.stop()
        raise CommandTimeoutError(
            f"{name} did not finish within {timeout_s:.0f} s (stopped); see {log_path}"
        ) from None
    except BaseException:
        child.stop()
        raise
    finally:
        # a finished leader may leave children behind (a Spark JVM): stop them too
        if group_alive(child.pid):
            child.stop(grace_s=5.0)


class CommandTimeoutError(RuntimeError):
    """A command of the demo ran past its time limit and was stopped."""
