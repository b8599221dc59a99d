"""Reference counts: 100 000 messages through send and receive by copy, in
place, as arrays and through DLPack leave the process's memory flat and the
channel's reference count where it was."""

import gc
import os
import sys

import numpy as np
import pytest

import pinshm

torch = pytest.importorskip("torch")

MESSAGES = 100_000


def rss():
    """The process's resident set, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def round_trip(tx, rx, i, payload, arr):
    """One message through one of the ways, by i; checks what arrives."""
    way = i % 6
    if way == 0:
        tx.send(payload)
        assert rx.recv(timeout=1) == payload
    elif way == 1:
        tx.send(payload)
        with rx.recv_inplace(timeout=1) as m:
            assert bytes(m) == payload
    elif way == 2:
        pinshm.send_array(tx, arr)
        assert pinshm.recv_array(rx, timeout=1)[3] == arr[3]
    elif way == 3:
        tx.send(payload)
        assert np.from_dlpack(rx.recv_inplace(timeout=1))[0] == payload[0]
    elif way == 4:
        tx.send(payload)
        assert torch.from_dlpack(rx.recv_inplace(timeout=1))[1] == payload[1]
    else:
        with tx.reserve(len(payload)) as r:
            torch.from_dlpack(r).fill_(7)
        m = rx.recv_inplace(timeout=1)
        cap = m.__dlpack__(max_version=(1, 0))
        del cap
        assert m.tobytes() == bytes([7]) * len(payload)


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="under ASan freed memory sits in its quarantine: RSS measures nothing")
def test_no_leak(pair):
    tx, rx = pair(capacity=1 << 16)
    payload, arr = bytes(range(64)), np.arange(16, dtype=np.float32)
    for i in range(6000):  # warm up: caches, free lists, torch's allocator
        round_trip(tx, rx, i, payload, arr)
    gc.collect()
    refs, before = sys.getrefcount(rx), rss()
    for i in range(MESSAGES):
        round_trip(tx, rx, i, payload, arr)
    gc.collect()
    grown = rss() - before
    assert sys.getrefcount(rx) == refs and rx.held == 0
    # 100 bytes kept per message of one of the six ways would be 1.6 MiB.
    assert grown < 1 << 20, "RSS grew by %d KiB over %d messages" % (grown >> 10, MESSAGES)
