"""Private Redis and PostgreSQL instances for fault tests: each on a free port of its own, in a
temporary folder, stopped and removed afterwards. A fault test stops and restarts only these,
never the machine's shared servers."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, up: bool, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                answering = True
        except OSError:
            answering = False
        if answering == up:
            return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} still {'down' if up else 'up'} after {timeout_s} s")


class PrivateRedis:
    """``redis-server`` on a free loopback port, no persistence; stop() and start() again keep
    the port, so clients reconnect to the same URL."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="headroom-redis-")
        self.process: subprocess.Popen | None = None

    @property
    def available(self) -> bool:
        return self.binary is not None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", self.folder]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None
        _wait_port(self.port, up=False)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (``initdb`` + ``pg_ctl``) on a free port, trust auth on
    loopback. Needs the server binaries; run as root, the cluster belongs to ``postgres``."""

    def __init__(self):
        self.bindir = _pg_bindir()
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="headroom-pg-")
        self.data = os.path.join(self.folder, "data")
        self.user = "postgres" if os.geteuid() == 0 else None

    @property
    def available(self) -> bool:
        if self.bindir is None:
            return False
        if os.geteuid() == 0:
            with contextlib.suppress(KeyError):
                pwd.getpwnam("postgres")
                return True
            return False
        return True

    def url(self, name: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *command: str, timeout: float = 120) -> None:
        if self.user:
            owner = pwd.getpwnam(self.user)
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
            command = ("runuser", "-u", self.user, "--", *command)
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)

    def create(self) -> None:
        initdb = os.path.join(self.bindir, "initdb")
        self._run(initdb, "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def _ctl(self, action: str) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder}"
        pg_ctl = os.path.join(self.bindir, "pg_ctl")
        log = os.path.join(self.folder, "server.log")  # not a pipe: the server outlives pg_ctl
        self._run(pg_ctl, "-D", self.data, "-o", options, "-l", log, "-w", "-m", "fast", action)

    def start(self) -> None:
        self._ctl("start")
        _wait_port(self.port, up=True)

    def stop(self) -> None:
        self._ctl("stop")

    def restart(self) -> float:
        """Restart the server; return how long it was not answering (seconds)."""
        started = time.monotonic()
        self._ctl("restart")
        _wait_port(self.port, up=True)
        return time.monotonic() - started

    def create_database(self) -> str:
        import psycopg

        name = f"headroom_fault_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'create database "{name}"')
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _pg_bindir() -> str | None:
    root = "/usr/lib/postgresql"
    if os.path.isdir(root):
        for version in sorted(os.listdir(root), key=lambda v: int(v) if v.isdigit() else 0)[::-1]:
            candidate = os.path.join(root, version, "bin")
            if os.path.exists(os.path.join(candidate, "initdb")):
                return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None
