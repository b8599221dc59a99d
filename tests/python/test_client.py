"""pinshm.connect() and pinshm.Client: connecting, names, errors."""

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import pinshm
from conftest import PINSHMD, new_name


def test_connect_explicit_and_default(daemon):
    with pinshm.connect(daemon.sock) as c:
        assert not c.closed
        c.create("a")
    assert c.closed
    # No socket argument: $PINSHM_SOCKET, which the fixture points at the daemon.
    with pinshm.connect() as c:
        assert [e["name"] for e in c.list()] == []  # "a" went with its creator's connection


def test_connect_no_daemon(hermetic):
    with pytest.raises(pinshm.Error) as ei:
        pinshm.connect(str(hermetic / "none"))
    e = ei.value
    assert isinstance(e, OSError)
    assert e.errno == errno.ENOENT
    assert e.detail  # the library's reason
    assert e.detail in str(e)
    # The default socket of the environment: nobody listens there either.
    with pytest.raises(pinshm.Error) as ei:
        pinshm.connect()
    assert ei.value.errno in (errno.ENOENT, errno.ECONNREFUSED)


def test_autostart(hermetic, monkeypatch):
    sock = str(hermetic / "auto.sock")
    monkeypatch.delenv("PINSHM_AUTOSTART")
    monkeypatch.setenv("PINSHMD", PINSHMD)
    monkeypatch.setenv("PINSHM_AUTOSTART_IDLE", "1")
    with pytest.raises(pinshm.Error):
        pinshm.connect(sock)  # not allowed unless asked for
    with pinshm.connect(sock, autostart=True) as c:
        c.create("auto")
        assert c.stat("auto")["name"] == "auto"
        st = c.status()
        assert st["user_mode"] and st["connections"] >= 1
    try:
        deadline = time.monotonic() + 20
        while os.path.exists(sock) and time.monotonic() < deadline:  # it exits once idle
            time.sleep(0.1)
        assert not os.path.exists(sock)
    finally:
        if os.path.exists(sock):
            os.kill(st["pid"], signal.SIGKILL)


def test_status_shutdown(daemon):
    with pinshm.connect(daemon.sock) as c:
        assert c.status()["pid"] == daemon.proc.pid
        c.shutdown_daemon()
    assert daemon.proc.wait(10) == 0
    assert not os.path.exists(daemon.sock)
    daemon.stop = lambda: None  # stopped already


def test_autostart_forbidden(hermetic, monkeypatch):
    monkeypatch.setenv("PINSHMD", PINSHMD)
    with pytest.raises(pinshm.Error):
        pinshm.connect(str(hermetic / "no.sock"), autostart=True)  # PINSHM_AUTOSTART=0
    assert not os.path.exists(str(hermetic / "no.sock"))


def test_create_stat_list_unlink(client):
    client.create("q", capacity=1 << 16, max_producers=2, max_consumers=3, mode=0o640)
    client.create("t", kind=pinshm.TOPIC, overrun=True, capacity=1 << 14, persistent=True)
    s = client.stat("q")
    assert (s["name"], s["kind"], s["capacity"]) == ("q", "queue", 1 << 16)
    assert (s["max_producers"], s["max_consumers"], s["mode"]) == (2, 3, 0o640)
    assert s["uid"] == os.getuid() and s["producers"] == 0 and s["messages"] == 0
    assert s["locking"] is False and s["state"] & 0x40 == 0
    t = client.stat("t")
    assert t["kind"] == "topic" and t["flags"] == pinshm.OVERRUN and t["persistent"]
    assert [e["name"] for e in client.list()] == ["q", "t"]
    client.unlink("t")
    assert [e["name"] for e in client.list()] == ["q"]
    with pytest.raises(pinshm.Error) as ei:
        client.stat("t")
    assert ei.value.errno == errno.ENOENT


