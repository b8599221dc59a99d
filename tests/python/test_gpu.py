"""The module on a real GPU: a record of a registered channel is pinned
memory to torch, a non-blocking copy from it to the device is right, and
its bandwidth is that of torch's own pinned memory.  Skipped, saying why,
where torch has no CUDA device (tests/gpu/run runs these on a GPU machine,
with -s so that the figures are printed)."""

import numpy as np
import pytest

import pinshm

torch = pytest.importorskip("torch", reason="torch is not installed for this Python")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is false (tests/gpu/run runs these "
                "on a GPU machine)", allow_module_level=True)

MIB = 1 << 20


@pytest.fixture
def registered(pair):
    """A producer and a consumer of a 160 MiB queue whose consumer handle
    is registered with CUDA device 0."""
    tx, rx = pair(capacity=160 * MIB)
    dev = pinshm.cuda_device(0)
    rx.register(dev)
    yield tx, rx
    torch.cuda.synchronize()


def send_bytes(tx, data):
    """@p data (a numpy array) written in place into a reserved record."""
    with tx.reserve(data.nbytes) as buf:
        np.frombuffer(buf, dtype=data.dtype)[:] = data.ravel()


def test_record_is_pinned(registered):
    """torch asks CUDA whether the record's pointer is pinned: it is."""
    tx, rx = registered
    send_bytes(tx, np.arange(1024, dtype=np.float32))
    msg = rx.recv_inplace(timeout=5)
    t = torch.from_dlpack(msg)
    assert t.is_pinned()
    assert t.data_ptr() == np.frombuffer(msg, dtype=np.uint8).ctypes.data
    del t
    msg.release()


def test_nonblocking_copy_right(registered):
    """A non-blocking copy to the GPU from a record, released after its
    event, reads the record's data even though producers refill the ring
    right after the release."""
    tx, rx = registered
    rng = np.random.default_rng(7)
    want = rng.standard_normal(4 * MIB // 4, dtype=np.float32)
    send_bytes(tx, want)
    msg = rx.recv_inplace(timeout=5)
    g = torch.from_dlpack(msg).view(torch.float32).to("cuda", non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    msg.release_after(ev)
    del msg
    for i in range(60):  # past the 160 MiB ring: its records written over
        send_bytes(tx, np.full(want.size, i, dtype=np.float32))
        rx.recv(timeout=5)
    torch.cuda.synchronize()
    assert torch.equal(g.cpu(), torch.from_numpy(want))


def h2d_seconds(src, dst, reps):
    """Seconds of @p reps copies of @p src to @p dst, timed by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def test_bandwidth_as_pinned(registered):
    """h2d GB/s of a 64 MiB record against torch's pinned memory of the same
    size, alternating in rounds; printed, and the record must not fall to
    pageable speed (half of pinned's, a wide margin)."""
    tx, rx = registered
    n = 64 * MIB
    send_bytes(tx, np.ones(n, dtype=np.uint8))
    msg = rx.recv_inplace(timeout=5)
    rec = torch.from_dlpack(msg)
    pinned = torch.ones(n, dtype=torch.uint8).pin_memory()
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    h2d_seconds(pinned, dst, 2)
    h2d_seconds(rec, dst, 2)
    ratios = []
    for _ in range(7):
        p = h2d_seconds(pinned, dst, 10)
        r = h2d_seconds(rec, dst, 10)
        ratios.append(p / r)
    ratios.sort()
    ratio = ratios[len(ratios) // 2]
    gbs = 10 * n / r / 1e9
    print("\nh2d 64 MiB: registered record %.1f GB/s, %.3fx torch's pinned memory "
          "(median of 7 rounds)" % (gbs, ratio))
    del rec
    msg.release()
    assert ratio > 0.5, "a registered record copies at %.2fx pinned memory's speed" % ratio



def test_feed_batches_are_pinned(client):
    """Feed(pin_memory=True): each batch is pinned memory to torch (the record of a registered
    channel, not a copy), and a non-blocking copy of it to the GPU, synchronized before the
    batch goes, is right."""
    from pinshm.feed import Feed

    ds = torch.arange(32 * 1024, dtype=torch.float32).reshape(32, 1024)  # map-style: len() and [i]
    with Feed(ds, batch_size=4, num_workers=2, pin_memory=True, timeout=60) as feed:
        n = 0
        for k, batch in enumerate(feed):
            assert batch.is_pinned(), "batch %d is not pinned" % k
            g = batch.cuda(non_blocking=True)
            torch.cuda.synchronize()  # before the batch goes: its record is the DMA's source
            assert torch.equal(g.cpu(), ds[4 * k:4 * k + 4])
            n += 1
        assert n == 8 and feed.pin_device is not None
