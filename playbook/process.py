"""Every subprocess the playbook starts: argument lists, never a shell, always a time limit.

:func:`run_streaming` is for long, talkative work (a build): each output line goes to a callback as it
arrives, and two limits are enforced by a clock, not by the arrival of output, so a child that hangs
without printing is stopped too:

- ``timeout_s``: the whole run;
- ``silence_timeout_s``: the longest stretch without a line of output (a stalled build).

On a limit the child's whole process group is killed (compilers are grandchildren of pip).
:func:`run_captured` is for short commands whose output is read afterwards.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LineCallback = Callable[[str], object]  # its return value is ignored (a file's write returns a count)

_PR_SET_PDEATHSIG = 1


def dies_with_this_thread() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel kill the child when the thread that starts it ends (Linux).

    Children run in their own sessions so that a limit can kill their whole group; that also lets them
    outlive a ``kill -9`` of the playbook, and an orphan would go on building or probing, and writing into
    a run folder that ``resume`` already took over. Only for children that end before their caller returns:
    the signal follows the starting thread, not the process. ``None`` where the kernel has no such call.
    """
    if sys.platform != "linux":
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)  # loaded before the fork, not in it
    parent = os.getpid()

    def bind() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)
    return bind


@dataclass
class StreamOutcome:
    returncode: int | None
    duration_s: float
    timed_out: bool = False  # the whole run passed timeout_s
    stalled: bool = False  # no output for silence_timeout_s
    silent_for_s: float = 0.0  # the longest silence seen
    # The command lines still running in the child's process group when a limit stopped it (POSIX):
    # ninja names a compile step only when it ends, so these say what hung.
    still_running: list[str] = field(default_factory=list)

    @property
    def stopped(self) -> bool:
        return self.timed_out or self.stalled


def run_streaming(
    command: Sequence[str],
    on_line: LineCallback,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = 3600,
    silence_timeout_s: float | None = None,
    poll_s: float = 1.0,
) -> StreamOutcome:
    """Run ``command``, handing each line of its merged stdout and stderr to ``on_line``."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(command), env=dict(env) if env is not None else None, cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1, start_new_session=True,
        preexec_fn=dies_with_this_thread(),  # noqa: PLW1509 only a prctl through a library loaded before the fork
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    outcome = StreamOutcome(returncode=None, duration_s=0.0)
    last_output = started
    ended = False
    try:
        with _terminate_as_interrupt():
            while not ended:
                try:
                    line = lines.get(timeout=poll_s)
                except queue.Empty:
                    line = ""
                now = time.monotonic()
                if line is None:
                    ended = True
                elif line:
                    last_output = now
                    on_line(line)
                outcome.silent_for_s = max(outcome.silent_for_s, now - last_output)
                if ended:
                    break
                if now - started > timeout_s:
                    outcome.timed_out = True
                elif silence_timeout_s is not None and now - last_output > silence_timeout_s:
                    outcome.stalled = True
                if outcome.stopped:
                    running = session_processes(proc.pid)
                    outcome.still_running = [command for _, command in running]
                    kill_group(proc, running)
                    break
    except BaseException:
        # Ctrl-C (the kernel's interrupt) or the kernel told to stop: the child's session runs apart from
        # ours and would compile on, orphaned; it ends with us, at once, before a kernel manager's SIGKILL.
        with _signals_held():
            kill_session_now(proc)
        proc.wait()
        raise
    outcome.returncode = proc.wait()
    reader.join(timeout=5)
    while not lines.empty():  # what the child printed before it was killed
        if (line := lines.get_nowait()) is not None:
            on_line(line)
    outcome.duration_s = round(time.monotonic() - started, 2)
    return outcome


def kill_session_now(proc: subprocess.Popen[str]) -> None:
    """Kill a child started with ``start_new_session`` and its whole session, fast: its own process group
    first (pip, CMake, ninja: nothing starts a new compile after that), then the compile commands ninja put in
    groups of their own, found in /proc where there is one (no ``ps`` to wait for)."""
    if os.name != "posix":
        proc.kill()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    members = _session_members(proc.pid)
    for pid in members if members is not None else [pid for pid, _ in session_processes(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _session_members(session_id: int) -> list[int] | None:
    """The processes of a session from /proc (Linux); None where there is no /proc."""
    proc_root = Path("/proc")
    if not (proc_root / "self" / "stat").is_file():
        return None
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state ppid pgrp session ...
        if len(fields) > 3 and fields[3] == str(session_id):
            members.append(int(entry.name))
    return members


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (POSIX) while the block runs: a second Ctrl-C must not cut the cleanup short."""
    if os.name != "posix":
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs (in the main thread: a kernel executing a
    step, which its manager ends with SIGTERM when the run is interrupted), so the caller can clean up."""
    if threading.current_thread() is not threading.main_thread() or os.name != "posix":
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_captured(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float = 120,
) -> subprocess.CompletedProcess[str]:
    """A short command's exit status and output; a command that outlives ``timeout_s`` is killed and
    reported with returncode -9 and what it printed so far."""
    try:
        return subprocess.run(list(command), env=dict(env) if env is not None else None, cwd=cwd,
                              capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as expired:
        def text(value: bytes | str | None) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")
        return subprocess.CompletedProcess(list(command), -9, text(expired.stdout),
                                           text(expired.stderr) + f"\nkilled after {timeout_s:.0f} s")


def session_processes(session_id: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process in a session, in ``ps`` order; [] where ``ps`` cannot say.
    The session, not the process group: ninja puts each compile command in a group of its own."""
    if os.name != "posix":
        return []
    listed = run_captured(["ps", "-ww", "-eo", "sess=,pid=,args="], timeout_s=30)
    found = []
    for line in listed.stdout.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3 and fields[0] == str(session_id) and fields[1].isdigit():
            found.append((int(fields[1]), fields[2]))
    return found


def kill_group(proc: subprocess.Popen[str], running: list[tuple[int, str]] | None = None) -> None:
    """Kill a child started with ``start_new_session`` and everything it started, also what it put in
    process groups of their own (ninja's compile commands). ``running``: its session, when already listed."""
    if os.name == "posix":
        stragglers = [pid for pid, _ in (session_processes(proc.pid) if running is None else running)]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    else:
        proc.kill()
