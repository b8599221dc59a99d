"""DLPack: records into torch and numpy without a copy.

Debian's numpy 1.24 and torch 1.13 speak the protocol before 1.0: they call
__dlpack__() without max_version and take "dltensor" capsules.  The versioned
capsule ("dltensor_versioned", DLManagedTensorVersioned) is checked here
through ctypes, as a consumer of DLPack 1.0 reads it.
"""

import ctypes
import errno
import gc
import time

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
            m.__dlpack__(dl_device=(2, 0))  # a GPU: would need a copy pinshm does not make
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
    tb = torch.from_dlpack(pinshm.array_dlpack(mb))
    assert ta.data_ptr() != tb.data_ptr()  # two mappings of the same pages
    ta += 1  # torch does not refuse it: DLPack before 1.0 has no read-only mark
    assert pinshm.as_array(mb).tolist() == [1.0] * 4 and tb.tolist() == [1.0] * 4
    raw = torch.from_dlpack(mb)  # the bytes too, in every subscriber
    assert bytes(raw[pinshm.as_array(mb).ctypes.data - np.asarray(mb).ctypes.data:].numpy()) == \
        np.ones(4, np.float32).tobytes()
    del ta, tb, raw
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


_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype, _name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_pointer.restype, _pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


class DLTensor(ctypes.Structure):
    """dlpack.h's DLTensor."""

    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Versioned(ctypes.Structure):
    """dlpack.h's DLManagedTensorVersioned (1.0)."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class Unversioned(ctypes.Structure):
    """dlpack.h's DLManagedTensor (before 1.0)."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


def _tensor(cap):
    """(capsule name, the managed tensor structure) of a DLPack capsule."""
    name = _name(cap)
    kind = Versioned if name == b"dltensor_versioned" else Unversioned
    return name, kind.from_address(_pointer(cap, name))


def test_capsule_kinds(pair):
    """max_version picks the capsule; a versioned one of a record is read-only."""
    tx, rx = pair()
    tx.send(b"0123456789")
    m = rx.recv_inplace(timeout=1)
    addr = np.asarray(m).ctypes.data
    for kw, name in (({}, b"dltensor"), ({"max_version": None}, b"dltensor"), ({"max_version": (0, 8)}, b"dltensor"),
                     ({"max_version": (1, 0)}, b"dltensor_versioned"),
                     ({"max_version": (1, 2)}, b"dltensor_versioned")):
        cap = m.__dlpack__(**kw)
        got, t = _tensor(cap)
        assert got == name
        if name == b"dltensor_versioned":
            assert (t.major, t.minor) == (1, 0) and t.flags == 1  # DLPACK_FLAG_BITMASK_READ_ONLY
        dl = t.dl_tensor
        assert (dl.data, dl.device_type, dl.device_id, dl.ndim) == (addr, 1, 0, 1)
        assert (dl.code, dl.bits, dl.lanes, dl.shape[0], dl.byte_offset) == (1, 8, 1, 10, 0)
        with pytest.raises(BufferError):
            m.release()  # the unconsumed capsule holds the record
        del cap, t, dl
    cap = m.__dlpack__(max_version=(1, 0), dl_device=(3, 0))  # kDLCUDAHost, asked for
    assert _tensor(cap)[1].dl_tensor.device_type == 1  # not granted: the channel is not registered
    del cap
    m.release()
    assert rx.held == 0


def test_dl_device_and_copy(pair):
    """Other devices are refused; copy=True gives bytes of the consumer's own."""
    tx, rx = pair()
    tx.send(b"abc")
    with rx.recv_inplace(timeout=1) as m:
        for dev in ((2, 0), (1, 1), (3, 1), (4, 0)):
            for copy in (None, False, True):
                with pytest.raises(BufferError):
                    m.__dlpack__(max_version=(1, 0), dl_device=dev, copy=copy)
        for bad in ({"max_version": 1}, {"dl_device": "cpu"}, {"copy": 1}, {"stream": "s"}):
            with pytest.raises(TypeError):
                m.__dlpack__(**bad)
        assert m.__dlpack__(copy=False, dl_device=(1, 0)) is not None
        cap = m.__dlpack__(max_version=(1, 0), copy=True)
        _, t = _tensor(cap)
        assert t.flags == 2  # DLPACK_FLAG_BITMASK_IS_COPIED, writable
        assert t.dl_tensor.data != np.asarray(m).ctypes.data
        assert ctypes.string_at(t.dl_tensor.data, 3) == b"abc"
        del t
        m.release()  # a copy holds no export of the record
        assert ctypes.string_at(_tensor(cap)[1].dl_tensor.data, 3) == b"abc"
        del cap


