"""pinshm.Channel: sending and receiving by copy, waiting, event loops, errors."""

import ctypes
import errno
import selectors
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pinshm


def test_send_recv_sizes(pair):
    tx, rx = pair(capacity=1 << 16)
    assert (tx.role, rx.role) == ("producer", "consumer")
    assert tx.max_message == (1 << 15) - 32
    for n in (0, 1, 15, 16, 4095, 4096, 4097, 10000, tx.max_message):
        data = bytes((i * 7 + n) & 0xFF for i in range(n))
        tx.send(data)
        got = rx.recv()
        assert type(got) is bytes and got == data
    tx.send(bytearray(b"ba"))
    tx.send(memoryview(b"xmvx")[1:3])
    assert rx.recv() == b"ba" and rx.recv() == b"mv"


def test_too_long(pair):
    tx, rx = pair(capacity=1 << 14)
    with pytest.raises(pinshm.Error) as ei:
        tx.send(bytes(tx.max_message + 1))
    assert ei.value.errno == errno.EMSGSIZE
    with pytest.raises(pinshm.Error) as ei:
        tx.reserve(tx.max_message + 1)
    assert ei.value.errno == errno.EMSGSIZE and "exceed" in ei.value.detail
    # No room, nothing in time: no detail, not the last failure's.
    with pytest.raises(pinshm.Full) as ei:
        while True:
            tx.send(bytes(1000), timeout=0)
    assert ei.value.detail == "" and "exceed" not in str(ei.value)
    with pytest.raises(pinshm.Timeout) as ei:
        tx.send(bytes(1000), timeout=0.01)
    assert ei.value.detail == ""


def test_nonblocking_and_timeouts(pair):
    tx, rx = pair(capacity=1 << 14)
    with pytest.raises(pinshm.Empty) as ei:
        rx.recv(timeout=0)
    assert ei.value.errno == errno.EAGAIN
    t = time.monotonic()
    with pytest.raises(pinshm.Timeout) as ei:
        rx.recv(timeout=0.15)
    assert time.monotonic() - t >= 0.14 and ei.value.errno == errno.ETIMEDOUT
    with pytest.raises(pinshm.Empty):
        rx.recv_inplace(timeout=0)
    with pytest.raises(pinshm.Timeout):
        rx.recv_batch(timeout=0.01)
    sent = 0
    with pytest.raises(pinshm.Full) as ei:
        while True:
            tx.send(bytes(1000), timeout=0)
            sent += 1
    assert ei.value.errno == errno.EAGAIN and sent > 5
    with pytest.raises(pinshm.Timeout):
        tx.send(bytes(1000), timeout=0.05)
    with pytest.raises(pinshm.Full):
        tx.reserve(1000, timeout=0)
    for _ in range(sent):
        assert rx.recv(timeout=0) == bytes(1000)
    with pytest.raises(ValueError):
        rx.recv(timeout=-1)


def test_peer_gone(client):
    client.create("pg", capacity=1 << 14)
    tx = client.open("pg", "producer")
    rx = client.open("pg", "consumer")
    tx.send(b"last")
    tx.close()
    assert rx.recv() == b"last"  # what was sent is still delivered
    with pytest.raises(pinshm.PeerGone) as ei:
        rx.recv(timeout=1)
    assert ei.value.errno == errno.EPIPE
    tx = client.open("pg", "producer")
    rx.close()
    with pytest.raises(pinshm.PeerGone):
        while True:
            tx.send(bytes(1000), timeout=1)
    tx.close()


def test_batches(pair):
    tx, rx = pair(capacity=1 << 16)
    msgs = [bytes([i]) * i for i in range(40)]
    assert tx.send_batch(msgs) == 40
    assert tx.send_batch([]) == 0
    got = rx.recv_batch(max=100)
    assert [bytes(m) for m in got] == msgs[: len(got)] and 1 <= len(got) <= 40
    n = len(got)
    for m in got:
        m.release()
    while n < 40:
        more = rx.recv_batch(max=7, timeout=0)
        assert 1 <= len(more) <= 7
        assert [bytes(m) for m in more] == msgs[n : n + len(more)]
        n += len(more)
        del more
    with pytest.raises(ValueError):
        rx.recv_batch(max=0)
    with pytest.raises(OverflowError):  # not taken modulo 2**32
        rx.recv_batch(max=-1, timeout=0)
    with pytest.raises(TypeError):
        tx.send_batch([b"ok", 5])


