"""Several processes: producers and consumers with checked data, processes
killed while holding records or a reservation, and the fork rules."""

import hashlib
import multiprocessing
import os
import signal
import struct
import time

import pytest

import pinshm

ctx = multiprocessing.get_context("fork")
HEAD = struct.Struct("<IIQ")  # producer, sequence, checksum of the body


def message(producer, seq):
    """A self-checking message of a length that varies with (producer, seq)."""
    body = hashlib.blake2b(b"%d/%d" % (producer, seq)).digest() * ((producer * 7 + seq) % 40)
    return HEAD.pack(producer, seq, int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "little")) + body


def check(raw):
    """(producer, seq) of a message, or AssertionError if it is damaged."""
    with memoryview(raw) as view:
        producer, seq, checksum = HEAD.unpack_from(view)
        body = bytes(view[HEAD.size :])
        assert int.from_bytes(hashlib.blake2b(body, digest_size=8).digest(), "little") == checksum, "damaged"
        assert bytes(view) == message(producer, seq), "damaged"
    return producer, seq


def produce(sock, name, producer, count, inplace):
    """Child: open name as a producer and send count messages."""
    with pinshm.connect(sock) as c, c.open(name, "producer") as tx:
        for seq in range(count):
            m = message(producer, seq)
            if inplace and seq % 2:
                with tx.reserve(len(m) + 16) as r:
                    memoryview(r)[: len(m)] = m
                    r.commit(len(m))
            else:
                tx.send(m, timeout=30)


def consume(sock, name, conn):
    """Child: receive in place until every producer has gone; send back what came."""
    got = []
    with pinshm.connect(sock) as c, c.open(name, "consumer") as rx:
        conn.send("ready")
        while True:
            try:
                with rx.recv_inplace(timeout=30) as m:
                    got.append(check(m))
            except pinshm.PeerGone:
                break
    conn.send(got)


def start(target, *args):
    """Start target(*args) in a forked child."""
    p = ctx.Process(target=target, args=args)
    p.start()
    return p