def test_errors(client):
    client.create("dup")
    with pytest.raises(pinshm.Error) as ei:
        client.create("dup")
    assert ei.value.errno == errno.EEXIST and ei.value.detail
    with pytest.raises(pinshm.Error) as ei:
        client.create("bad name!")
    assert ei.value.errno == errno.EINVAL and "name" in ei.value.detail
    with pytest.raises(pinshm.Error) as ei:
        client.create("badcap", capacity=5000)
    assert ei.value.errno == errno.EINVAL
    # Out of the field's range: refused, not taken modulo it (a 1 MiB
    # channel for 2**64 + 2**20, one producer for 2**32 + 1).
    for args in ({"capacity": 2**64 + 2**20}, {"max_producers": 2**32 + 1}, {"max_consumers": -1},
                 {"mode": 2**32 + 0o600}):
        with pytest.raises(OverflowError):
            client.create("wraps", **args)
    with pytest.raises(TypeError):
        client.create("wraps", capacity=1.5)
    assert not any(e["name"] == "wraps" for e in client.list())
    with pytest.raises(pinshm.Error) as ei:
        client.open("missing", pinshm.CONSUMER)
    assert ei.value.errno == errno.ENOENT
    with pytest.raises(ValueError):
        client.open("dup", "reader")
    with pytest.raises(pinshm.Error) as ei:
        client.unlink("missing")
    assert ei.value.errno == errno.ENOENT
    # One consumer allowed: the second open finds none free.
    a = client.open("dup", "consumer")
    with pytest.raises(pinshm.Error) as ei:
        client.open("dup", "consumer")
    assert ei.value.errno == errno.EBUSY
    a.close()
    assert isinstance(client.error, str)


def test_closed_client(client):
    client.close()
    client.close()  # twice: nothing
    for call in (lambda: client.create("x"), lambda: client.open("x", "producer"), client.list,
                 lambda: client.stat("x"), lambda: client.unlink("x")):
        with pytest.raises(ValueError):
            call()


def test_own_name():
    uid = os.geteuid()
    assert pinshm.own_name("jobs") == "@%d.jobs" % uid
    assert pinshm.own_name("a.b-c_9") == "@%d.a.b-c_9" % uid
    for bad in ("", "bad name", "x/y"):
        with pytest.raises(pinshm.Error) as ei:
            pinshm.own_name(bad)
        assert ei.value.errno == errno.EINVAL and ei.value.detail
    longest = "x" * (pinshm.NAME_MAX - len("@%d." % uid))
    assert pinshm.own_name(longest) == "@%d.%s" % (uid, longest)
    with pytest.raises(pinshm.Error) as ei:
        pinshm.own_name(longest + "x")
    assert ei.value.errno == errno.ENAMETOOLONG and str(pinshm.NAME_MAX) in ei.value.detail


def test_open_owner(client):
    """open(owner=uid) opens only that user's channel."""
    uid = os.getuid()
    name = new_name()
    client.create(name, max_producers=2)
    rx = client.open(name, pinshm.CONSUMER, owner=uid)
    tx = client.open(name, pinshm.PRODUCER, owner=None)
    other = uid + 1
    with pytest.raises(pinshm.Error) as ei:
        client.open(name, pinshm.PRODUCER, owner=other)
    e = ei.value
    assert type(e) is pinshm.Error and e.errno == errno.EPERM
    # The detail names the channel, its owner and the owner expected.
    assert name in e.detail and "uid %d" % uid in e.detail and "uid %d" % other in e.detail
    tx.send(b"mine")
    assert rx.recv(timeout=1) == b"mine"
    tx.close()
    rx.close()
    for bad, exc in ((-1, ValueError), (1 << 32, ValueError), ((1 << 32) - 1, ValueError), ("0", TypeError),
                     (0.0, TypeError)):
        with pytest.raises(exc):
            client.open(name, pinshm.PRODUCER, owner=bad)


def test_open_owned_name(client):
    """An owned name opens with plain open(), and never as another user's."""
    uid = os.getuid()
    name = pinshm.own_name(new_name("jobs"))
    client.create(name)
    tx = client.open(name, "producer")
    rx = client.open(name, "consumer", owner=uid)
    tx.send(b"owned")
    assert rx.recv(timeout=1) == b"owned"
    assert client.stat(name)["uid"] == uid
    rx.close()
    with pytest.raises(pinshm.Error) as ei:
        client.open(name, "consumer", owner=uid + 1)  # the name says whose it is
    assert ei.value.errno == errno.EINVAL and "uid %d" % uid in ei.value.detail
    tx.close()


