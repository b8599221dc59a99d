"""The array header, fuzzed: random and mutated headers (seeded) are each
either decoded into an array that lies within the record and agrees with
the header, or refused with ValueError; never another exception, a crash,
or a view past the record."""

import random
import struct

import numpy as np
import pytest

import pinshm
from pinshm import arrays

SEED = 20261205
DESCRS = [b"'<f8'", b"'|u1'", b"'<i2'", b"'>c16'", b"'|b1'", b"'<M8[ns]'", b"'|V0'", b"'|S0'", b"'|O'",
          b"[('a', '<i4'), ('b', '|O')]", b"('<f4', (3,))", b"('<f4', (2**40, 2**40))", b"'|V' + 'x'",
          b"'<f8' * 10**8", b"[" * 300, b"(" * 150 + b")" * 150, b"{'descr': '<f8'}", b"'|V18446744073709551615'",
          b"[('', '<i4')]", b"[('a', '<i4', (-1,))]", b"[('a', '<i4'), ('a', '<i4')]", b"\xff\xfe", b"1e999",
          b"('|V4', {'x': ('<i4', 0)})", b"[('a', ('<f4', (2**62,)))]", b"'<U2'", b"'<m8[s]'", b"''"]


def valid_messages():
    """Well-formed array messages of various dtypes, shapes and orders."""
    out = []
    for a in (np.arange(12, dtype=np.float64).reshape(3, 4), np.zeros((), np.int16), np.zeros((0, 5), np.uint8),
              np.asfortranarray(np.arange(6, dtype=np.complex64).reshape(2, 3)), np.array([True, False]),
              np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))]), np.array(["ab", "c"]),
              np.arange(5, dtype=">u4")):
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        head = arrays._header(np, a.dtype, a.shape, order)
        out.append(head + a.tobytes(order="A" if order == "F" else "C"))
    return out


def mutate(rng, msg):
    """One random mutation of msg (bytes)."""
    b = bytearray(msg)
    kind = rng.randrange(8)
    if len(b) < 16 + 8 * min(b[6] if len(b) > 6 else 0, 32) and kind in (1, 2, 4):
        kind = 5  # a field to change that the message no longer has
    if kind == 0 and b:  # flip bytes anywhere, mostly in the header
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(b), 128) if rng.random() < 0.8 else len(b))
            b[i] = rng.randrange(256)
    elif kind == 1:  # a field of the fixed part
        off, fmt = rng.choice([(5, "B"), (6, "B"), (8, "<I"), (12, "<I")])
        val = rng.choice([0, 1, 31, 32, 33, 63, 64, 128, 255, 2**31, 2**32 - 1, rng.randrange(2**16)])
        struct.pack_into(fmt, b, off, val & (0xFF if fmt == "B" else 0xFFFFFFFF))
    elif kind == 2 and b[6] > 0:  # a dimension
        i = rng.randrange(b[6])
        struct.pack_into("<Q", b, 16 + 8 * i, rng.choice([0, 1, 2, 3, 2**32, 2**63, 2**64 - 1, rng.randrange(64)]))
    elif kind == 3:  # truncated or extended
        b = b[: rng.randrange(len(b) + 1)] if rng.random() < 0.5 else b + bytes(rng.randrange(1, 200))
    elif kind == 4:  # another description of the same length or not, offset fixed up
        d = rng.choice(DESCRS)
        ndim = b[6] if b[6] <= 32 else 0
        end = 16 + 8 * ndim + len(d)
        off = (end + 63) // 64 * 64
        body = b[struct.unpack_from("<I", b, 12)[0]:] if len(b) >= 16 else b""
        head = bytes(b[:16 + 8 * ndim]) + d
        b = bytearray(head + bytes(off - end) + body)
        struct.pack_into("<II", b, 8, len(d), off)
    elif kind == 5:  # random bytes after a good magic
        b = bytearray(pinshm.ARRAY_MAGIC + bytes(rng.randrange(256) for _ in range(rng.randrange(80))))
    elif kind == 6:  # shape and length made to agree with a random dtype size
        ndim = rng.randrange(4)
        shape = [rng.randrange(5) for _ in range(ndim)]
        d = rng.choice(DESCRS)
        end = 16 + 8 * ndim + len(d)
        off = (end + 63) // 64 * 64
        b = bytearray(struct.pack("<4sBBBBII", pinshm.ARRAY_MAGIC, 1, ord("C"), ndim, 0, len(d), off)
                      + struct.pack("<%dQ" % ndim, *shape) + d + bytes(off - end)
                      + bytes(rng.randrange(200)))
    else:  # nothing: the message as made
        pass
    return bytes(b)


def check(buf):
    """buf (a uint8 array holding one record) decodes within it, or ValueError."""
    try:
        a = pinshm.as_array(buf)
    except ValueError as e:
        assert str(e)
        return False
    lo, n = buf.ctypes.data, len(buf)
    start = a.__array_interface__["data"][0]
    offset = struct.unpack_from("<I", buf, 12)[0]
    ndim = buf[6]
    assert start == lo + offset and offset + a.nbytes == n  # exactly the record's tail
    assert a.shape == struct.unpack_from("<%dQ" % ndim, buf, 16)
    assert a.flags.c_contiguous or a.flags.f_contiguous
    assert not a.flags.writeable and (a.size == 0 or np.shares_memory(a, buf))
    assert a.tobytes(order="A") == buf[offset:].tobytes()  # every element readable, inside
    return True


def test_fuzz_headers():
    rng = random.Random(SEED)
    base = valid_messages()
    for m in base:
        assert check(np.frombuffer(m, np.uint8))
    decoded = refused = 0
    for _ in range(6000):
        msg = rng.choice(base)
        for _ in range(rng.randint(1, 3)):
            msg = mutate(rng, msg)
        if check(np.frombuffer(msg, np.uint8)):
            decoded += 1
        else:
            refused += 1
    assert decoded > 300 and refused > 3000  # both ways exercised


def test_fuzz_records(pair):
    """Mutated headers received in place: the same, against the record."""
    tx, rx = pair(capacity=1 << 16)
    rng = random.Random(SEED + 1)
    base = valid_messages()
    for _ in range(400):
        msg = mutate(rng, rng.choice(base))
        tx.send(msg)
        with rx.recv_inplace(timeout=1) as m:
            try:
                a = pinshm.as_array(m)
            except ValueError:
                continue
            start = a.__array_interface__["data"][0] - np.asarray(m).ctypes.data
            assert start + a.nbytes == len(m) == len(msg)  # exactly the record's tail
            assert a.tobytes(order="A") == msg[start:]
            del a


@pytest.mark.parametrize("descr", DESCRS)
def test_each_description(descr):
    """Each odd description alone, with room for any size: decoded or ValueError."""
    end = 16 + len(descr)
    off = (end + 63) // 64 * 64
    for extra in (0, 1, 4, 8, 16, 24):
        msg = struct.pack("<4sBBBBII", pinshm.ARRAY_MAGIC, 1, ord("C"), 0, 0, len(descr), off) + descr + \
            bytes(off - end + extra)
        check(np.frombuffer(msg, np.uint8))
