"""Zero copy: reservations, messages in place, their release order, and views
that outlive a release or a close (BufferError or a live mapping, never a crash)."""

import gc
import sys

import numpy as np
import pytest

import pinshm
from conftest import new_name


def test_reserve_commit_abort(pair):
    tx, rx = pair()
    r = tx.reserve(100)
    assert len(r) == 100 and not r.done
    view = memoryview(r)
    assert not view.readonly and len(view) == 100
    view[:5] = b"hello"
    with pytest.raises(BufferError):
        r.commit()  # a view is alive
    with pytest.raises(pinshm.Error):
        tx.reserve(10)  # one at a time
    view.release()
    r.commit(5)
    assert r.done
    with pytest.raises(ValueError):
        r.commit()
    with pytest.raises(BufferError):
        memoryview(r)
    assert rx.recv(timeout=1) == b"hello"

    r = tx.reserve(10)
    memoryview(r)[:] = b"x" * 10
    r.abort()
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)
    with pytest.raises(ValueError):
        tx.reserve(10).commit(11)
    with pytest.raises(OverflowError):
        tx.reserve(10).commit(-1)
    with pytest.raises(TypeError):
        tx.reserve(10).commit(2.0)
    tx.reserve(10).commit(np.int64(3))  # any integer with __index__
    assert len(rx.recv(timeout=1)) == 3


def test_commit_arguments_read_first(pair):
    """commit() reads n before it looks at the reservation: an __index__ that
    commits it, or makes another, is seen, and nothing is committed twice."""
    tx, rx = pair()
    r = tx.reserve(8)
    memoryview(r)[:] = b"abcdefgh"
    nested = []

    class Commits:
        def __index__(self):
            r.commit()
            nested.append(tx.reserve(4))
            return 2

    with pytest.raises(ValueError):
        r.commit(Commits())
    assert rx.recv(timeout=1) == b"abcdefgh"
    nested[0].abort()
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)


def test_reserve_context_manager(pair):
    tx, rx = pair()
    with tx.reserve(3) as r:
        memoryview(r)[:] = b"abc"
    assert r.done and rx.recv(timeout=1) == b"abc"
    with pytest.raises(ZeroDivisionError):
        with tx.reserve(3) as r:
            memoryview(r)[:] = b"bad"
            1 / 0
    assert r.done
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)  # aborted
    with tx.reserve(8) as r:
        np.asarray(r).view(np.uint32)[:] = [1, 2]  # the temporary array is gone at the commit
    assert np.frombuffer(rx.recv(timeout=1), np.uint32).tolist() == [1, 2]
    # Dropped without commit: aborted, and the next reservation works.
    r = tx.reserve(4)
    del r
    gc.collect()
    with tx.reserve(2) as r:
        memoryview(r)[:] = b"ok"
    assert rx.recv(timeout=1) == b"ok"


def test_message_read_only_and_release(pair):
    tx, rx = pair()
    tx.send(b"record")
    m = rx.recv_inplace(timeout=1)
    assert len(m) == 6 and bytes(m) == b"record" and m.tobytes() == b"record"
    assert m.lost == 0 and not m.released and m.channel is rx
    view = memoryview(m)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 0
    a = np.asarray(m)
    assert not a.flags.writeable and np.shares_memory(a, m)
    with pytest.raises(BufferError):
        m.release()
    del a
    with pytest.raises(BufferError):
        m.release()
    view.release()
    m.release()
    m.release()  # twice: nothing
    assert m.released and rx.held == 0
    with pytest.raises(BufferError):
        memoryview(m)
    with pytest.raises(ValueError):
        m.tobytes()
    tx.send(b"with")
    with rx.recv_inplace(timeout=1) as m:
        assert bytes(m) == b"with"
    assert m.released and rx.held == 0


def test_release_in_order(pair):
    tx, rx = pair()
    for i in range(5):
        tx.send(bytes([i]) * 8)
    ms = [rx.recv_inplace(timeout=1) for _ in range(5)]
    assert rx.held == 5
    ms[2].release()
    del ms[1]  # dropped out of order: only marked
    assert rx.held == 5
    ms[0].release()  # 0, 1, 2 go back to the library together
    assert rx.held == 2
    assert ms[1].released and bytes(ms[2]) == b"\x03" * 8 and bytes(ms[3]) == b"\x04" * 8
    del ms
    assert rx.held == 0