def test_consumers_hold_the_record(pair):
    """torch and numpy tensors of one message keep it until both are gone."""
    tx, rx = pair(capacity=1 << 14)
    tx.send(bytes(range(200)))
    m = rx.recv_inplace(timeout=1)
    t, n = torch.from_dlpack(m), np.from_dlpack(m)
    del m
    gc.collect()
    assert rx.held == 1
    filler = bytes([0xEE]) * 200
    sent = 0
    try:  # a producer that refilled the ring would overwrite a released record
        while True:
            tx.send(filler, timeout=0)
            sent += 1
    except pinshm.Full:
        pass
    assert t.tolist() == list(range(200)) and n.tobytes() == bytes(range(200))
    del t
    gc.collect()
    assert rx.held == 1 and n.tobytes() == bytes(range(200))
    del n
    gc.collect()
    assert rx.held == 0
    for _ in range(sent):
        with rx.recv_inplace(timeout=1) as f:
            assert bytes(f) == filler


def test_reservation_dlpack(pair):
    """A reservation is a writable tensor; commit waits for the tensor to go."""
    tx, rx = pair()
    r = tx.reserve(8)
    assert r.__dlpack_device__() == (1, 0)
    cap = r.__dlpack__(max_version=(1, 0))
    assert _name(cap) == b"dltensor_versioned" and _tensor(cap)[1].flags == 0
    del cap
    t = torch.from_dlpack(r)
    t.copy_(torch.arange(8, dtype=torch.uint8) * 3)
    with pytest.raises(BufferError):
        r.commit()
    del t
    r.commit()
    with pytest.raises(BufferError):
        r.__dlpack__()
    with rx.recv_inplace(timeout=1) as m:
        assert bytes(m) == bytes(i * 3 for i in range(8))


def test_dlpack_arguments_read_first(pair):
    """__dlpack__() reads its arguments before it looks at the record: an
    argument's __index__ that releases or commits it is seen, and no capsule
    is made over a record given back."""
    tx, rx = pair()
    tx.send(b"abc")
    m = rx.recv_inplace(timeout=1)

    class Releases:
        def __index__(self):
            m.release()
            return 1

    with pytest.raises(BufferError):
        m.__dlpack__(max_version=(Releases(), 0))
    assert m.released and rx.held == 0
    r = tx.reserve(8)

    class Commits:
        def __index__(self):
            r.commit()
            return 1

    with pytest.raises(BufferError):
        r.__dlpack__(max_version=(Commits(), 0))
    assert r.done
    with rx.recv_inplace(timeout=1) as got:
        assert len(got) == 8


def test_array_capsule_kinds(pair):
    """array_dlpack() passes max_version and the others on."""
    tx, rx = pair()
    pinshm.send_array(tx, np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)))
    with rx.recv_inplace(timeout=1) as m:
        cap = pinshm.array_dlpack(m, max_version=(1, 0))
        name, t = _tensor(cap)
        dl = t.dl_tensor
        assert name == b"dltensor_versioned" and t.flags == 1
        assert (dl.ndim, dl.code, dl.bits) == (2, 0, 32)
        assert (dl.shape[0], dl.shape[1], dl.strides[0], dl.strides[1]) == (2, 3, 1, 2)
        assert dl.data == pinshm.as_array(m).ctypes.data
        del cap, t, dl
        cap = pinshm.array_dlpack(m, max_version=(1, 0), copy=True)
        _, t = _tensor(cap)
        assert t.flags == 2 and ctypes.string_at(t.dl_tensor.data, 24) == np.arange(6, dtype=np.int32).reshape(2, 3).tobytes("F")
        del t
        with pytest.raises(BufferError):
            pinshm.array_dlpack(m, dl_device=(2, 0))
        del cap


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_USED = b"used_dltensor"  # a consumed capsule's name (kept alive here: the capsule points at it)


def test_copy_deleter_takes_no_gil(pair):
    """The deleter of a copy's tensor frees it without taking the GIL: called
    from a thread of its own while this one holds the GIL, it returns."""
    tx, rx = pair()
    tx.send(b"abc")
    m = rx.recv_inplace(timeout=1)
    cap = m.__dlpack__(copy=True)
    addr = _pointer(cap, b"dltensor")
    t = Unversioned.from_address(addr)
    assert ctypes.string_at(t.dl_tensor.data, 3) == b"abc"
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    assert set_name(cap, _USED) == 0  # consumed: the capsule's destructor leaves the tensor alone
    holding = ctypes.PyDLL(None)  # its calls keep the GIL
    tid = ctypes.c_ulong()
    holding.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p]
    assert holding.pthread_create(ctypes.byref(tid), None, t.deleter, addr) == 0
    until = _Timespec(int(time.time()) + 5, 0)
    holding.pthread_timedjoin_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p, ctypes.POINTER(_Timespec)]
    rc = holding.pthread_timedjoin_np(tid, None, ctypes.byref(until))
    if rc != 0:  # it waits for the GIL: let it have it, then fail
        ctypes.CDLL(None).pthread_join(tid, None)
    assert rc != errno.ETIMEDOUT, "the deleter of a copy waited for the GIL"
    assert rc == 0
    m.release()
    del cap
