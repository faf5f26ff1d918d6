"""A throw-away single-node SLURM cluster on localhost, for testing the SLURM profile for real.

`slurm_cluster()` is a context manager: it starts munged (as the munge user, on its own socket under
/run/munge), slurmctld and slurmd (both with -D, as child processes whose Popen handles it holds) from a
slurm.conf written to a temp folder, waits until `sinfo` shows the node idle, and yields a `SlurmCluster`
whose `env` points clients (sbatch, squeue, ...) at it through SLURM_CONF. On exit it cancels what is
still queued, stops every daemon it started by PID (SIGTERM, then SIGKILL), also any job-step daemon
(slurmstepd) of its slurmd still alive (found by the slurmd log file it holds open), and removes its files.
Clients and jobs also get a `srun` that finds the temp slurm.conf (see `_write_srun_shim`).

Needs root and Debian's `slurmctld slurmd slurm-client munge` (SLURM 22.05 on Debian 12). The settings
follow facts measured on these machines: proctrack/linuxproc and task/none (no cgroups, no systemd),
select/cons_tres with CR_Core_Memory and DefMemPerCPU, ReturnToService=2, one `gpu` GRES backed by
/dev/null so GPU jobs schedule on a machine without one, no slurmdbd (the profile's status command is
squeue; MinJobAge stays at its default 300 s).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = "slurmctld slurmd slurm-client munge"
BINARIES = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sinfo",
    "sbatch",
    "srun",
    "squeue",
    "scontrol",
    "scancel",
)
MUNGE_DIR = Path("/run/munge")
MUNGE_KEY = Path("/etc/munge/munge.key")
PARTITION = "gpu"  # profiles/slurm/profile.yaml: default-resources slurm_partition


class SlurmClusterError(RuntimeError):
    """The local cluster could not be started (the message says why and what to install)."""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    partition: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A SLURM client command (sinfo, squeue, scontrol, ...) against this cluster."""
        proc = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise SlurmClusterError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def job(self, jobid: str) -> dict[str, str]:
        """`scontrol show job` as a dict (completed jobs stay visible for MinJobAge, 300 s)."""
        out = self.run("scontrol", "-o", "show", "job", str(jobid)).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def logs(self, chars: int = 3000) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name} (last {chars} chars) ---\n{text[-chars:]}")
        return "\n".join(parts)


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_hardware() -> dict[str, str]:
    """CPUs, topology and RealMemory of this machine as slurmd sees them (`slurmd -C`)."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30).stdout
    found = dict(re.findall(r"(\w+)=(\S+)", out.splitlines()[0] if out else ""))
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    if not all(k in found for k in keys):
        cpus = os.cpu_count() or 1
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        return {"CPUs": str(cpus), "RealMemory": str(mem)}
    return {k: found[k] for k in keys}


def _write_conf(root: Path, node: str, munge_socket: Path, def_mem_per_cpu: int) -> Path:
    hw = _node_hardware()
    hardware = " ".join(f"{k}={v}" for k, v in hw.items())
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(f"""\
# Written by tests/slurm_cluster.py; removed when the cluster stops.
ClusterName=upfltest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={def_mem_per_cpu}
ReturnToService=2
GresTypes=gpu
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={host} {hardware} Gres=gpu:1 State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    (root / "gres.conf").write_text("AutoDetect=off\nName=gpu File=/dev/null\n")
    (root / "state").mkdir()
    (root / "spool").mkdir()
    return conf


def _write_srun_shim(root: Path, conf: Path) -> Path:
    """A `srun` that finds this cluster's slurm.conf; returns its folder (first on the cluster's PATH).

    The SLURM plugin's job step (snakemake-executor-plugin-slurm-jobstep 0.6.1) runs the job as
    `srun -n1 ... python -m snakemake ...` with every SLURM_* variable but the job's identity removed
    from the environment, SLURM_CONF included, so the inner srun looks for /etc/slurm/slurm.conf (where
    real clusters keep it) or a configless slurmd, and fails with "Could not establish a configuration
    source". Rather than write this throw-away cluster's config into /etc (shared by every process on
    the machine, left behind by a crash), jobs get a srun that sets SLURM_CONF back.
    """
    shims = root / "bin"
    shims.mkdir()
    srun = shims / "srun"
    srun.write_text(f"#!/bin/sh\nSLURM_CONF='{conf}' exec '{_which('srun')}' \"$@\"\n")
    srun.chmod(0o755)
    return shims


def _ensure_munge_dir() -> bool:
    """/run/munge owned by munge (no systemd to create it). True when this call created it."""
    pw = pwd.getpwnam("munge")
    created = not MUNGE_DIR.exists()
    MUNGE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chown(MUNGE_DIR, pw.pw_uid, pw.pw_gid)
    os.chmod(MUNGE_DIR, 0o755)
    return created


def _ensure_munge_key() -> None:
    """The Debian package creates /etc/munge/munge.key; create one the same way when it is missing."""
    if MUNGE_KEY.exists():
        return
    pw = pwd.getpwnam("munge")
    MUNGE_KEY.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(MUNGE_KEY.parent, pw.pw_uid, pw.pw_gid)
    fd = os.open(MUNGE_KEY, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(1024))
    os.chown(MUNGE_KEY, pw.pw_uid, pw.pw_gid)


