"""The workflow's fork server: one process that imports upfl and its libraries once, then forks a fresh process for
every ``upfl`` job of a local ``snakemake`` run.

Each job of the pipeline is an ``upfl`` process. Before its first useful step it would import numpy, numba's
compiled kernels, torch, dp-accounting, pandas or matplotlib: about 0.5 to 2.5 CPU-seconds a job, a third of the
pipeline's core-seconds outside the runs (docs/benchmarks.md, "The fork server"). Under a local run the workflow's
``onstart`` handler starts this server (:func:`start`); a job's ``upfl`` (:mod:`upfl.launch`) hands it its command
line, working folder, environment and standard streams, and the server forks a child that runs the command as the
job's own process would: same arguments, folder, environment, streams and file-creation mask, its own process with
its own exit status. The child's CPU time is the server's child's, counted in the workflow's process tree.

What a child inherits besides is what the imports made, and an import reads some environment variables once (the
thread counts of the numerical libraries, numba's and matplotlib's settings, Python's own). So the server takes a
command only when the job's environment equals the one it imported under, in the variables an import may read
(:data:`IMPORT_VARIABLES`), and only from the same interpreter, environment prefix and upfl package; otherwise
it declines and the job runs in its own process. The server starts no thread before forking: numba's, OpenMP's and
torch's thread pools start in each child.

A command may give the server a step of its own (``SERVER_AHEAD``, ``SERVER_AFTER`` of
:mod:`upfl.pipeline.fork_protocol`, set by the command's parser): work whose result every later child inherits
instead of redoing it. ``upfl run-many`` has the server read the data sets of its bundle before forking it (a later
bundle on the same files finds them read); ``upfl kernels warm-up``, once it has put the compiled kernels in numba's
cache, has the server load their single-threaded forms from it. The server runs such a step in the job's folder, and
checks afterwards that it still has one thread; should it ever have more, it declines every later command. A cluster
run never starts a server (each job runs on a node of its own), and ``UPFL_FORK_SERVER=0`` turns it off for a local
run.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib
import io
import os
import pkgutil
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fork_protocol import (
    SERVER_AFTER,
    SERVER_AHEAD,
    SOCKET_ENV,
    interpreter,
    receive_message_and_fds,
    send_message,
)

SWITCH_ENV = "UPFL_FORK_SERVER"
"""``0`` turns the fork server off for a local run."""

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""The thread counts Snakemake sets for a job (its ``threads``). The server imports under 1, every single-threaded
job's value; a job with more threads runs in its own process."""

IMPORT_VARIABLES = (
    "PYTHON",
    "NUMBA_",
    "NPY_",
    "NUMPY_",
    "SCIPY_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "GOTO_",
    "BLIS_",
    "VECLIB_",
    "NUMEXPR_",
    "TBB_",
    "TORCH",
    "PYTORCH_",
    "CUDA_",
    "CUBLAS_",
    "NVIDIA_",
    "MPL",
    "MATPLOTLIB",
    "LD_",
    "DYLD_",
    "LC_",
    "LANG",
    "HOME",
    "XDG_",
    "TZ",
)
"""Names (and name beginnings) of the environment variables an import may read once: Python's own, the numerical
libraries' and their thread counts, torch's and CUDA's, matplotlib's, the dynamic loader's, the locale and the
folders where libraries keep their caches. A job whose value of any of these differs from the server's runs in its
own process. Everything else (the shell's, Snakemake's temporary folder, upfl's own ``UPFL_*``) is read when a
command runs, and a child gets the job's."""


SKIPPED_MODULES = ("upfl.flower", "upfl.launch", "upfl.pipeline.forkserver")
"""Not imported ahead: the Flower extra (optional, and no workflow job uses it) and the server's own modules."""

LIBRARIES = (
    "numpy",
    "numba",
    "scipy.stats",
    "pandas",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
    "matplotlib.backends.backend_pdf",
    "torch",
    "dp_accounting",
)
"""Imported ahead besides upfl's modules: the libraries upfl imports only inside functions, and matplotlib's
drawing backends, which a figure loads when it is saved (the PDF one is a tenth of a CPU-second)."""

