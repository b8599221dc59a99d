"""numpy arrays over a channel: every dtype but object, shapes, orders, and
headers checked on receipt."""

import struct

import numpy as np
import pytest

import pinshm

DTYPES = [
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128, np.clongdouble,
    ">i4", ">f8", "S5", "U3", "V7", "M8[s]", "m8[ms]", "M8[D]",
    np.dtype([("a", "<i4"), ("b", "f8", (2,)), ("c", "S3")]),
    np.dtype({"names": ["x", "y"], "formats": ["u1", "<i8"], "offsets": [0, 8], "itemsize": 24}),
]


def sample(dtype, shape):
    """A deterministic array of dtype and shape with varied bytes."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = (np.arange(n, dtype=np.uint32) * 2654435761 >> 11).astype(np.uint8)
    if dtype.kind == "b":
        raw &= 1
    if dtype.kind in "fc":  # no NaN bit patterns (they compare unequal)
        return (np.arange(int(np.prod(shape, dtype=np.int64))) % 97 - 40).astype(dtype).reshape(shape)
    if dtype.kind == "U":
        raw = (raw.view(np.uint32) % 26 + 65).astype(np.uint32).view(np.uint8) if n else raw
    return raw.view(dtype).reshape(shape) if n else np.zeros(shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype(pair, dtype):
    tx, rx = pair(capacity=1 << 16)
    for shape in [(), (5,), (2, 3), (0,), (3, 0, 2)]:
        a = sample(dtype, shape)
        pinshm.send_array(tx, a)
        b = pinshm.recv_array(rx, timeout=1)
        assert b.dtype == a.dtype and b.shape == a.shape
        if a.dtype.names:  # padding bytes are not data
            for name in a.dtype.names:
                assert np.array_equal(a[name], b[name])
        else:
            assert b.tobytes() == a.tobytes()
        assert not b.flags.writeable
        del b
    assert rx.held == 0


def test_orders_and_sharing(pair):
    tx, rx = pair(capacity=1 << 16)
    c = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    f = np.asfortranarray(c)
    strided = np.arange(99, dtype=np.float64)[::3].reshape(3, 11)[:, 1:]
    for a, fortran in ((c, False), (f, True), (strided, False), (c.T, True)):
        pinshm.send_array(tx, a)
        m = rx.recv_inplace(timeout=1)
        b = pinshm.as_array(m)
        assert np.array_equal(a, b) and b.flags.f_contiguous == fortran or b.flags.c_contiguous
        assert b.flags.f_contiguous if fortran else b.flags.c_contiguous
        assert np.shares_memory(b, m)  # in place, not a copy
        assert b.ctypes.data % 16 == 0
        with pytest.raises(BufferError):
            m.release()  # the array holds a view
        del b
        m.release()
    assert rx.held == 0


def test_zero_d(pair):
    tx, rx = pair()
    pinshm.send_array(tx, np.float64(2.5))
    b = pinshm.recv_array(rx, timeout=1)
    assert b.shape == () and b[()] == 2.5


def test_object_refused(pair):
    tx, rx = pair()
    with pytest.raises(TypeError):
        pinshm.send_array(tx, np.array([1, "a", None], dtype=object))
    with pytest.raises(TypeError):
        pinshm.send_array(tx, np.zeros(2, dtype=[("o", object)]))
    with pytest.raises(pinshm.Empty):
        rx.recv(timeout=0)  # nothing went


def test_too_large(pair):
    tx, rx = pair(capacity=1 << 14)
    with pytest.raises(pinshm.Error):
        pinshm.send_array(tx, np.zeros(tx.max_message, np.uint8))


def header(dtype="'<f8'", shape=(2,), order=b"C", magic=b"PSHA", version=1, offset=None, extra=0, dlen=None):
    """An array message built by hand (for malformed ones)."""
    descr = dtype.encode()
    end = 16 + 8 * len(shape) + len(descr)
    off = offset if offset is not None else (end + 63) // 64 * 64
    try:
        size = np.dtype(eval(dtype)).itemsize * int(np.prod(shape))
    except Exception:
        size = 8
    head = struct.pack("<4sBBBBII", magic, version, order[0], len(shape), 0,
                       len(descr) if dlen is None else dlen, off)
    head += struct.pack("<%dQ" % len(shape), *shape) + descr
    return head + bytes(max(0, off - len(head))) + bytes(size + extra)


def test_headers_checked(pair):
    tx, rx = pair(capacity=1 << 16)
    tx.send(header())
    assert pinshm.recv_array(rx, timeout=1).tolist() == [0.0, 0.0]  # the builder is right
    bad = [
        b"",
        b"PSHA",
        header(magic=b"NOPE"),
        header(version=2),
        header(order=b"X"),
        header(extra=8),  # longer than the header says
        header(extra=-8),  # shorter
        header(shape=(1 << 62, 4)),  # overflows
        header(shape=(1 << 62, 1 << 62, 0)),  # empty, dimensions past the record
        header(offset=48),  # not a multiple of 64
        header(offset=8),  # inside the header
        header(offset=4096)[:200],  # past the end
        header(dlen=1 << 30),
        header(dtype="'|O'"),  # pointers
        header(dtype="[('x', '|O')]"),
        header(dtype="__import__('os')"),  # not a literal
        header(dtype="'<q9'"),
        header(dtype="\xff"),
    ]
    for raw in bad:
        tx.send(raw)
        with pytest.raises(ValueError):
            pinshm.recv_array(rx, timeout=1)
        assert rx.held == 0  # the bad message was released