def test_types_not_instantiable():
    for t in (pinshm.Client, pinshm.Channel, pinshm.Message, pinshm.Reservation):
        with pytest.raises(TypeError):
            t()


def test_module_functions():
    assert pinshm.strerror(errno.EPIPE) == pinshm.strerror(-errno.EPIPE)
    assert pinshm.LIBRARY_VERSION.count(".") == 2
    for sub in (pinshm.Full, pinshm.Empty, pinshm.Timeout, pinshm.PeerGone, pinshm.Corrupt,
                pinshm.TooManyHeld, pinshm.Stale):
        assert issubclass(sub, pinshm.Error) and issubclass(sub, OSError)
    assert issubclass(pinshm.Timeout, TimeoutError) and issubclass(pinshm.PeerGone, BrokenPipeError)
    assert issubclass(pinshm.Full, BlockingIOError) and issubclass(pinshm.Empty, BlockingIOError)


def test_docstrings():
    """help(pinshm) reads well: every public function, class and method has a docstring."""
    missing = []
    for name in pinshm.__all__:
        obj = getattr(pinshm, name)
        if callable(obj) and not (obj.__doc__ or "").strip():
            missing.append(name)
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and not (getattr(member, "__doc__", "") or "").strip():
                    missing.append("%s.%s" % (name, attr))
    assert not missing


def test_channel_outlives_client(client, daemon):
    """Channels outlive their client's close, mapped, but their endpoints went
    with the connection (the daemon may give them to another open): every
    call but close() and a release then raises ENOTCONN, and nothing is
    sent, taken or released on the endpoint (another client keeps the
    channel)."""
    name = new_name()
    owner = pinshm.connect(daemon.sock)
    owner.create(name)
    tx = client.open(name, "producer")
    rx = client.open(name, "consumer")
    tx.send(b"one")
    tx.send(b"two")
    held = rx.recv_inplace()
    client.close()
    for call in (lambda: rx.recv(timeout=0.2), lambda: rx.recv_inplace(timeout=0),
                 lambda: tx.send(b"three"), lambda: tx.reserve(8)):
        with pytest.raises(pinshm.Error) as ei:
            call()
        assert ei.value.errno == errno.ENOTCONN and "client" in ei.value.detail
    held.release()  # not the handle's to release any more: nothing done
    rx.close()
    tx.close()
    owner.open(name, "consumer").close()  # the endpoint is free for another open
    owner.close()


def test_channel_dealloc_closes_without_gil(client, daemon):
    # The last reference to an open channel goes while the daemon is
    # stopped: its close request waits for the daemon, without the GIL, so
    # that another thread can wake the daemon up and the close completes at
    # once instead of after the client's 10 s request timeout.
    name = new_name()
    client.create(name, capacity=1 << 14)
    rx = client.open(name, pinshm.CONSUMER)
    go = threading.Event()

    def wake():
        go.wait()
        time.sleep(0.3)
        os.kill(daemon.proc.pid, signal.SIGCONT)

    t = threading.Thread(target=wake)
    t.start()
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        go.set()
        t0 = time.monotonic()
        del rx
        took = time.monotonic() - t0
    finally:
        t.join()
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert took < 5


def test_close_in_forked_child_while_parent_waits(daemon):
    # fork() while another thread of the parent waits in a call on one of
    # the client's channels: the child may still close its copy.
    code = """
import os, threading, time, pinshm
c = pinshm.connect(os.environ["PINSHM_SOCKET"])
c.create("fk", capacity=1 << 14)
rx = c.open("fk", pinshm.CONSUMER)
def wait():
    try:
        rx.recv(timeout=1)
    except pinshm.Timeout:
        pass
t = threading.Thread(target=wait)
t.start()
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    try:
        c.close()
        os._exit(0)
    except RuntimeError as e:
        print("child:", e, flush=True)
        os._exit(3)
_, st = os.waitpid(pid, 0)
t.join()
print("child exit", os.waitstatus_to_exitcode(st))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "child exit 0" in p.stdout, p.stdout
