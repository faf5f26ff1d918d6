"""A Flower deployment on 127.0.0.1: one ``flower-superlink`` and N ``flower-supernode`` processes, TLS with
certificates made here (a CA and a server certificate for 127.0.0.1, ``cryptography``), and SuperNode
authentication (a P-384 key pair per node, each public key registered with ``flwr supernode register``).

Every process is started by :class:`Deployment` and stopped by it, by PID (terminate, then kill after a grace
period); ports are free ports picked at start. The apps run in the current environment
(``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tls(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 and localhost signed by it (PEM files in ``folder``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("upfl test CA"))
        .issuer_name(name("upfl test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": folder / "ca.crt", "cert": folder / "server.pem", "key": folder / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(paths["key"], 0o600)
    return paths


def make_node_key(folder: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode's P-384 key pair in OpenSSH format (what ``ssh-keygen -t ecdsa -b 384`` writes)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / name, folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    os.chmod(private, 0o600)
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n"
    )
    return private, public


class Deployment:
    """SuperLink and SuperNodes on 127.0.0.1 over TLS with node authentication; ``with Deployment(...) as d``."""

    def __init__(self, root: Path, num_nodes: int, startup_s: float = 180.0) -> None:
        self.root, self.num_nodes, self.startup_s = Path(root), num_nodes, startup_s
        self.bindir = Path(sys.executable).parent
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.connection = "upfl-tls"
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.root / "flwr-home"),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "PATH": f"{self.bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        self.logs[name] = log
        with open(log, "wb") as f:
            proc = subprocess.Popen(args, env=self.env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = proc
        return proc

    def _flwr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bindir / "flwr"), *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def __enter__(self) -> Deployment:
        try:
            self._up()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _up(self) -> None:
        self.tls = make_tls(self.root / "tls")
        home = self.root / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{self.connection}"\n\n[superlink.{self.connection}]\n'
            f'address = "127.0.0.1:{self.port}"\nroot-certificates = "{self.tls["ca"]}"\n'
        )
        self.superlink_command = [
            str(self.bindir / "flower-superlink"),
            "--ssl-ca-certfile",
            str(self.tls["ca"]),
            "--ssl-certfile",
            str(self.tls["cert"]),
            "--ssl-keyfile",
            str(self.tls["key"]),
            "--enable-supernode-auth",
            "--disable-runtime-dependency-installation",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self._start("superlink", self.superlink_command)
        context = ssl.create_default_context(cafile=str(self.tls["ca"]))
        deadline = time.monotonic() + self.startup_s
        while True:
            if self.processes["superlink"].poll() is not None:
                raise RuntimeError("flower-superlink exited:\n" + self.logs["superlink"].read_text()[-3000:])
            try:
                urllib.request.urlopen(f"https://127.0.0.1:{self.port}/health", timeout=2, context=context)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"flower-superlink: no answer over TLS within {self.startup_s:g} s") from None
                time.sleep(0.5)
        keys = self.root / "node-keys"
        keys.mkdir(exist_ok=True)
        self.supernode_commands = {}
        for i in range(self.num_nodes):
            private, public = make_node_key(keys, f"node{i}")
            done = self._flwr("supernode", "register", str(public), self.connection)
            if done.returncode != 0:
                raise RuntimeError(f"flwr supernode register node{i}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
            self.supernode_commands[i] = [
                str(self.bindir / "flower-supernode"),
                "--root-certificates",
                str(self.tls["ca"]),
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--auth-supernode-private-key",
                str(private),
                "--auth-supernode-public-key",
                str(public),
                "--node-config",
                f"partition-id={i}",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
            ]
            self._start(f"supernode{i}", self.supernode_commands[i])

    def start_unregistered_node(self) -> subprocess.Popen:
        """A SuperNode with a key pair the SuperLink never registered (node authentication must refuse it)."""
        private, public = make_node_key(self.root / "node-keys", "unregistered")
        command = list(self.supernode_commands[0])
        for flag, value in (
            ("--auth-supernode-private-key", private),
            ("--auth-supernode-public-key", public),
            ("--port", free_port()),
        ):
            command[command.index(flag) + 1] = str(value)
        return self._start("unregistered", command)

    def listed_nodes(self) -> list[dict]:
        """``flwr supernode list``: the SuperNodes the SuperLink knows."""
        import json

        done = self._flwr("supernode", "list", self.connection, "--format", "json")
        if done.returncode != 0:
            raise RuntimeError(f"flwr supernode list: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        return json.loads(done.stdout)["nodes"]

    def run(self, app: Path, run_config: str, on_line=None, timeout: float = 600.0) -> subprocess.CompletedProcess:
        """``flwr run APP <connection> --stream --run-config ...``; ``on_line(line)`` sees each line as it comes."""
        args = [str(self.bindir / "flwr"), "run", str(app), self.connection, "--stream", "--run-config", run_config]
        proc = subprocess.Popen(
            args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.processes["flwr-run"] = proc
        lines: list[str] = []
        timer = threading.Timer(timeout, lambda: self._signal(proc, signal.SIGKILL))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            proc.wait()
        finally:
            timer.cancel()
        return subprocess.CompletedProcess(args, proc.returncode, "".join(lines), "")

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        """Signal the process group of a process this deployment started (it leads its own session)."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    def kill_node(self, i: int) -> None:
        """SIGKILL SuperNode i (and the processes it started), as a machine that goes down."""
        proc = self.processes[f"supernode{i}"]
        self._signal(proc, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        """Terminate every process this deployment started, with their process groups and every process they
        started (the SuperLink's and SuperNodes' SuperExec and app processes, some in sessions of their own), by PID;
        kill what is left after 20 s."""
        import psutil

        started = []
        for proc in self.processes.values():
            with contextlib.suppress(psutil.Error):
                started += psutil.Process(proc.pid).children(recursive=True)
        for proc in self.processes.values():
            self._signal(proc, signal.SIGTERM)
        for child in started:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        deadline = time.monotonic() + 20
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait(timeout=10)
        _, alive = psutil.wait_procs(started, timeout=max(0.1, deadline - time.monotonic()))
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