def test_batch_waits_for_room(pair):
    """A batch longer than the ring, without a timeout: every message goes,
    in order, as a slow consumer makes room (none given up part way)."""
    tx, rx = pair(capacity=1 << 12)
    msgs = [bytes([i]) * 200 for i in range(100)]
    got = []

    def consume():
        while len(got) < len(msgs):
            got.append(rx.recv(timeout=5))
            time.sleep(0.001)

    t = threading.Thread(target=consume)
    t.start()
    assert tx.send_batch(msgs) == len(msgs)
    t.join()
    assert got == msgs
    # Not waiting: a partial send says how many went.
    n = tx.send_batch(msgs, timeout=0)
    assert 1 <= n < len(msgs)


def test_wrong_role(pair):
    tx, rx = pair()
    with pytest.raises(pinshm.Error) as ei:
        tx.recv(timeout=0)
    assert ei.value.errno == errno.EINVAL and ei.value.detail
    with pytest.raises(pinshm.Error) as ei:
        rx.send(b"x")
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(pinshm.Error):
        tx.fileno()


def test_info(pair):
    tx, rx = pair(capacity=1 << 15, max_producers=2)
    i = rx.info()
    assert (i["kind"], i["capacity"], i["max_producers"], i["max_consumers"]) == ("queue", 1 << 15, 2, 1)
    assert i["producers"] == 1 and i["consumers"] == 1 and i["segment_size"] > 0 and i["held"] == 0
    assert tx.info()["endpoint"] != i["endpoint"]
    tx.set_spin(0)
    tx.flush()
    assert pinshm.SPIN_ADAPTIVE == 2**64 - 1
    tx.set_spin(pinshm.SPIN_ADAPTIVE)
    with pytest.raises(OverflowError):
        tx.set_spin(2**64)
    with pytest.raises(OverflowError):
        tx.set_spin(-1)
    with pytest.raises(TypeError):
        tx.set_spin(1.5)

    class Ns:  # an integer of another library's (numpy's uint64): __index__
        def __index__(self):
            return 20000

    tx.set_spin(Ns())


def test_close(pair):
    tx, rx = pair()
    assert not rx.closed
    with rx:
        pass
    assert rx.closed
    rx.close()  # twice: nothing
    for call in (lambda: rx.recv(timeout=0), rx.info, rx.fileno, rx.arm, lambda: rx.recv_inplace(timeout=0)):
        with pytest.raises(ValueError):
            call()


def test_deferred_close_wakes(pair):
    """A producer's close put off while a record object lives still wakes an
    armed consumer for what was committed with more=True."""
    import select

    tx, rx = pair()
    fd = rx.fileno()
    assert rx.arm()
    r = tx.reserve(64)
    memoryview(r)[:4] = b"last"
    r.commit(4, more=True)
    tx.close()  # put off: r lives
    assert select.select([fd], [], [], 5)[0] == [fd], "the consumer was not woken"
    assert rx.recv(timeout=0) == b"last"
    del r


def test_event_loop(pair):
    tx, rx = pair()
    fd = rx.fileno()
    assert fd >= 0 and rx.fileno() == fd
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    assert rx.arm() is True
    assert sel.select(timeout=0.05) == []
    sender = threading.Timer(0.05, tx.send, args=(b"wake",))
    sender.start()
    assert sel.select(timeout=10), "the wake-up descriptor did not become readable"
    sender.join()
    assert rx.recv(timeout=0) == b"wake"
    tx.send(b"ready")
    assert rx.arm() is False  # a message is ready: do not sleep
    assert rx.recv(timeout=0) == b"ready"
    sel.close()
    tx.close()
    with pytest.raises(pinshm.PeerGone):
        rx.arm()


def test_blocking_call_releases_gil(pair):
    tx, rx = pair()
    got = []
    t = threading.Thread(target=lambda: got.append(rx.recv(timeout=10)))
    t.start()
    time.sleep(0.1)  # the receiver waits without the GIL: this thread runs
    with pytest.raises(RuntimeError):
        rx.recv(timeout=0)  # one thread at a time per channel
    with pytest.raises(RuntimeError):
        rx.close()
    tx.send(b"across")
    t.join(10)
    assert got == [b"across"]


