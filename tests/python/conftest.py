"""Fixtures of the pinshm Python tests: each test gets its own pinshmd.

The daemon just built ($PINSHMD) runs in the foreground in user mode on
DIR/sock, DIR a fresh folder under /tmp, and dies with the test process
(PR_SET_PDEATHSIG).  The environment points nowhere else: PINSHM_SOCKET at
that socket, XDG_RUNTIME_DIR at an empty folder of DIR, PINSHM_AUTOSTART=0.
At the end the daemon is stopped with SIGTERM and must exit 0 and remove
its socket.
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import pinshm

PINSHMD = os.environ.get("PINSHMD") or "pinshmd"


def _die_with_parent():
    """In the daemon's child before exec: SIGKILL when the test process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def accepts(path):
    """Whether something accepts on the Unix socket path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    """A pinshmd on a socket of its own: dir, sock, proc."""

    def __init__(self, env=None):
        self.dir = tempfile.mkdtemp(prefix="pinshm-py-", dir="/tmp")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "pinshmd.log")
        self.proc = None
        try:
            self._start(env)
        except BaseException:
            self.cleanup()
            raise

    def _start(self, env):
        """Spawn it and wait until it accepts."""
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [PINSHMD, "-f", "--user", "-s", self.sock],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent,
                env=env,
            )
        deadline = time.monotonic() + 15
        while not accepts(self.sock):
            if self.proc.poll() is not None:
                raise RuntimeError("pinshmd exited at start (%s): %s" % (self.proc.returncode, self.logtext()))
            if time.monotonic() > deadline:
                raise RuntimeError("pinshmd does not accept on %s" % self.sock)
            time.sleep(0.01)

    def logtext(self):
        """What the daemon wrote."""
        with open(self.log, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        """SIGTERM; it must exit 0 and remove its socket."""
        self.proc.terminate()
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("pinshmd did not stop on SIGTERM")
        assert rc == 0, "pinshmd exited %s: %s" % (rc, self.logtext())
        assert not os.path.exists(self.sock), "pinshmd left its socket behind"

    def cleanup(self):
        """Kill it if it runs, and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def hermetic(monkeypatch, tmp_path):
    """An environment that reaches no daemon but the test's own."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setenv("PINSHM_SOCKET", str(tmp_path / "nobody-listens"))
    monkeypatch.setenv("PINSHM_AUTOSTART", "0")
    return tmp_path


@pytest.fixture
def daemon(hermetic, monkeypatch):
    """A pinshmd of the test's own; PINSHM_SOCKET points at it."""
    d = Daemon()
    monkeypatch.setenv("PINSHM_SOCKET", d.sock)
    try:
        yield d
        d.stop()
    finally:
        d.cleanup()


@pytest.fixture
def client(daemon):
    """A client connected to the test's daemon."""
    c = pinshm.connect(daemon.sock)
    yield c
    c.close()


_names = iter(range(1 << 30))


def new_name(prefix="t"):
    """A channel name not used before in this process."""
    return "%s%d-%d" % (prefix, os.getpid(), next(_names))


@pytest.fixture
def pair(client):
    """make(**create_args) -> (producer, consumer) of a new queue; closed after the test."""
    made = []

    def make(**kw):
        name = kw.pop("name", None) or new_name()
        kw.setdefault("capacity", 1 << 16)
        client.create(name, **kw)
        tx = client.open(name, pinshm.PRODUCER)
        rx = client.open(name, pinshm.CONSUMER)
        made.extend([tx, rx])
        return tx, rx

    yield make
    for ch in made:
        try:
            ch.close()
        except BufferError:
            pass