READY_TIMEOUT_S = 10.0
"""How long :func:`start` waits for the server's socket before the run goes on without it."""


def environment_difference(imported_under: Mapping[str, str], job: Mapping[str, str]) -> str | None:
    """The first variable of :data:`IMPORT_VARIABLES` (sorted) whose value in ``job``'s environment differs from
    the one the server imported under; None when there is none."""
    for name in sorted(set(imported_under) | set(job)):
        if name.startswith(IMPORT_VARIABLES) and imported_under.get(name) != job.get(name):
            return name
    return None


def upfl_modules() -> list[str]:
    """Every module of the upfl package, :data:`SKIPPED_MODULES` aside."""
    import upfl

    names = ["upfl"]
    for info in pkgutil.walk_packages(upfl.__path__, "upfl."):
        if not any(info.name == s or info.name.startswith(s + ".") for s in SKIPPED_MODULES):
            names.append(info.name)
    return names


def preload(log: Callable[[str], None]) -> int:
    """Import upfl's modules and :data:`LIBRARIES` with the garbage collector paused, read the code fingerprint of
    the sources imported (the key of the finished-run store and of checkpoints), then move every object made out of
    the collector's sight (:func:`gc.freeze`), as a one-command process does; the number of modules imported. A
    module that cannot be imported (an optional library missing) is named in the log and left to the job."""
    gc.disable()
    count = 0
    try:
        for name in [*LIBRARIES, *upfl_modules()]:
            try:
                importlib.import_module(name)
                count += 1
            except Exception as e:  # the job that needs it will say why, in its own log
                log(f"not imported ahead: {name}: {type(e).__name__}: {e}")
        from ..engine.checkpoints import code_fingerprint

        code_fingerprint()  # of the sources as imported here, which every child runs (an edit made later is not)
    finally:
        gc.freeze()
        gc.enable()
    return count