def _wait(what: str, ready, timeout: float, cluster: SlurmCluster | None = None, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if cluster is not None:
            dead = [
                f"{name} (pid {p.pid}, exit {p.returncode})"
                for name, p in cluster.processes.items()
                if p.poll() is not None
            ]
            if dead:
                raise SlurmClusterError(f"while waiting for {what}: {', '.join(dead)} exited\n{cluster.logs()}")
        time.sleep(interval)
    raise SlurmClusterError(
        f"timed out after {timeout:.0f} s waiting for {what}\n" + (cluster.logs() if cluster is not None else "")
    )


def _munge_works(sock: Path) -> bool:
    if not sock.exists():
        return False
    enc = subprocess.run([_which("munge"), "-n", "-S", str(sock)], capture_output=True, timeout=10)
    if enc.returncode != 0:
        return False
    dec = subprocess.run([_which("unmunge"), "-S", str(sock)], input=enc.stdout, capture_output=True, timeout=10)
    return dec.returncode == 0


def _node_state(cluster: SlurmCluster) -> str:
    proc = cluster.run("sinfo", "-h", "-N", "-n", cluster.node, "-o", "%T", check=False, timeout=10)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _holders_of(path: Path) -> list[int]:
    """PIDs of processes that hold `path` open (slurmd's job-step daemons keep its log file open)."""
    pids = []
    target = str(path)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _stop(processes: dict[str, subprocess.Popen], timeout: float = 20) -> list[str]:
    """SIGTERM each process (in the given order), then SIGKILL what is left; returns what needed SIGKILL."""
    killed = []
    for name, proc in processes.items():
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                killed.append(f"{name} (pid {proc.pid})")
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
    return killed


@contextlib.contextmanager
def slurm_cluster(start_timeout: float = 60, def_mem_per_cpu: int = 500) -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        raise SlurmClusterError(
            f"SLURM is not installed (missing: {', '.join(missing)}). Install it with "
            f"`apt-get install -y {PACKAGES}` (Debian; .ci/run does this)."
        )
    if os.geteuid() != 0:
        raise SlurmClusterError("the local SLURM cluster needs root (it runs munged as munge, slurmd as root)")
    try:
        pwd.getpwnam("munge")
        grp.getgrnam("munge")
    except KeyError:
        raise SlurmClusterError(
            f"no munge user; reinstall the Debian packages: apt-get install -y {PACKAGES}"
        ) from None

    root = Path(tempfile.mkdtemp(prefix="upfl-slurm-"))
    token = root.name
    munge_files = [MUNGE_DIR / f"{token}.{ext}" for ext in ("socket", "socket.lock", "pid", "seed", "log")]
    munge_socket, _, munge_pid, munge_seed, munge_log = munge_files
    created_munge_dir = False
    cluster = None
    processes: dict[str, subprocess.Popen] = {}
    outputs = []
    try:
        created_munge_dir = _ensure_munge_dir()
        _ensure_munge_key()
        conf = _write_conf(root, socket.gethostname().split(".")[0], munge_socket, def_mem_per_cpu)
        shims = _write_srun_shim(root, conf)
        env = {**os.environ, "SLURM_CONF": str(conf), "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}"}
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_")) and k != "SLURM_CONF"]:
            del env[key]  # a cluster around pytest must not leak its job's settings into this one
        cluster = SlurmCluster(
            root=root,
            conf=conf,
            node=socket.gethostname().split(".")[0],
            partition=PARTITION,
            env=env,
            processes=processes,
        )

        def start(name: str, cmd: list[str], **kwargs) -> None:
            out = open(root / f"{name}.stdout.log", "wb")  # noqa: SIM115 - open while the daemon runs; closed in stop()
            outputs.append(out)
            processes[name] = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )

        munge_pw = pwd.getpwnam("munge")
        start(
            "munged",
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--pid-file={munge_pid}",
                f"--seed-file={munge_seed}",
                f"--log-file={munge_log}",
                f"--key-file={MUNGE_KEY}",
            ],
            user=munge_pw.pw_uid,
            group=munge_pw.pw_gid,
            extra_groups=[],
            cwd="/",
        )
        _wait("munged", lambda: _munge_works(munge_socket), start_timeout, cluster)
        start("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(conf)], cwd=root)
        _wait(
            "slurmctld",
            lambda: cluster.run("scontrol", "ping", check=False, timeout=10).returncode == 0,
            start_timeout,
            cluster,
        )
        start("slurmd", [_which("slurmd"), "-D", "-f", str(conf), "-N", cluster.node], cwd=root)
        _wait(f"node {cluster.node} idle in sinfo", lambda: _node_state(cluster) == "idle", start_timeout, cluster)
        yield cluster
    finally:
        if cluster is not None and processes.get("slurmctld") and processes["slurmctld"].poll() is None:
            cluster.run("scancel", "--quiet", "--full", "--partition", PARTITION, check=False, timeout=15)
            with contextlib.suppress(SlurmClusterError):
                _wait(
                    "the queue to empty",
                    lambda: not cluster.run("squeue", "-h", check=False).stdout.strip(),
                    30,
                    None,
                    interval=0.5,
                )
        # slurmd's job-step daemons (slurmstepd) are its double-forked children: find them by the log file they
        # share with slurmd, before slurmd goes, and stop them by PID after it.
        steps = [pid for pid in _holders_of(root / "slurmd.log") if not any(p.pid == pid for p in processes.values())]
        order = {name: processes[name] for name in ("slurmd", "slurmctld", "munged") if name in processes}
        _stop(order)
        for pid in steps:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for out in outputs:
            out.close()
        for path in munge_files:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if created_munge_dir:
            with contextlib.suppress(OSError):
                MUNGE_DIR.rmdir()
        shutil.rmtree(root, ignore_errors=True)
