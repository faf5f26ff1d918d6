"""The workflow's fork server (upfl.pipeline.forkserver) and the ``upfl`` entry point that hands it commands
(upfl.launch): a served command behaves as its own process would (files, streams, exit status, signals), a job it
cannot serve runs in its own process, and the server never outlives the run that started it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from upfl.launch import SOCKET_ENV, run_on_server
from upfl.launch import request as request_for
from upfl.pipeline.fork_protocol import receive_message, send_message
from upfl.pipeline.forkserver import THREAD_VARIABLES, environment_difference, start

ROOT = Path(__file__).resolve().parents[2]
UPFL = [sys.executable, "-c", "import sys; from upfl.launch import main; sys.exit(main())"]


def pipeline_benchmark():
    spec = importlib.util.spec_from_file_location("pipeline_benchmark", ROOT / "benchmarks" / "pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def job_environment(server_path: str | None) -> dict[str, str]:
    """A single-threaded job's environment, as Snakemake gives it (the server's socket named when given)."""
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    env.update(dict.fromkeys(THREAD_VARIABLES, "1"))
    if server_path:
        env[SOCKET_ENV] = server_path
    return env


@pytest.fixture
def server(tmp_path):
    log = tmp_path / "server.log"
    running = start(str(log), environ={k: v for k, v in os.environ.items() if k != SOCKET_ENV})
    assert running is not None, log.read_text() if log.exists() else "no log"
    yield running, log
    running.stop()
    assert not Path(running.folder).exists()


def served(log: Path) -> list[str]:
    """The server's lines for finished commands: ``<pid> `<command>`: {outcome}, <cpu> CPU-s``."""
    deadline = time.time() + 10
    while time.time() < deadline:
        lines = [ln for ln in log.read_text().splitlines() if ln.endswith("CPU-s") and "`" in ln]
        if lines:
            return lines
        time.sleep(0.05)
    return []