def test_hold_first_drop_the_rest(pair):
    tx, rx = pair(capacity=1 << 14)  # 8 KiB of room for a few messages of 64 bytes... many
    def payload(i):
        return i.to_bytes(4, "little") * 16

    n = 0
    while n < 64:
        tx.send(payload(n))
        n += 1
    first = rx.recv_inplace(timeout=1)
    keep = memoryview(first)
    for i in range(1, 64):
        m = rx.recv_inplace(timeout=1)
        assert bytes(m) == payload(i)
        del m  # dropped: only marked, message 1 holds them all
    assert rx.held == 64
    with pytest.raises(pinshm.TooManyHeld) as ei:
        rx.recv_inplace(timeout=0)
    assert "64" in str(ei.value)
    with pytest.raises(pinshm.TooManyHeld):
        rx.recv_batch(timeout=0)
    # The producer fills every byte of room it has: message 1 is untouched.
    while True:
        try:
            tx.send(payload(n), timeout=0)
            n += 1
        except pinshm.Full:
            break
    assert bytes(keep) == payload(0)
    keep.release()
    first.release()
    assert rx.held == 0
    for i in range(64, n):
        assert rx.recv(timeout=1) == payload(i)


def test_views_outlive_close(pair):
    tx, rx = pair()
    tx.send(b"kept")
    m = rx.recv_inplace(timeout=1)
    view = memoryview(m)
    with pytest.raises(BufferError):
        rx.close()
    assert bytes(view) == b"kept"  # still mapped
    view.release()
    rx.close()
    assert m.released
    with pytest.raises(BufferError):
        memoryview(m)
    with pytest.raises(ValueError):
        view.tobytes()


def test_frombuffer_keeps_mapping(pair):
    """An array from numpy.frombuffer keeps the message alive, and the message
    the mapping: whether numpy keeps the export (close raises BufferError) or
    lets it go (close goes on, the mapping stays), reading it cannot crash."""
    tx, rx = pair()
    tx.send(b"0123456789abcdef")
    m = rx.recv_inplace(timeout=1)
    a = np.frombuffer(m, np.uint8)
    del m
    try:
        rx.close()
    except BufferError:
        pass
    assert a.tobytes() == b"0123456789abcdef"
    del a
    gc.collect()
    rx.close()
    assert rx.closed


def test_reservation_view_outlives_close(pair):
    tx, rx = pair()
    r = tx.reserve(16)
    view = memoryview(r)
    with pytest.raises(BufferError):
        tx.close()
    view.release()
    tx.close()
    assert r.done
    with pytest.raises(BufferError):
        memoryview(r)
    with pytest.raises(ValueError):
        r.commit()
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)


def test_no_leak(pair):
    tx, rx = pair(capacity=1 << 16)
    base_tx, base_rx = sys.getrefcount(tx), sys.getrefcount(rx)

    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    def rounds(count):
        for i in range(count):
            tx.send(b"x" * 64)
            with rx.recv_inplace(timeout=1) as m:
                memoryview(m).tobytes()
            with tx.reserve(64) as r:
                memoryview(r)[:8] = b"12345678"
            rx.recv(timeout=1)
            tx.send_batch([b"a", b"b"])
            got = [bytes(m) for m in rx.recv_batch(timeout=1)]
            if got == [b"a"]:
                got += [bytes(m) for m in rx.recv_batch(timeout=1)]
            assert got == [b"a", b"b"] and rx.held == 0
            try:
                rx.recv(timeout=0)
            except pinshm.Empty:
                pass

    rounds(2000)
    before = rss_kb()
    rounds(20000)
    gc.collect()
    assert sys.getrefcount(tx) == base_tx and sys.getrefcount(rx) == base_rx
    assert rx.held == 0
    assert rss_kb() - before < 2048, "memory grew by %d kB over 20000 rounds" % (rss_kb() - before)


def test_stale_release_reported(client):
    # On an overrun topic a held record overwritten by the producer makes its
    # release fail (Stale): raised by release(), or, for a message dropped
    # without release(), by the next call on the channel, once.
    name = new_name()
    client.create(name, kind=pinshm.TOPIC, overrun=True, capacity=1 << 12)
    tx = client.open(name, pinshm.PRODUCER)
    rx = client.open(name, pinshm.CONSUMER)
    try:
        for explicit in (True, False):
            tx.send(b"first")
            m = rx.recv_inplace(timeout=1)
            for _ in range(64):
                tx.send(bytes(200))
            if explicit:
                with pytest.raises(pinshm.Stale):
                    m.release()
            else:
                del m
                with pytest.raises(pinshm.Stale):
                    rx.recv(timeout=0)
            with pytest.raises(pinshm.Empty):
                while True:  # what the producer left; no second report
                    rx.recv(timeout=0)
    finally:
        tx.close()
        rx.close()
