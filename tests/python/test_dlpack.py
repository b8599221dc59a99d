"""DLPack: records into torch and numpy without a copy."""

import _pinshm
import numpy as np
import pytest

import pinshm

torch = pytest.importorskip("torch")


def test_message_into_torch_and_numpy(pair):
    tx, rx = pair()
    tx.send(b"abcdef")
    m = rx.recv_inplace(timeout=1)
    assert m.__dlpack_device__() == (1, 0)
    t = torch.from_dlpack(m)
    assert t.dtype == torch.uint8 and t.tolist() == list(b"abcdef")
    assert t.data_ptr() == np.asarray(m).ctypes.data  # the record itself
    with pytest.raises(BufferError):
        m.release()  # the tensor holds it
    with pytest.raises(BufferError):
        rx.close()
    n = np.from_dlpack(m)
    assert n.tobytes() == b"abcdef" and np.shares_memory(n, m)
    del t, n
    m.release()
    assert rx.held == 0
    with pytest.raises(BufferError):
        m.__dlpack__()
    tx.send(b"x")
    with rx.recv_inplace(timeout=1) as m:
        with pytest.raises(BufferError):
            m.__dlpack__(copy=True)
        cap = m.__dlpack__()
        with pytest.raises(BufferError):
            m.release()
        del cap  # never consumed: its destructor lets the record go
    assert rx.held == 0


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.complex64, np.float64])
def test_array_into_torch(pair, dtype):
    tx, rx = pair()
    a = (np.arange(24) % 11).astype(dtype).reshape(2, 3, 4)
    for src in (a, np.asfortranarray(a)):
        pinshm.send_array(tx, src)
        m = rx.recv_inplace(timeout=1)
        t = torch.from_dlpack(pinshm.array_dlpack(m))
        assert tuple(t.shape) == a.shape and np.array_equal(t.numpy(), a)
        assert t.data_ptr() == pinshm.as_array(m).ctypes.data
        del t
        m.release()


def test_in_place_write_seen_by_others(client):
    """Torch tensors are writable whatever DLPack says: every subscriber of a
    topic maps the same pages, so an in-place change shows in the others."""
    client.create("topic", kind=pinshm.TOPIC, max_consumers=2, capacity=1 << 14)
    tx = client.open("topic", "producer")
    a, b = client.open("topic", "consumer"), client.open("topic", "consumer")
    pinshm.send_array(tx, np.zeros(4, np.float32))
    ma, mb = a.recv_inplace(timeout=1), b.recv_inplace(timeout=1)
    ta = torch.from_dlpack(pinshm.array_dlpack(ma))
    ta += 1
    assert pinshm.as_array(mb).tolist() == [1.0] * 4
    del ta
    for ch in (tx, a, b):
        ch.close()


def test_bad_geometry(pair):
    tx, rx = pair()
    tx.send(bytes(64))
    with rx.recv_inplace(timeout=1) as m:
        for args in ((0, (9,), None, 2, 64), (8, (8,), None, 2, 64), (0, (2, 2), (8, 1), 2, 64),
                     (0, (2,), (-1,), 2, 64), (0, (1,), None, 2, 12), (0, (-1,), None, 1, 8),
                     # 16 spans of 2**124 bytes: their sum wraps a 128-bit integer to 0
                     (0, (2**60 + 1,) * 16, (2**61,) * 16, 2, 64)):
            with pytest.raises(ValueError):
                _pinshm._dlpack(m, *args)
        cap = _pinshm._dlpack(m, 0, (8,), None, 2, 64)
        del cap