def synth(dest: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*UPFL, "synth", "--setting", "synthetic_1_1", "--resources", str(dest), "--draw", "synthetic_1_1=3", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_served_command_writes_the_same_files_and_says_the_same_as_its_own_process(server, tmp_path):
    running, log = server
    here = synth(tmp_path / "here", job_environment(None))
    there = synth(tmp_path / "there", job_environment(running.path))
    assert here.returncode == there.returncode == 0, there.stderr
    assert [ln for ln in log.read_text().splitlines() if "declined" in ln] == []
    (line,) = served(log)
    assert "`upfl synth --setting synthetic_1_1" in line and "{'status': 0}" in line
    files = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*") if p.is_file())
    assert files
    for rel in files:
        assert (tmp_path / "here" / rel).read_bytes() == (tmp_path / "there" / rel).read_bytes(), rel
    assert here.stdout.replace(str(tmp_path / "here"), "X") == there.stdout.replace(str(tmp_path / "there"), "X")
    # benchmarks/pipeline.py reads the same log for its figures
    figures = pipeline_benchmark().fork_server_figures(log)
    assert figures["fork_server"] and figures["fork_server_declined"] == 0 and figures["fork_server_imports_cpu_s"] > 0
    assert list(figures["fork_server_cpu_s_by_command"]) == ["synth"]


def test_a_served_command_runs_in_the_jobs_folder_with_its_streams_and_exit_status(server, tmp_path):
    running, log = server
    work = tmp_path / "job"
    work.mkdir()
    # a relative path, and both streams redirected by the job's shell into one file, as the workflow's rules do
    shell = subprocess.run(
        f"{' '.join(UPFL[:2])} '{UPFL[2]}' synth --setting nope --resources data --draw nope=0 > job.log 2>&1",
        shell=True,
        cwd=work,
        env=job_environment(running.path),
        timeout=120,
    )
    assert shell.returncode == 2
    assert "upfl synth: error:" in (work / "job.log").read_text()
    assert "{'status': 2}" in served(log)[0]
    ok = subprocess.run(
        [*UPFL, "synth", "--setting", "synthetic_iid", "--resources", "data", "--draw", "synthetic_iid=1"],
        cwd=work,
        env=job_environment(running.path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert (work / "data" / "data" / "generated" / "synthetic_iid").is_dir()


def test_a_job_whose_imports_would_differ_runs_in_its_own_process(server, tmp_path):
    running, log = server
    env = job_environment(running.path)
    env["OMP_NUM_THREADS"] = "2"  # a two-thread job: the libraries read this when they are imported
    env["PS1"] = "$ "  # a shell's variable is not one of them
    result = synth(tmp_path / "own", env)
    assert result.returncode == 0, result.stderr
    assert any((tmp_path / "own").rglob("*.json"))
    declined = [ln for ln in log.read_text().splitlines() if ln.startswith("declined")]
    assert len(declined) == 1 and "OMP_NUM_THREADS" in declined[0]
    assert not [ln for ln in log.read_text().splitlines() if ln.endswith("CPU-s") and "`" in ln]


def test_the_server_forks_from_one_thread_after_its_imports(server):
    """A fork copies only the forking thread: a thread pool started by an import (OpenMP's, numba's, torch's) would
    leave its locks held in every child. The server imports torch, numba and the rest and still has one thread."""
    running, log = server
    deadline = time.time() + 60
    while "modules imported" not in log.read_text():
        assert time.time() < deadline, log.read_text()
        time.sleep(0.05)
    assert len(os.listdir(f"/proc/{running.process.pid}/task")) == 1


def test_after_the_kernels_warm_up_the_server_holds_the_kernels_and_still_one_thread(server, tmp_path):
    """The workflow's warm-up job fills numba's cache; the server then loads the single-threaded kernels itself, so
    a training job forked after it starts with them, and stays single-threaded (a fork would copy no pool). A run
    it serves then gives the same numbers as the same run in its own process."""
    running, log = server
    env = job_environment(running.path)
    warmed = subprocess.run(
        [*UPFL, "kernels", "warm-up", "--threads", "1", "--out", str(tmp_path / "numba.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert warmed.returncode == 0, warmed.stderr
    deadline = time.time() + 60
    while "` after: kernels loaded," not in log.read_text():
        assert time.time() < deadline, log.read_text()
        time.sleep(0.05)
    assert len(os.listdir(f"/proc/{running.process.pid}/task")) == 1
    assert synth(tmp_path, job_environment(None)).returncode == 0
    data = tmp_path / "data" / "generated" / "synthetic_1_1"
    run = ["run", "--data", str(data), "--rounds", "4", "--algorithm", "fedprox", "--mu", "0.1", "--seed", "1"]
    for name, run_env in (("served", env), ("own", job_environment(None))):
        done = subprocess.run([*UPFL, *run, "--out", str(tmp_path / name)], env=run_env, capture_output=True)
        assert done.returncode == 0, done.stderr
    assert sum("`upfl run --data" in line for line in served(log)) == 1
    summaries = [json.loads((tmp_path / name / "summary.json").read_text()) for name in ("served", "own")]
    assert summaries[0]["final"] == summaries[1]["final"]
    served_rows, own_rows = ((tmp_path / name / "metrics.csv").read_text().splitlines() for name in ("served", "own"))
    assert served_rows[0].split(",")[-2:] == ["wall_s", "cum_wall_s"]
    assert [r.rsplit(",", 2)[0] for r in served_rows] == [r.rsplit(",", 2)[0] for r in own_rows]


def test_the_server_reads_a_bundles_data_ahead_in_the_jobs_folder(server, tmp_path):
    """``upfl run-many`` has the server read its bundle's data sets (paths relative to the job's folder) before
    forking it, so that later bundles on the same files find them read; the runs are those of its own process."""
    running, log = server
    assert synth(tmp_path, job_environment(None)).returncode == 0
    config = {"rounds": 4, "algorithm": {"name": "fedprox", "mu": 0.1}, "seed": 1, "checkpoint": {"every": 0}}
    runs = [
        {"id": f"r{seed}", "data": "../data/generated/synthetic_1_1", "out": f"runs/r{seed}", "config": config}
        for seed in (0, 1)
    ]
    (tmp_path / "spec.json").write_text(json.dumps({"bundle": "b", "threads": 1, "concurrent": 1, "runs": runs}))
    served_env = job_environment(running.path)
    for name, env in (("served", served_env), ("own", job_environment(None)), ("served_again", served_env)):
        (tmp_path / name).mkdir()
        done = subprocess.run(
            [*UPFL, "run-many", "--spec", "../spec.json", "--no-store"],
            cwd=tmp_path / name,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    steps = re.findall(r"`upfl run-many --spec \.\./spec\.json --no-store` ahead: (.*), [0-9.]+ CPU-s", log.read_text())
    assert steps == ["1 data set(s): 1 read, 0 read before", "1 data set(s): 0 read, 1 read before"]
    for rid in ("r0", "r1"):
        rows = [
            (tmp_path / name / "runs" / rid / "metrics.csv").read_text().splitlines()
            for name in ("served", "own", "served_again")
        ]
        assert [r.rsplit(",", 2)[0] for r in rows[0]] == [r.rsplit(",", 2)[0] for r in rows[1]]
        assert [r.rsplit(",", 2)[0] for r in rows[2]] == [r.rsplit(",", 2)[0] for r in rows[1]]


def test_a_command_ends_as_its_process_would_exit_handlers_and_status(tmp_path):
    """A child runs the exit handlers its command registered (a log's last lines, flushed by logging's), then
    exits with the command's status."""
    path = str(tmp_path / "socket")
    entry = (
        "import atexit, sys\n"
        "from upfl.pipeline.forkserver import serve\n"
        "def entry():\n"
        "    atexit.register(lambda: open(sys.argv[1], 'w').write('exit handlers ran'))\n"
        "    return 3\n"
        f"serve({path!r}, entry)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", entry], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not os.path.exists(path):
            assert time.time() < deadline and server.poll() is None
            time.sleep(0.05)
        marker = tmp_path / "marker"
        assert run_on_server(path, [str(marker)]) == 3
        assert marker.read_text() == "exit handlers ran"
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode == 0 and not os.path.exists(path)


def test_a_forked_command_keys_its_runs_by_the_code_the_server_imported(tmp_path):
    """A source edited while the server runs is not the code its children run: they keep the fingerprint of the
    sources the server imported (the finished-run store's and the checkpoints' key), as a process keeps its own."""
    import shutil

    import upfl

    copy = tmp_path / "src" / "upfl"
    shutil.copytree(Path(upfl.__file__).resolve().parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = str(tmp_path / "socket")
    marker = tmp_path / "fingerprint"
    entry = (
        "import sys\n"
        "from upfl.pipeline.forkserver import preload, serve\n"
        "def entry():\n"
        "    from upfl.engine.checkpoints import code_fingerprint\n"
        "    open(sys.argv[1], 'w').write(code_fingerprint())\n"
        "    return 0\n"
        f"serve({path!r}, entry)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    log = tmp_path / "server.log"
    with log.open("w") as log_file:
        server = subprocess.Popen([sys.executable, "-c", entry], env=env, stderr=log_file)
    try:
        deadline = time.time() + 60
        while "modules imported" not in log.read_text():  # its imports done
            assert time.time() < deadline and server.poll() is None, log.read_text()
            time.sleep(0.05)
        from upfl.engine.checkpoints import package_fingerprint

        imported = package_fingerprint(copy)
        solver = copy / "solvers" / "numba_backend" / "training.py"
        solver.write_text(solver.read_text() + "\n# edited while the server runs\n")
        request_env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        message = {**request_for([str(marker)]), "env": request_env}
        message["package"] = os.path.realpath(copy)
        send_message(sock, message, [0, 1, 2])
        assert "pid" in receive_message(sock), "declined"
        assert receive_message(sock) == {"status": 0}
        sock.close()
        assert marker.read_text() == imported != package_fingerprint(copy)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_environment_that_matters_is_what_an_import_reads():
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "HOME": "/h"}
    assert environment_difference(base, {**base, "PS1": "$ ", "UPFL_WORKFLOW_CONFIG": "x", "TMPDIR": "/t"}) is None
    assert environment_difference(base, {**base, "NUMBA_NUM_THREADS": "4"}) == "NUMBA_NUM_THREADS"
    assert environment_difference(base, {k: v for k, v in base.items() if k != "HOME"}) == "HOME"
    assert environment_difference(base, {**base, "PYTHONHASHSEED": "0"}) == "PYTHONHASHSEED"


def long_run_job(server_path: str, log: Path, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A job training a long run through the server, and its forked command's pid, once it is training."""
    data = tmp_path / "data"
    assert synth(data, job_environment(None)).returncode == 0
    folder = next(p for p in (data / "data" / "generated").iterdir() if p.is_dir())
    job = subprocess.Popen(
        [*UPFL, "run", "--data", str(folder), "--out", str(tmp_path / "run"), "--rounds", "200000"],
        env=job_environment(server_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return job, forked_pid(log, job)


def test_a_signal_to_the_job_stops_its_command_and_the_job_ends_by_it(server, tmp_path):
    running, log = server
    job, pid = long_run_job(running.path, log, tmp_path)
    job.send_signal(signal.SIGTERM)
    job.wait(timeout=60)
    assert job.returncode == -signal.SIGTERM
    (line,) = served(log)
    assert line.startswith(f"{pid} ") and f"{{'signal': {int(signal.SIGTERM)}}}" in line
    assert not alive(pid)


def test_a_job_killed_outright_takes_its_command_with_it(server, tmp_path):
    running, log = server
    job, pid = long_run_job(running.path, log, tmp_path)
    job.kill()  # SIGKILL: nothing is passed on, the server sees the connection close
    job.wait(timeout=30)
    (line,) = served(log)
    assert line.startswith(f"{pid} ") and "'signal'" in line
    assert not alive(pid)


def test_without_a_server_the_command_runs_in_its_own_process(tmp_path):
    assert run_on_server(str(tmp_path / "no-such-socket"), ["--version"]) is None
    env = job_environment(str(tmp_path / "no-such-socket"))
    result = subprocess.run([*UPFL, "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and re.search(r"\d+\.\d+", result.stdout + result.stderr)


def test_switched_off_no_server_is_started(tmp_path):
    env = {"UPFL_FORK_SERVER": "0"}
    assert start(str(tmp_path / "log"), environ=env) is None
    assert SOCKET_ENV not in env


def test_the_server_stops_when_the_run_that_started_it_ends_without_stopping_it(tmp_path):
    log = tmp_path / "server.log"
    starter = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from upfl.pipeline.forkserver import start; "
            f"s = start({str(log)!r}, environ=dict(os.environ)); print(s.process.pid, flush=True); os._exit(0)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    pid = int(starter.stdout.split()[0])
    deadline = time.time() + 20
    while time.time() < deadline and alive(pid):
        time.sleep(0.1)
    assert not alive(pid), log.read_text()


def forked_pid(log: Path, job: subprocess.Popen) -> int:
    """The pid of ``job``'s forked command, once it is training (its first lines are in the server's log only at
    the end, so the child is found among the server's)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        assert job.poll() is None, job.stderr.read() if job.stderr else job.returncode
        children = children_of(server_pid(log))
        if children:
            time.sleep(1.0)  # into its rounds
            return children[0]
        time.sleep(0.05)
    raise AssertionError("the command was not forked")


def server_pid(log: Path) -> int:
    match = re.search(r"fork server (\d+) at", log.read_text())
    while match is None:
        time.sleep(0.05)
        match = re.search(r"fork server (\d+) at", log.read_text())
    return int(match.group(1))


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