def test_signal_interrupts_wait(pair):
    tx, rx = pair()

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t = time.monotonic()
        with pytest.raises(Interrupted):
            rx.recv()  # forever, but a signal's handler runs between slices
        assert time.monotonic() - t < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    tx.send(b"after")
    assert rx.recv(timeout=1) == b"after"  # still usable


def _address(buf):
    """The address of a writable buffer's first byte (test helper)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def test_corrupt_channel(pair):
    tx, rx = pair()
    with tx.reserve(64) as r:
        view = memoryview(r)
        addr = _address(view)
        view.release()
    # A hostile producer scribbles over the record's header in its ring.
    ctypes.memset(addr - 16, 0xFF, 16)
    with pytest.raises(pinshm.Corrupt) as ei:
        rx.recv(timeout=1)
    assert ei.value.errno == errno.EBADMSG and ei.value.detail
    with pytest.raises(pinshm.Corrupt):
        rx.recv_inplace(timeout=0)


# Python code that runs inside a call (a signal handler, a generator, a
# garbage collector's callback) and closes the channel: each case runs in a
# fresh interpreter, so that a crash fails the test instead of pytest.
SNIPPET_PRELUDE = """
import gc, os, signal, pinshm
c = pinshm.connect(os.environ["PINSHM_SOCKET"])
c.create("hz", capacity=1 << 16)
tx = c.open("hz", pinshm.PRODUCER)
rx = c.open("hz", pinshm.CONSUMER)
"""


def run_snippet(code):
    """Run SNIPPET_PRELUDE then @p code in a child interpreter: its CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", SNIPPET_PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_call_sees_close(setup, call):
    """After @p setup, @p call (a statement) raises ValueError: the channel is closed."""
    p = run_snippet(setup + "\ntry:\n    " + call + "\nexcept ValueError as e:\n    print('raised:', e)\n")
    assert p.returncode == 0, p.stderr
    assert "raised: the channel is closed" in p.stdout


def test_signal_handler_closes_waiting_channel(daemon):
    assert_call_sees_close(
        "signal.signal(signal.SIGALRM, lambda *a: rx.close())\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.15)",
        "rx.recv(timeout=2)",
    )


def test_send_batch_sequence_closes_channel(daemon):
    assert_call_sees_close("def gen():\n    tx.close()\n    yield b'x'", "tx.send_batch(gen())")


def test_finalizer_closes_channel_while_receiving(daemon):
    # The first allocation tracked by the collector inside recv_inplace()
    # (the result list: none is left on the free list) runs a collection
    # whose callback tries to close the channel: refused while the record
    # is not yet held, the message stays readable.
    p = run_snippet(
        """
        out = []
        armed = [False]
        def cb(phase, info):
            if armed[0] and phase == "start":
                armed[0] = False
                try:
                    rx.close()
                    out.append("closed")
                except RuntimeError:
                    out.append("refused")
        gc.callbacks.append(cb)
        payload = bytes(range(256)) * 64
        tx.send(payload)
        gc.collect()
        keep = [[] for _ in range(200)]
        gc.set_threshold(1)
        armed[0] = True
        m = rx.recv_inplace()
        gc.set_threshold(700)
        print(out, bytes(m) == payload)
        m.release()
        """
    )
    assert p.returncode == 0, p.stderr
    assert "['refused'] True" in p.stdout


def test_commit_more_defers_the_wake_until_flush(pair):
    """commit(more=True) publishes (a receive finds the message) without waking an armed
    consumer; flush() wakes it, and the messages come in order, intact."""
    import select

    tx, rx = pair()
    fd = rx.fileno()
    assert rx.arm()  # nothing ready: armed
    for i in range(3):
        with tx.reserve(64) as r:
            memoryview(r)[:5] = b"more%d" % i
            r.commit(5, more=True)
    assert select.select([fd], [], [], 0.3)[0] == [], "woken by a commit with more=True"
    tx.flush()
    assert select.select([fd], [], [], 5)[0] == [fd], "flush() did not wake the consumer"
    assert [rx.recv(timeout=0) for _ in range(3)] == [b"more0", b"more1", b"more2"]
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)