def thread_count() -> int:
    """This process's threads, native ones included (``/proc/self/task``; where there is none, Python's own)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def parsed_command(argv: list[str], parse: Callable[[list[str]], Any] | None) -> Any:
    """``argv`` parsed by ``parse`` (``upfl``'s parser: the command's server steps); None without a parser or for a
    command line it refuses (the job says why)."""
    if parse is None:
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parse(list(map(str, argv)))
    except SystemExit:
        return None


def flush_standard_streams() -> None:
    """Flush standard output and error (before a fork, which would copy what they hold; before ``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream or pipe: nothing more to say there
            stream.flush()


def command_text(request: dict, limit: int = 160) -> str:
    """A request's command line for the log, cut to ``limit`` characters."""
    text = " ".join(["upfl", *map(str, request.get("argv", []))])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exit_code(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


@dataclass
class Job:
    """A forked command and the connection of the job process waiting for its status."""

    pid: int
    conn: socket.socket | None
    command: str
    after: Callable[[], None] | None = None


@dataclass
class ForkServer:
    """Serves ``listener``: each connection's command forked into a child running ``entry`` (:meth:`serve`)."""

    listener: socket.socket
    entry: Callable[[], int]
    parse: Callable[[list[str]], Any] | None = None
    imported_under: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    own_interpreter: dict[str, str] = field(default_factory=interpreter)
    parent: int = field(default_factory=os.getppid)
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    jobs: dict[int, Job] = field(default_factory=dict)
    stopping: bool = False
    unsafe: str | None = None
    """Why the server no longer forks (it has more than one thread), or None."""

    def serve(self) -> None:
        """Take commands until SIGTERM or until the process that started the server ends; then wait for the
        children still running (stopped with SIGTERM when that process ended without stopping the server)."""
        selector = selectors.DefaultSelector()
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the jobs, which pass it on
        selector.register(self.listener, selectors.EVENT_READ, "listener")
        selector.register(wake_read, selectors.EVENT_READ, "wake")
        listening = True
        while True:
            if os.getppid() != self.parent and not self.stopping:
                self.log("the process that started the server ended: stopping its children")
                self.stopping = True
                for job in self.jobs.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(job.pid, signal.SIGTERM)
            if self.stopping and listening:
                selector.unregister(self.listener)
                self.listener.close()
                listening = False
            self._reap(selector)
            if self.stopping and not self.jobs:
                break
            for key, _ in selector.select(timeout=1.0):
                if key.data == "listener":
                    with contextlib.suppress(OSError):
                        conn, _ = self.listener.accept()
                        self._take(conn, selector)
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 4096)
                else:
                    self._client_gone(key.data, selector)
        signal.set_wakeup_fd(-1)
        selector.close()
        os.close(wake_read)
        os.close(wake_write)

    def _stop(self, _signum: int, _frame: object) -> None:
        self.stopping = True

    def _take(self, conn: socket.socket, selector: selectors.BaseSelector) -> None:
        """Read a job's request and fork its command, or decline it (the job then runs it itself)."""
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            request, fds = receive_message_and_fds(conn, 3)
            if request is None:
                raise ValueError("the job closed its connection before its whole request")
            reason = self._decline_reason(request, fds)
            if reason is not None:
                self.log(f"declined `{command_text(request)}`: {reason}")
                send_message(conn, {"declined": reason})
                conn.close()
                return
            args = parsed_command(request["argv"], self.parse)
            ahead, after = (getattr(args, name, None) for name in (SERVER_AHEAD, SERVER_AFTER))
            if ahead is not None:
                self.run_step(command_text(request), "ahead", ahead, args, request["cwd"])
            if self.unsafe is not None:
                send_message(conn, {"declined": self.unsafe})
                conn.close()
                return
            flush_standard_streams()
            pid = os.fork()
            if pid == 0:
                self._child(request, fds)
            conn.settimeout(None)
            then = None
            if after is not None:
                then = functools.partial(self.run_step, command_text(request), "after", after, args, request["cwd"])
            self.jobs[pid] = Job(pid, conn, command_text(request), then)
            selector.register(conn, selectors.EVENT_READ, pid)
            send_message(conn, {"pid": pid})
        except (OSError, ValueError) as e:
            self.log(f"a request failed: {type(e).__name__}: {e}")
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _decline_reason(self, request: dict, fds: list[int]) -> str | None:
        if self.unsafe is not None:
            return self.unsafe
        if len(fds) != 3:
            return "the job's standard streams did not arrive"
        for key, value in self.own_interpreter.items():
            if request.get(key) != value:
                return f"another {key}: {request.get(key)} (the server's: {value})"
        name = environment_difference(self.imported_under, request.get("env", {}))
        if name is not None:
            return f"the environment variable {name} differs from the one the server imported under"
        return None

    def _child(self, request: dict, fds: list[int]) -> None:
        """Become the job's command: its streams, folder, mask, environment and arguments; then run it and exit
        with its status as its process would, after the exit handlers its modules registered (never returns)."""
        status = 1
        try:
            self.listener.close()
            for job in self.jobs.values():
                if job.conn is not None:
                    job.conn.close()
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            fds.clear()
            sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stream, as Python opens it
            sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
            os.chdir(request["cwd"])
            os.umask(int(request["umask"]))
            os.environ.clear()
            os.environ.update(request["env"])
            tempfile.tempdir = None
            sys.argv = ["upfl", *request["argv"]]
            try:
                status = exit_code(self.entry())
            except SystemExit as e:
                status = exit_code(e.code)
            except KeyboardInterrupt:  # as Python ends a process on an uncaught Ctrl-C: by the signal itself
                traceback.print_exc()
                flush_standard_streams()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - an uncaught error ends the command as it would end its process
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):  # what a process runs at its exit (logging's shutdown...)
                atexit._run_exitfuncs()
            flush_standard_streams()
            os._exit(status)

    def _reap(self, selector: selectors.BaseSelector) -> None:
        """Collect every finished child (its CPU time joins the server's) and send its job the status."""
        while self.jobs:
            try:
                pid, wait_status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.pop(pid, None)
            if job is None:
                continue
            if os.WIFSIGNALED(wait_status):
                outcome = {"signal": os.WTERMSIG(wait_status)}
            else:
                outcome = {"status": os.waitstatus_to_exitcode(wait_status)}
            self.log(f"{pid} `{job.command}`: {outcome}, {usage.ru_utime + usage.ru_stime:.2f} CPU-s")
            if job.after is not None and outcome == {"status": 0}:
                job.after()
            if job.conn is None:
                continue
            with contextlib.suppress(OSError):
                selector.unregister(job.conn)
                send_message(job.conn, outcome)
            job.conn.close()

    def run_step(self, command: str, when: str, step: Callable[[Any], str], args: Any, cwd: str) -> None:
        """Run a command's server step (``SERVER_AHEAD``, ``SERVER_AFTER``) in the job's folder ``cwd``. A step that
        fails is logged (the command, which does the same work itself, says why in its own log). Then the objects it
        made are moved out of the collector's sight, and the server checks it still has one thread: if not, it
        declines every later command."""
        started = time.process_time()
        here = os.getcwd()
        try:
            os.chdir(cwd)
            done = step(args)
        except Exception as e:  # noqa: BLE001 - the job itself meets and reports the same error
            done = f"failed ({type(e).__name__}: {e})"
        finally:
            os.chdir(here)
        gc.freeze()
        self.log(f"`{command}` {when}: {done}, {time.process_time() - started:.2f} CPU-s")
        threads = thread_count()
        if threads > 1:
            self.unsafe = f"the server has {threads} threads after a command's step: it no longer forks"
            self.log(self.unsafe)

    def _client_gone(self, pid: int, selector: selectors.BaseSelector) -> None:
        """The job process waiting for ``pid`` closed its end (killed outright): the command is stopped too."""
        job = self.jobs.get(pid)
        if job is None or job.conn is None:
            return
        selector.unregister(job.conn)
        job.conn.close()
        job.conn = None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def serve(path: str, entry: Callable[[], int], parse: Callable[[list[str]], Any] | None = None) -> int:
    """Bind ``path``, import ahead, then serve until stopped, each command run by ``entry`` in its child, after the
    server steps its command line names when ``parse`` reads them (the server process's main: ``python -m
    upfl.launch PATH``, whose entry and parser are ``upfl``'s)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)  # jobs that connect while the imports run wait in the queue
    started = time.process_time()
    server = ForkServer(listener, entry, parse)
    count = preload(server.log)
    spent = time.process_time() - started
    server.log(f"fork server {os.getpid()} at {path}: {count} modules imported in {spent:.2f} CPU-s")
    try:
        server.serve()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return 0


@dataclass
class RunningServer:
    """A started fork server: its process, socket and temporary folder (:func:`start`, :meth:`stop`)."""

    process: subprocess.Popen
    folder: str
    path: str

    def stop(self, timeout: float = 60.0) -> None:
        """Stop taking commands, wait for the server (so that its and its children's CPU time is counted in this
        process's), and remove its folder; the jobs' environment no longer names it."""
        if os.environ.get(SOCKET_ENV) == self.path:
            del os.environ[SOCKET_ENV]
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(log_path: str, environ: dict[str, str] | None = None) -> RunningServer | None:
    """Start a fork server for this process's jobs and name it in ``environ`` (default ``os.environ``, which the
    jobs inherit); None when ``UPFL_FORK_SERVER=0`` or it did not come up (the jobs then run as their own
    processes). Its log goes to ``log_path``; it stops at this process's exit at the latest."""
    env = os.environ if environ is None else environ
    if env.get(SWITCH_ENV, "1") == "0":
        return None
    folder = tempfile.mkdtemp(prefix="upfl-fork-")
    path = os.path.join(folder, "socket")
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    server_env = {k: v for k, v in env.items() if k != SOCKET_ENV}
    server_env.update(dict.fromkeys(THREAD_VARIABLES, "1"))
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "upfl.launch", path],
            env=server_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C goes to the jobs, which pass it on to their commands
        )
    running = RunningServer(process, folder, path)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(path):
        if process.poll() is not None or time.monotonic() > deadline:
            running.stop(timeout=5.0)
            return None
        time.sleep(0.01)
    env[SOCKET_ENV] = path
    atexit.register(running.stop)
    return running


def start_for_workflow(workflow: Any, log_path: str) -> RunningServer | None:
    """The workflow's ``onstart``: a fork server for a local run (none for a cluster executor, whose jobs run
    elsewhere)."""
    if not getattr(workflow, "local_exec", False):
        return None
    return start(log_path)
