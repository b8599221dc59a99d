"""Devices from Python: registration and release_after() over the CUDA
backend, driven by the test double of libcuda.so.1 (tests/fake_cuda.c,
$PINSHM_FAKE_CUDA, loaded in place of the driver through
PINSHM_CUDA_LIBRARY).  Its events are pointers to an int: 0 pending, 1
done, 2 failed.  This proves the module's logic, not a GPU's DMA (the GPU
machine's checks do that)."""

import ctypes
import errno
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import pinshm

FAKE = os.environ.get("PINSHM_FAKE_CUDA", "")
PENDING, DONE, FAILED = 0, 1, 2


def test_no_driver(monkeypatch):
    """No libcuda: ENODEV, saying why."""
    monkeypatch.setenv("PINSHM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    with pytest.raises(pinshm.Error) as e:
        pinshm.cuda_device()
    assert e.value.errno == errno.ENODEV and "cannot load" in e.value.detail
    with pytest.raises(TypeError):
        pinshm.cuda_device("0")


@pytest.fixture
def dev(monkeypatch):
    """A Device of the fake driver."""
    if not FAKE or not os.path.exists(FAKE):
        pytest.skip("PINSHM_FAKE_CUDA does not name the fake driver (run through make check)")
    monkeypatch.setenv("PINSHM_CUDA_LIBRARY", FAKE)
    ctypes.CDLL(FAKE)  # the library under test loads this same one
    d = pinshm.cuda_device(0)
    assert d.kind == "cuda"
    with pytest.raises(pinshm.Error) as e:
        pinshm.cuda_device(5)  # the double has one device
    assert e.value.errno == errno.ENODEV
    return d


def events(n):
    """n events of the double, pending, and their handles."""
    ev = (ctypes.c_int * n)(*[PENDING] * n)
    return ev, [ctypes.addressof(ev) + i * ctypes.sizeof(ctypes.c_int) for i in range(n)]


def fill(tx, size=1000):
    """Send until the channel is full; return how many were sent."""
    n = 0
    try:
        while True:
            tx.send(bytes([n % 251]) * size, timeout=0)
            n += 1
    except pinshm.Full:
        return n


def test_register(pair, dev):
    tx, rx = pair(capacity=pinshm.MIN_CAPACITY)
    assert rx.registered(dev) == 0
    rx.register(dev)
    rx.register(dev)  # again: nothing
    assert rx.registered(dev) == pinshm.REGISTERED | pinshm.REGISTERED_READ_ONLY  # a consumer's
    tx.register(dev)
    assert tx.registered(dev) == pinshm.REGISTERED
    with pytest.raises(TypeError):
        rx.register("cuda")
    rx.unregister(dev)
    assert rx.registered(dev) == 0
    with pytest.raises(pinshm.Error) as e:
        rx.unregister(dev)
    assert e.value.errno == errno.ENOENT


def test_release_after(pair, dev):
    """A record goes back only once its event completed, and in order."""
    tx, rx = pair(capacity=pinshm.MIN_CAPACITY)
    sent = fill(tx)
    assert sent >= 3
    ev, h = events(3)
    m = rx.recv_inplace(timeout=1)
    with pytest.raises(pinshm.Error) as e:
        m.release_after(h[0])  # not registered
    assert e.value.errno == errno.ENOENT and not m.released
    rx.register(dev)
    other = pinshm.cuda_device(0)
    for bad, exc in ((("x",), TypeError), ((h[0], "metal"), ValueError), ((h[0], 3), TypeError),
                     ((0,), ValueError)):
        with pytest.raises(exc):
            m.release_after(*bad)
    with pytest.raises(pinshm.Error):
        m.release_after(h[0], other)  # a device it is not registered with
    m.release_after(h[0], "cuda")
    with pytest.raises(ValueError):
        m.release_after(h[0])
    with pytest.raises(BufferError):
        memoryview(m)
    del m
    assert rx.held == 0 and rx.release_poll() == 1
    with pytest.raises(pinshm.Full):
        tx.send(bytes(1000), timeout=0)  # the record's room is not the producer's yet
    # Out of order: the second's event is done, the first still holds it.
    m1, m2 = rx.recv_inplace(timeout=1), rx.recv_inplace(timeout=1)
    assert bytes(m2)[:1] == bytes([2])
    a2 = np.asarray(m2)
    ev[2] = DONE
    m2.release_after(h[2], dev)  # a view is alive: it waits for it too
    with pytest.raises(BufferError):
        m2.__dlpack__()
    with pytest.raises(ValueError, match="called already"):
        m2.release_after(h[1], dev)  # one event a message: never replaced
    del a2, m2
    m1.release_after(h[1])
    del m1
    assert rx.release_poll() == 3
    ev[1] = FAILED  # a failed copy is over too; the first still waits
    assert rx.release_poll() == 3
    ev[0] = DONE
    assert rx.release_poll() == 0
    tx.send(bytes(1000), timeout=0)
    n = 0
    while True:
        try:
            rx.recv_inplace(timeout=0).release()
            n += 1
        except pinshm.Empty:
            break
    assert n == sent - 3 + 1


class FakeEvent:
    """What release_after() reads of a torch.cuda.Event."""

    def __init__(self, handle):
        self.cuda_event = handle


class FakeStream:
    """What release_after() uses of a torch.cuda.Stream."""

    def __init__(self, handle):
        self.handle, self.recorded = handle, []

    def record_event(self):
        e = FakeEvent(self.handle)
        self.recorded.append(weakref.ref(e))
        return e


def test_event_objects_held(pair, dev):
    """An event object lives until its release is no longer pending."""
    tx, rx = pair()
    rx.register(dev)
    ev, h = events(2)
    tx.send(b"a")
    tx.send(b"b")
    e = FakeEvent(h[0])
    alive = weakref.ref(e)
    rx.recv_inplace(timeout=1).release_after(e)
    del e
    gc.collect()
    assert alive() is not None and rx.release_poll() == 1
    s = FakeStream(h[1])
    rx.recv_inplace(timeout=1).release_after(s)
    assert len(s.recorded) == 1 and s.recorded[0]() is not None
    ev[0] = DONE
    assert rx.release_poll() == 1
    gc.collect()
    assert alive() is None and s.recorded[0]() is not None  # the first is no longer pending
    ev[1] = DONE
    assert rx.release_poll() == 0
    gc.collect()
    assert alive() is None and s.recorded[0]() is None


def test_close_waits(pair, dev, client):
    """Closing a channel waits for the pending copies (the double completes
    an event it is asked to wait for), then lets the device go."""
    tx, rx = pair()
    refs = sys.getrefcount(dev)
    rx.register(dev)
    assert sys.getrefcount(dev) == refs + 1  # the channel holds it
    ev, h = events(1)
    tx.send(b"a")
    rx.recv_inplace(timeout=1).release_after(h[0])
    assert rx.release_poll() == 1
    rx.close()
    assert ev[0] == DONE
    assert sys.getrefcount(dev) == refs  # and let it go


def test_event_objects_bounded(pair, dev):
    """A steady loop of release_after() with copies in flight: the channel
    holds the objects of the pending releases only, not every event given."""
    tx, rx = pair()
    rx.register(dev)
    n, depth = 300, 3
    ev, h = events(n)
    alive, most = [], 0
    for i in range(n):
        tx.send(bytes([i % 251]) * 100)
        e = FakeEvent(h[i])
        alive.append(weakref.ref(e))
        rx.recv_inplace(timeout=1).release_after(e)
        del e
        if i >= depth:
            ev[i - depth] = DONE  # the copy of depth records ago completed
        assert rx.release_poll() > 0  # always one in flight: never all done
        most = max(most, rx.event_objects, sum(r() is not None for r in alive))
    assert most <= depth + 1
    for i in range(n):
        ev[i] = DONE
    assert rx.release_poll() == 0 and rx.event_objects == 0
    gc.collect()
    assert all(r() is None for r in alive)


def _device_type(cap):
    """The device type of an unversioned DLPack capsule's tensor (kDLCPU 1, kDLCUDAHost 3)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_int32.from_address(get(cap, b"dltensor") + 8).value  # DLTensor: data, then device


def test_cuda_host_only_registered(pair, dev):
    """kDLCUDAHost is granted to the records of a channel registered with a
    CUDA device only; others, and copies, say kDLCPU."""
    tx, rx = pair()
    tx.send(b"abc")
    tx.send(b"def")
    with rx.recv_inplace(timeout=1) as m:
        cap = m.__dlpack__(dl_device=(3, 0))
        assert _device_type(cap) == 1  # not registered: not pinned for CUDA
        del cap
    rx.register(dev)
    with rx.recv_inplace(timeout=1) as m:
        cap = m.__dlpack__(dl_device=(3, 0))
        assert _device_type(cap) == 3
        del cap
        cap = m.__dlpack__(dl_device=(3, 0), copy=True)
        assert _device_type(cap) == 1  # a copy is plain memory
        del cap
        cap = m.__dlpack__()
        assert _device_type(cap) == 1  # not asked for
        del cap


def test_event_objects_after_a_burst(pair, dev):
    """60 releases pending that all complete unseen, then 6 handed to the
    library at once: the channel makes room for them by dropping the objects
    of those no longer pending, and keeps the new ones."""
    tx, rx = pair()
    rx.register(dev)
    for i in range(66):
        tx.send(bytes([i]) * 64)
    ev, h = events(66)
    for i in range(60):
        rx.recv_inplace(timeout=1).release_after(FakeEvent(h[i]))
    assert rx.release_poll() == 60 and rx.event_objects == 60
    for i in range(60):
        ev[i] = DONE
    first = rx.recv_inplace(timeout=1)  # holds back the next ones
    later = []
    for i in range(61, 66):
        e = FakeEvent(h[i])
        later.append(weakref.ref(e))
        rx.recv_inplace(timeout=1).release_after(e)
        del e
    assert rx.event_objects == 60  # nothing was handed over yet
    first.release()  # hands the five over, after the first
    assert rx.release_poll() == 5 and rx.event_objects == 5
    gc.collect()
    assert all(r() is not None for r in later)
    for i in range(61, 66):
        ev[i] = DONE
    assert rx.release_poll() == 0 and rx.event_objects == 0
    gc.collect()
    assert all(r() is None for r in later)  # none kept for ever


@pytest.fixture(scope="module")
def opencl():
    """(the loader libOpenCL.so.1, a cl_context of the first platform's devices: pocl's here)."""
    try:
        cl = ctypes.CDLL("libOpenCL.so.1")
    except OSError:
        pytest.skip("no OpenCL loader (libOpenCL.so.1)")
    n, plat = ctypes.c_uint(), (ctypes.c_void_p * 1)()
    if cl.clGetPlatformIDs(1, plat, ctypes.byref(n)) != 0 or n.value == 0:
        pytest.skip("no OpenCL platform (an ICD such as pocl)")
    devs, err = (ctypes.c_void_p * 1)(), ctypes.c_int()
    if cl.clGetDeviceIDs(ctypes.c_void_p(plat[0]), ctypes.c_ulong(0xFFFFFFFF), 1, devs, ctypes.byref(n)) != 0:
        pytest.skip("the OpenCL platform has no device")
    cl.clCreateContext.restype = cl.clCreateUserEvent.restype = ctypes.c_void_p
    cl.clReleaseContext.argtypes = cl.clReleaseEvent.argtypes = [ctypes.c_void_p]
    cl.clCreateUserEvent.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    cl.clSetUserEventStatus.argtypes = [ctypes.c_void_p, ctypes.c_int]
    ctx = cl.clCreateContext(None, 1, devs, None, None, ctypes.byref(err))
    if not ctx:
        pytest.skip("clCreateContext failed (%d)" % err.value)
    yield cl, ctx
    cl.clReleaseContext(ctx)


def test_opencl_device_refuses_what_is_no_context():
    """Stray integers and pointers to anything but an ICD object are EINVAL, not a crash;
    non-integers a TypeError.  Needs no OpenCL: the handle is looked at before the loader."""
    table = (ctypes.c_void_p * 9)()  # a "dispatch table" of nulls
    fake_obj = ctypes.c_void_p(ctypes.addressof(table))
    for bad in (0, 12345, -1 & 0xFFFFFFFFFFFFFFFF, id(object()), ctypes.addressof(ctypes.c_long(0)),
                ctypes.addressof(fake_obj)):
        with pytest.raises(pinshm.Error) as e:
            pinshm.opencl_device(bad)
        assert e.value.errno in (errno.EINVAL, errno.ENODEV), bad
    with pytest.raises(pinshm.Error) as e:
        pinshm.opencl_device(12345)
    assert e.value.errno == errno.EINVAL and "not an OpenCL context" in e.value.detail
    for bad in ("ctx", 1.5, object()):
        with pytest.raises(TypeError):
            pinshm.opencl_device(bad)


def test_opencl_device_on_a_real_runtime(pair, opencl):
    """A real cl_context (pocl here), as an integer and as a pyopencl-like object with int_ptr:
    a Device; a channel registers with it; release_after() of a cl_event (a user event) holds
    the record until the event completes, and a stray integer event is a ValueError."""
    cl, ctx = opencl
    d = pinshm.opencl_device(ctx)
    assert d.kind == "opencl"

    class Context:
        int_ptr = ctx

    assert pinshm.opencl_device(Context()).kind == "opencl"
    tx, rx = pair()
    rx.register(d)
    assert rx.registered(d) & pinshm.REGISTERED
    tx.send(b"x" * 100)
    m = rx.recv_inplace(timeout=1)
    for bad in (12345, id(object())):
        with pytest.raises(ValueError):
            m.release_after(bad)
    err = ctypes.c_int()
    ev = cl.clCreateUserEvent(ctx, ctypes.byref(err))
    assert ev and err.value == 0
    m.release_after(ev)
    del m
    assert rx.release_poll() == 1  # the event has not completed
    assert cl.clSetUserEventStatus(ev, 0) == 0  # CL_COMPLETE
    assert rx.release_poll() == 0
    rx.unregister(d)
    cl.clReleaseEvent(ev)