def join_all(procs, timeout=60):
    """Wait for each child; every one must exit 0."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join()
        assert p.exitcode == 0, "child exited %s" % p.exitcode


def test_producers_to_one_consumer(client, daemon):
    client.create("mp", capacity=1 << 14, max_producers=4)
    rx = client.open("mp", "consumer")
    # A producer endpoint of the test's own, so that the consumer sees every
    # producer gone only once it closes, not while a child that finished
    # early is the only one that has opened.
    held = client.open("mp", "producer")
    count = 1500
    procs = [start(produce, daemon.sock, "mp", p, count, p == 1) for p in range(3)]
    nexts = [0, 0, 0]
    while sum(nexts) < 3 * count:
        producer, seq = check(rx.recv(timeout=30))
        assert seq == nexts[producer], "out of order"
        nexts[producer] += 1
    join_all(procs)
    held.close()
    with pytest.raises(pinshm.PeerGone):
        rx.recv(timeout=5)
    rx.close()


def test_producers_to_shared_consumers(client, daemon):
    client.create("shared", capacity=1 << 14, max_producers=3, max_consumers=2)
    # A producer endpoint of the test's own, so that the consumers see every
    # producer gone only once it closes, not between two children.
    held = client.open("shared", "producer")
    pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
    consumers = [start(consume, daemon.sock, "shared", w) for r, w in pipes]
    for r, w in pipes:
        assert r.recv() == "ready"
    count = 1000
    producers = [start(produce, daemon.sock, "shared", p, count, True) for p in range(2)]
    join_all(producers)
    held.close()
    got = [r.recv() for r, w in pipes]
    join_all(consumers)
    for part in got:  # each consumer sees each producer's messages in order
        for producer in range(2):
            seqs = [s for p, s in part if p == producer]
            assert seqs == sorted(seqs)
    every = sorted(got[0] + got[1])
    assert every == [(p, s) for p in range(2) for s in range(count)], "lost or duplicated"


def hold_and_wait(sock, name, conn):
    """Child: take 5 records in place, hold them, say so, and wait to be killed."""
    c = pinshm.connect(sock)
    rx = c.open(name, "consumer")
    held = [rx.recv_inplace(timeout=10) for _ in range(5)]
    conn.send([check(m) for m in held])
    time.sleep(60)
    os._exit(1)


def test_consumer_killed_holding_records(client, daemon):
    client.create("kill", capacity=1 << 14)
    tx = client.open("kill", "producer")
    for seq in range(10):
        tx.send(message(0, seq))
    r, w = ctx.Pipe(duplex=False)
    p = start(hold_and_wait, daemon.sock, "kill", w)
    assert r.recv() == [(0, s) for s in range(5)]
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    deadline = time.monotonic() + 10
    while True:  # the daemon frees the endpoint once it has reaped the connection
        try:
            rx = client.open("kill", "consumer")
            break
        except pinshm.Error as e:
            if e.errno != 16 or time.monotonic() > deadline:  # EBUSY
                raise
            time.sleep(0.02)
    got = [check(rx.recv(timeout=5)) for _ in range(10)]
    assert got == [(0, s) for s in range(10)]  # the held ones again, at least once
    tx.send(message(0, 10))
    assert check(rx.recv(timeout=5)) == (0, 10)
    rx.close()
    tx.close()


def reserve_and_wait(sock, name, conn):
    """Child: send 3 messages, then reserve and half fill a fourth, and wait to be killed."""
    c = pinshm.connect(sock)
    tx = c.open(name, "producer")
    for seq in range(3):
        tx.send(message(1, seq))
    r = tx.reserve(200)
    memoryview(r)[:100] = b"\xee" * 100
    conn.send("reserved")
    time.sleep(60)
    os._exit(1)


def test_producer_killed_mid_reserve(client, daemon):
    client.create("half", capacity=1 << 14)
    rx = client.open("half", "consumer")
    r, w = ctx.Pipe(duplex=False)
    p = start(reserve_and_wait, daemon.sock, "half", w)
    assert r.recv() == "reserved"
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert [check(rx.recv(timeout=5)) for _ in range(3)] == [(1, 0), (1, 1), (1, 2)]
    with pytest.raises((pinshm.PeerGone, pinshm.Timeout)):
        rx.recv(timeout=2)  # nothing of the half-written one
    deadline = time.monotonic() + 10
    while True:
        try:
            tx = client.open("half", "producer")
            break
        except pinshm.Error as e:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    tx.send(message(2, 0))
    assert check(rx.recv(timeout=5)) == (2, 0)
    tx.close()
    rx.close()


def child_of_fork(rx, client, held, resv, conn):
    """Child: the parent's channel and client are not its own, nor its
    message held in place and its reservation."""
    out = []
    for call in (lambda: rx.recv(timeout=0), rx.info, client.list, lambda: memoryview(held),
                 held.tobytes, held.release, lambda: memoryview(resv), lambda: resv.__dlpack__()):
        try:
            call()
            out.append("worked")
        except pinshm.Error as e:
            out.append("parent" in str(e))
    rx.close()  # forgets the inherited handle: the channel is not touched
    client.close()  # the child's copy of the connection: closes nothing of the parent's
    conn.send(out)


def test_fork_rules(client, daemon):
    client.create("fork", capacity=1 << 14)
    tx = client.open("fork", "producer")
    rx = client.open("fork", "consumer")
    tx.send(b"held")
    held = rx.recv_inplace(timeout=1)
    tx.send(b"before")
    resv = tx.reserve(8)
    r, w = ctx.Pipe(duplex=False)
    p = start(child_of_fork, rx, client, held, resv, w)
    assert r.recv() == [True] * 8
    join_all([p])
    assert rx.recv(timeout=1) == b"before"  # the parent's endpoint is untouched
    assert bytes(held) == b"held"
    held.release()
    memoryview(resv)[:] = b"parent!!"
    resv.commit()
    assert rx.recv(timeout=1) == b"parent!!"
    tx.send(b"after")
    assert rx.recv(timeout=1) == b"after"
    assert client.stat("fork")["consumers"] == 1
    tx.close()
    rx.close()


def produce_and_wait(sock, name, count, conn):
    """Child: send count checked messages, say so, and wait to be killed."""
    with pinshm.connect(sock) as c, c.open(name, "producer") as tx:
        for seq in range(count):
            tx.send(message(5, seq), timeout=30)
        conn.send("sent")
        time.sleep(60)


def test_view_outlives_its_producer_killed(client, daemon):
    """A numpy view of a record, held while its producer is SIGKILLed: still readable and
    intact, through the consumer's later receives and a new producer filling the ring."""
    np = pytest.importorskip("numpy")
    client.create("killed", capacity=1 << 14)
    rx = client.open("killed", "consumer")
    r, w = ctx.Pipe(duplex=False)
    p = start(produce_and_wait, daemon.sock, "killed", 4, w)
    assert r.recv() == "sent"
    m = rx.recv_inplace(timeout=5)
    want = bytes(m)
    view = np.frombuffer(m, dtype=np.uint8)
    del m  # only the view holds the record now
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert check(view.tobytes()) == (5, 0) and view.tobytes() == want
    assert [check(rx.recv(timeout=5)) for _ in range(3)] == [(5, 1), (5, 2), (5, 3)]
    deadline = time.monotonic() + 10
    while True:  # the daemon frees the dead producer's slot
        try:
            tx = client.open("killed", "producer")
            break
        except pinshm.Error:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    sent = 0
    try:
        while True:  # the held record keeps its bytes: the ring fills around it
            tx.send(message(6, sent), timeout=0)
            sent += 1
    except pinshm.Full:
        pass
    assert sent > 0 and view.tobytes() == want
    for seq in range(sent):
        assert check(rx.recv(timeout=5)) == (6, seq)
    assert view.tobytes() == want
    del view
    tx.close()
    rx.close()
