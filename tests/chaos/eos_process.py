"""The loop process of ``tests.chaos.eos``: ``tests.chaos.eos_loop`` started as a new run
whenever it dies (a SIGKILL of the nemesis: when ``start`` is called again; an exit of its
own: at once), each run numbered, how each ended counted."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.chaos import eos_loop
from tests.chaos.eos_check import Outcome, parse_outcomes
from tests.chaos.nemesis import Event

LOOP_RESTARTS_MAX = 100


ENDINGS = {
    0: "finished the input",
    eos_loop.EXIT_FATAL: "fatal error (exit 3)",
    eos_loop.EXIT_UNRECOVERABLE: "unrecoverable error (exit 4)",
    eos_loop.EXIT_HUNG: "client call hung past its timeout (exit 5)",
}


class LoopProcess:
    """The loop's process, started again as a new run whenever it dies (a SIGKILL of the
    nemesis: when ``start`` is called; an exit of its own: at once). Its output goes to
    ``<dir>/loop.log``, its outcome lines to ``<dir>/outcomes.log``."""

    def __init__(
        self,
        directory: Path,
        bootstrap: str,
        end: list[int],
        log: Callable[..., Event],
        loop_args: tuple[str, ...] = (),
    ):
        self.directory = directory
        self.loop_args = loop_args  # eos_loop's arguments but --bootstrap, --run, --end, --outcomes
        self.outcomes_path = directory / "outcomes.log"
        self.output_path = directory / "loop.log"
        self.bootstrap = bootstrap
        self.end = end
        self.log = log
        self.runs = 0
        self.exits: Counter[str] = Counter()  # how runs ended (see ``ENDINGS``)
        self.finished = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._held = False  # killed by the nemesis: not started again until ``start``
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="eos-loop-watcher", daemon=True)

    def start(self) -> None:
        with self._lock:
            self._held = False
            self._spawn()
        if not self._watcher.is_alive():
            self._watcher.start()

    def _spawn(self) -> None:
        self.runs += 1
        with self.output_path.open("ab") as output:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.chaos.eos_loop",
                    f"--bootstrap={self.bootstrap}",
                    f"--run={self.runs}",
                    f"--end={','.join(map(str, self.end))}",
                    f"--outcomes={self.outcomes_path}",
                    *self.loop_args,
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> bool:
        """SIGKILL the running loop; False when it had finished already."""
        with self._lock:
            process = self._process
            if process is None or process.poll() is not None:
                return False
            self._held = True
            process.kill()
            process.wait()
            self.exits["killed by the nemesis"] += 1
            self._process = None
            return True

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                process = self._process
                if self._held or process is None or process.poll() is None:
                    continue
                status = process.returncode
                self._process = None
                self.exits[ENDINGS.get(status, f"exit {status}")] += 1
                if status == 0:
                    self.finished.set()
                    return
                if self.runs >= LOOP_RESTARTS_MAX:
                    self.log(-1, "loop", f"run {self.runs} exited {status}; no more restarts")
                    return
                self.log(-1, "loop", f"run {self.runs} exited {status}; started again")
                self._spawn()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.kill()
                self._process.wait()

    def outcomes(self) -> list[Outcome]:
        if not self.outcomes_path.exists():
            return []
        return parse_outcomes(self.outcomes_path.read_text().splitlines())

    def committed_since(self, at: float) -> float | None:
        """Seconds from ``at`` (``time.time()``) until the loop's first commit after it."""
        times = [o.at for o in self.outcomes() if o.committed and o.at > at]
        return min(times) - at if times else None
