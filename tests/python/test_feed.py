"""pinshm.feed: batches in place from worker processes, in order or not,
structures, worker errors and deaths, early ends, epochs, the record header."""

import ctypes
import errno
import gc
import os
from multiprocessing import resource_tracker
import random
import signal
import struct
import threading
import time

import numpy as np
import pytest

import pinshm
from pinshm import feed as pf
from pinshm import feed_format as pff
from pinshm.feed import Collate, Feed, Leaf, WorkerDied, WorkerError

torch = pytest.importorskip("torch")


class Squares:
    """Sample i: (a 4x3 float32 tensor of i, i, {"v": numpy int32 arange(5) + i})."""

    def __init__(self, n=40, fail_at=None, kill_at=None):
        self.n, self.fail_at, self.kill_at = n, fail_at, kill_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError("sample %d is unreadable" % i)
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((4, 3), float(i)), i, {"v": np.arange(5, dtype=np.int32) + i}


def check(batch, indices):
    """The batch of Squares holds exactly the samples of indices, in that order."""
    x, y, d = batch
    assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.shape == (len(indices), 4, 3)
    assert isinstance(y, np.ndarray) and y.dtype == np.int64 and list(y) == list(indices)
    assert (x.reshape(len(indices), -1) == torch.tensor(indices, dtype=torch.float32)[:, None]).all()
    assert d["v"].dtype == np.int32 and (d["v"] == np.arange(5) + np.array(indices)[:, None]).all()


def children():
    """Processes whose parent is this one, but multiprocessing's resource tracker (spawn starts it)."""
    me, found = str(os.getpid()), []
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
        except OSError:
            continue
        if pid.isdigit() and stat.rsplit(")", 1)[1].split()[1] == me and int(pid) != tracker:
            found.append(int(pid))
    return found


@pytest.fixture
def clean(client, daemon):
    """Check, after the test, that no worker and no channel name is left."""
    yield client
    left = [p for p in children() if p != daemon.proc.pid]
    deadline = time.monotonic() + 5
    while left and time.monotonic() < deadline:  # a process exits as we look
        time.sleep(0.05)
        left = [p for p in children() if p != daemon.proc.pid and os.path.exists("/proc/%d" % p)]
    assert not left, "processes left behind: %s" % left
    assert client.list() == [], "channels left behind"


def test_in_order(clean):
    with Feed(Squares(40), batch_size=6, num_workers=2, prefetch_factor=2, timeout=30) as feed:
        assert len(feed) == 7
        got = []
        for b in feed:
            got.append(list(b[1]))
            check(b, got[-1])
        assert got == [list(range(i, min(i + 6, 40))) for i in range(0, 40, 6)]


def test_unordered_and_numpy_output(clean):
    with Feed(Squares(50), batch_size=4, num_workers=2, in_order=False, output="numpy", timeout=30) as feed:
        seen = []
        for x, y, d in feed:
            assert isinstance(x, np.ndarray) and (x.reshape(len(y), -1) == y[:, None]).all()
            seen.extend(y)
        assert sorted(seen) == list(range(50))


def test_batches_are_the_records(clean):
    """Zero copy: the tensor is inside the record the worker wrote."""
    with Feed(Squares(8), batch_size=4, num_workers=1, timeout=30) as feed:
        for x, y, d in feed:
            msg = feed._workers[0].kept[-1]
            base = np.frombuffer(msg, np.uint8).__array_interface__["data"][0]
            assert base <= x.data_ptr() and x.data_ptr() + x.numel() * 4 <= base + len(msg)
            assert np.shares_memory(d["v"], np.frombuffer(msg, np.uint8))
            del msg


class Pairs:
    """Samples of other kinds: bools, bfloat16, 0-d arrays, floats, nested lists."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return {"mask": torch.tensor([i % 2 == 0, True]), "half": torch.full((2,), i, dtype=torch.bfloat16),
                "nest": [np.float64(i / 2), (np.array(i, dtype=np.int16), float(i))]}


def test_structures_and_torch_output(clean):
    with Feed(Pairs(), batch_size=5, num_workers=2, output="torch", timeout=30) as feed:
        for k, b in enumerate(feed):
            idx = torch.arange(5 * k, 5 * k + 5)
            assert b["mask"].dtype == torch.bool and (b["mask"][:, 0] == (idx % 2 == 0)).all()
            assert b["half"].dtype == torch.bfloat16 and (b["half"][:, 1].float() == idx.float()).all()
            half, (i16, fl) = b["nest"]
            assert isinstance(b["nest"], list) and isinstance(b["nest"][1], tuple)
            assert half.dtype == torch.float64 and (half == idx / 2).all()
            assert i16.dtype == torch.int16 and i16.shape == (5,) and (i16.long() == idx).all() and (fl == idx.double()).all()


class IntoRecord(Collate):
    """A collate of its own: writes the sum of each sample's vector into out."""

    def layout(self, samples):
        return (Leaf("n", np.float32, (len(samples),)), Leaf("t", "int64", (len(samples), 2)))

    def __call__(self, samples, out):
        sums, ids = out
        for i, (x, y, _) in enumerate(samples):
            sums[i] = float(x.sum())
            ids[i, 0], ids[i, 1] = y, -y


def test_custom_collates(clean):
    with Feed(Squares(12), batch_size=4, num_workers=2, collate_fn=IntoRecord(), timeout=30) as feed:
        for k, (sums, ids) in enumerate(feed):
            assert list(sums) == [12.0 * i for i in range(4 * k, 4 * k + 4)]
            assert ids[:, 0].tolist() == list(range(4 * k, 4 * k + 4)) and (ids[:, 1] == -ids[:, 0]).all()

    def plain(samples):  # DataLoader's kind: copied into the record
        return {"y": torch.tensor([s[1] for s in samples]), "x": np.stack([s[2]["v"] for s in samples])}

    with Feed(Squares(12), batch_size=5, num_workers=2, collate_fn=plain, timeout=30) as feed:
        assert [b["y"].tolist() for b in feed] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]


def test_worker_exception_is_raised_with_its_traceback(clean):
    feed = Feed(Squares(40, fail_at=13), batch_size=4, num_workers=2, timeout=30)
    seen = []
    with pytest.raises(ValueError) as e:
        for b in feed:
            seen.append(b[1][0])
    assert seen == [0, 4, 8]  # in order: batch 3 holds sample 13
    text = str(e.value)
    assert "sample 13 is unreadable" in text and "Traceback" in text and "__getitem__" in text
    assert "worker 1" in text and "batch 3" in text
    feed.close()


def test_unpicklable_exception_becomes_worker_error(clean):
    class Odd(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    class DS(Squares):
        def __getitem__(self, i):
            raise Odd(1, 2)

    with Feed(DS(8), batch_size=4, num_workers=1, timeout=30) as feed, pytest.raises(WorkerError, match="Odd"):
        list(feed)


def test_killed_worker_fails_cleanly(clean):
    t0 = time.monotonic()
    feed = Feed(Squares(40, kill_at=21), batch_size=4, num_workers=2, timeout=30)
    with pytest.raises(WorkerDied, match=r"worker 1 \(pid \d+\) was killed by signal 9 \(SIGKILL\)"):
        for _ in feed:
            pass
    assert time.monotonic() - t0 < 20
    feed.close()


class DieInCollate(Collate):
    """A collate that kills its worker while it holds the reservation, at batch 2."""

    def layout(self, samples):
        return pf.StackCollate().layout(samples)

    def __call__(self, samples, out):
        pf.StackCollate()(samples, out)
        if samples[0][1] == 8:
            os.kill(os.getpid(), signal.SIGKILL)


def test_worker_killed_mid_reserve(clean):
    with Feed(Squares(40), batch_size=4, num_workers=1, collate_fn=DieInCollate(), timeout=30) as feed:
        seen = []
        with pytest.raises(WorkerDied, match="SIGKILL"):
            for b in feed:
                check(b, list(range(b[1][0], b[1][0] + 4)))
                seen.append(b[1][0])
        assert seen in ([0], [0, 4])  # batch 1 is committed, but the death may be seen first


def test_break_keeps_the_last_batch_valid(clean):
    feed = Feed(Squares(400), batch_size=4, num_workers=2, timeout=30)
    for n, b in enumerate(feed):
        if n == 3:
            break
    check(b, list(range(12, 16)))  # the record outlives the workers and the channel's name
    assert clean.list() == []
    del b
    feed.close()


def test_exception_in_the_loop_body(clean):
    feed = Feed(Squares(400), batch_size=4, num_workers=2, timeout=30)
    with pytest.raises(ZeroDivisionError):
        for n, b in enumerate(feed):
            if n == 2:
                1 / 0
    assert clean.list() == []
    feed.close()


def test_ctrl_c_while_waiting(clean):
    class Slow(Squares):
        def __getitem__(self, i):
            time.sleep(0.2)
            return super().__getitem__(i)

    feed = Feed(Slow(100), batch_size=4, num_workers=2, timeout=30)
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            for b in feed:
                pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    feed.close()


def test_spawned_workers(clean):
    """The workers need no fork: with spawn the dataset and collate travel pickled."""
    with Feed(Squares(12), batch_size=4, num_workers=1, multiprocessing_context="spawn", timeout=60) as feed:
        for b in feed:
            check(b, list(range(b[1][0], b[1][0] + 4)))
        assert b[1][0] == 8


def test_persistent_workers_across_epochs(clean):
    with Feed(Squares(30), batch_size=4, num_workers=2, persistent_workers=True, timeout=30) as feed:
        for b in feed:
            break  # leaves batches in flight for the next epoch to drop
        pids = [w.proc.pid for w in feed._workers]
        for epoch in range(2):
            got = []
            for b in feed:
                check(b, list(b[1]))
                got.extend(b[1])
            assert got == list(range(30))
            assert [w.proc.pid for w in feed._workers] == pids
        del b
    assert not feed._workers


def test_drop_last(clean):
    with Feed(Squares(10), batch_size=4, num_workers=2, drop_last=True, timeout=30) as feed:
        assert len(feed) == 2 and [list(b[1]) for b in feed] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with Feed(Squares(10), batch_size=4, num_workers=2, timeout=30) as feed:
        assert len(feed) == 3 and [len(b[1]) for b in feed] == [4, 4, 2]


def test_shuffle_with_a_seed_is_reproducible(clean):
    def orders(seed, epochs=2):
        with Feed(Squares(24), batch_size=5, shuffle=True, seed=seed, num_workers=2, persistent_workers=True,
                  timeout=30) as feed:
            return [[int(i) for b in feed for i in b[1]] for _ in range(epochs)]

    a, b, c = orders(7), orders(7), orders(8)
    assert a == b and a != c and a[0] != a[1]
    assert sorted(a[0]) == list(range(24)) and sorted(a[1]) == list(range(24))
    g = torch.Generator().manual_seed(3)
    with Feed(Squares(24), batch_size=5, shuffle=True, generator=g, num_workers=1, timeout=30) as feed:
        assert sorted(int(i) for b in feed for i in b[1]) == list(range(24))


def test_keeping_every_batch_is_an_error_not_a_hang(clean):
    with Feed(Squares(200), batch_size=2, num_workers=1, prefetch_factor=1, timeout=30) as feed:
        kept = []
        with pytest.raises(RuntimeError, match="keeps batches .* alive"):
            for b in feed:
                kept.append(b)
        assert len(kept) >= 1
        check(kept[0], [0, 1])  # still valid
        del kept, b


class Growing(Squares):
    """Sample i: a float32 array of 4 values for the first 4 samples, of 2000 after."""

    def __getitem__(self, i):
        return np.full(4 if i < 4 else 2000, i, dtype=np.float32)


def test_keeping_the_first_batch_is_an_error_not_a_hang(clean):
    """Records go back in order: the first batch kept holds back every later one (batches of
    8 KB: the channel holds fewer than the 64 records the library lets a consumer hold)."""
    with Feed(Growing(400), batch_size=2, sampler=range(4, 400), num_workers=1, prefetch_factor=2, timeout=10) as feed:
        first = None
        with pytest.raises(RuntimeError, match="keeps batches of worker 0 alive that hold .* records"):
            for n, b in enumerate(feed):
                if n == 0:
                    first = b
        assert n < 60
        assert first[:, 0].tolist() == [4, 5]  # still valid
        del first, b


@pytest.mark.parametrize("in_order", [True, False])
def test_worker_error_is_not_overtaken_by_its_next_batch(clean, in_order):
    """Worker 1 fails on batch 3 and commits batch 5 before batch 3 is due: the error is raised."""
    feed = Feed(Squares(40, fail_at=3), batch_size=1, num_workers=2, prefetch_factor=2, timeout=30,
                in_order=in_order)
    seen = []
    with pytest.raises(ValueError, match="sample 3 is unreadable"):
        for b in feed:
            seen.append(int(b[1][0]))
            time.sleep(0.3)  # the workers are ahead: batch 5 is in worker 1's channel
    assert seen == [0, 1, 2] if in_order else 3 not in seen
    feed.close()




def test_batches_bigger_than_the_first_need_max_batch_bytes(clean):
    with Feed(Growing(12), batch_size=2, num_workers=1, timeout=30) as feed:
        with pytest.raises(ValueError, match=r"does not fit .*max_batch_bytes"):
            for _ in feed:
                pass
    with Feed(Growing(12), batch_size=2, num_workers=1, timeout=30, max_batch_bytes=20000) as feed:
        assert [b[:, 0].tolist() for b in feed] == [[2 * k, 2 * k + 1] for k in range(6)]


def test_collate_error_is_raised_not_a_buffer_error(clean):
    """The collate's frames hold views of the record: the worker's error still comes through."""

    class Ragged(Squares):
        def __getitem__(self, i):
            return np.zeros(1 + i % 2, dtype=np.float32)

    with Feed(Ragged(8), batch_size=2, num_workers=1, timeout=30) as feed:
        with pytest.raises(ValueError, match="same shape") as e:
            list(feed)
        assert "_stack_into" in str(e.value)


def test_worker_info_and_init(clean):
    class Who(Squares):
        def __getitem__(self, i):
            info = pf.get_worker_info()
            return np.array([info.id, info.num_workers, os.environ["FEED_INIT"] == str(info.id)])

    def init(wid):
        os.environ["FEED_INIT"] = str(wid)

    with Feed(Who(8), batch_size=2, num_workers=2, worker_init_fn=init, timeout=30) as feed:
        assert [b[:, 0].tolist() for b in feed] == [[0, 0], [1, 1], [0, 0], [1, 1]]
    assert pf.get_worker_info() is None


def test_header_round_trip_and_fuzz():
    """Every header parse_header accepts describes leaves within the record."""
    leaves = [Leaf("t", "float32", (3, 5)), Leaf("n", "<i2", (7,)), Leaf("n", "|b1", ())]
    structure = ["d", [["a", 0], ["b", ["t", [1, 2]]]]]
    head, offsets, size = pff._layout(structure, leaves, 5, 9)
    rec = bytearray(head + bytes(size - len(head)))
    ep, number, s, got = pf.parse_header(rec)
    assert (ep, number, s) == (5, 9, structure)
    assert [(lf.kind, lf.dtype, lf.shape, off) for lf, off in got] == [
        (lf.kind, lf.dtype, lf.shape, off) for lf, off in zip(leaves, offsets)]
    with pytest.raises(ValueError):
        pf.parse_header(rec[: offsets[-1]])  # the last leaf would pass the end
    rng = random.Random(1)
    accepted = 0
    for _ in range(3000):
        r = bytearray(rec[: rng.choice([size, size, len(head), rng.randrange(size + 1)])])
        for _ in range(rng.randrange(1, 4)):
            if r:
                r[rng.randrange(min(len(r), len(head)))] = rng.randrange(256)
        try:
            _, _, s, got = pf.parse_header(r)
        except ValueError:
            continue
        accepted += 1
        end = 0
        for lf, off in got:
            assert off >= end and off % 64 == 0 and off + lf.nbytes <= len(r)
            end = off + lf.nbytes
        seen = set()
        pff._check_struct(s, len(got), seen)
        assert seen == set(range(len(got)))
    assert accepted > 0
    bad = struct.pack("<4sHHIIQII", b"PSHF", 1, 1, 0, 64, 0, 20, 0) + b'{"s":0,"l":[["n","O",[],64]]}'
    with pytest.raises(ValueError):
        pf.parse_header(bad.ljust(128, b"\0"))


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        Feed(Squares(), num_workers=0)
    with pytest.raises(ValueError):
        Feed(Squares(), prefetch_factor=40)
    with pytest.raises(ValueError):
        Feed(Squares(), sampler=[1, 2], shuffle=True)
    with pytest.raises(TypeError):
        Leaf("n", object, (2,))
    assert pinshm.feed.Feed is Feed


class Stuck(Squares):
    """Sample 0 never comes: its worker reads no more of its pipe."""

    def __getitem__(self, i):
        if i == 0:
            time.sleep(600)
        return super().__getitem__(i)


def test_close_with_a_full_pipe(clean):
    """close() never waits on a worker's full control pipe: the worker is ended."""
    feed = Feed(Stuck(8), batch_size=1, num_workers=1, persistent_workers=True, timeout=0.5)
    with pytest.raises(pinshm.Timeout):
        next(iter(feed))
    w = feed._workers[0]
    fd = w.conn.fileno()
    os.set_blocking(fd, False)
    with pytest.raises(BlockingIOError):
        while True:
            os.write(fd, bytes(4096))
    os.set_blocking(fd, True)
    closer = threading.Thread(target=feed.close, daemon=True)
    closer.start()
    closer.join(30)
    stuck = closer.is_alive()
    if stuck:  # let it go: the worker's end closes
        os.kill(w.proc.pid, signal.SIGKILL)
        closer.join(30)
    assert not stuck, "close() waited on a full pipe"
    assert w.proc.exitcode is not None


class OpenFails:
    """A client whose open() fails (the daemon's refusal, injected)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    def open(self, *args, **kw):
        raise pinshm.Error(errno.EMFILE, "open refused (injected)")


def test_failed_open_leaves_no_name(clean):
    feed = Feed(Squares(8), batch_size=2, num_workers=1, timeout=30)
    feed._client = OpenFails(pinshm.connect())
    with pytest.raises(pinshm.Error, match="injected"):
        next(iter(feed))
    assert clean.list() == [], "the channel created for the worker is left"
    feed.close()


def test_feed_started_by_a_thread_that_ends(clean):
    """Workers outlive the thread that started them (they follow the process)."""
    feed = Feed(Squares(12), batch_size=4, num_workers=2, persistent_workers=True, timeout=30)
    got = []
    t = threading.Thread(target=lambda: got.extend(int(b[1][0]) for b in feed))
    t.start()
    t.join(60)
    assert got == [0, 4, 8]
    time.sleep(0.5)  # a worker killed when the thread ended is dead by now
    with feed:
        assert [int(b[1][0]) for b in feed] == [0, 4, 8]


class OnFirstBatch(Collate):
    """Stacks the samples, and calls what(out) at the first batch of its worker."""

    def __init__(self, what):
        self.what, self.calls = what, 0

    def layout(self, samples):
        return pf.StackCollate().layout(samples)

    def __call__(self, samples, out):
        pf.StackCollate()(samples, out)
        self.calls += 1  # in the worker
        if self.calls == 1:
            self.what(out)


def raise_with(out):
    """Fail with an exception that holds the batch's views of the record."""
    raise ValueError("bad batch", out)


def test_views_in_an_exception_do_not_hold_the_record(clean):
    """The exception's arguments hold views of the record: it is aborted still, and
    the worker's next batches go through."""
    with Feed(Squares(8), batch_size=2, num_workers=1, prefetch_factor=1, collate_fn=OnFirstBatch(raise_with),
              persistent_workers=True, timeout=30) as feed:
        with pytest.raises(ValueError, match="bad batch"):
            list(feed)
        for b in feed:
            check(b, list(b[1]))


_KEPT = []


class LetGo(Squares):
    """Clears the views kept (_KEPT) once the file flag exists."""

    def __init__(self, n, flag):
        super().__init__(n)
        self.flag = flag

    def __getitem__(self, i):
        if os.path.exists(self.flag):
            _KEPT.clear()
        return super().__getitem__(i)


def test_a_view_kept_by_the_collate_is_a_clear_error(clean, tmp_path):
    """A view of a record kept past its batch: that batch and the worker's next ones
    fail saying so, the feed goes on, and once the view goes the worker writes again."""
    flag = str(tmp_path / "let-go")
    with Feed(LetGo(8, flag), batch_size=2, num_workers=1, prefetch_factor=1, collate_fn=OnFirstBatch(_KEPT.append),
              persistent_workers=True, timeout=30) as feed:
        with pytest.raises(BufferError, match="view of the record of batch 0 .* is still alive"):
            list(feed)
        with pytest.raises(RuntimeError, match="still alive.*batch 0 of epoch 2 cannot be written"):
            list(feed)
        open(flag, "w").close()
        for b in feed:
            check(b, list(b[1]))


class _FakeCuda(ctypes.Structure):
    """struct fake_cuda of tests/fake_cuda.h (the double of libcuda.so.1)."""

    _fields_ = [("devices", ctypes.c_int), ("can_map", ctypes.c_int), ("read_only", ctypes.c_int),
                ("refuse_read_only", ctypes.c_int), ("fail_register", ctypes.c_int),
                ("no_get_proc", ctypes.c_int), ("on_sync", ctypes.c_void_p), ("sync_fails", ctypes.c_int),
                ("max_register", ctypes.c_size_t), ("uva", ctypes.c_int), ("get_proc_calls", ctypes.c_int),
                ("register_calls", ctypes.c_int), ("unregister_calls", ctypes.c_int), ("syncs", ctypes.c_int),
                ("ctx_retained", ctypes.c_int), ("ctx_depth", ctypes.c_int), ("last_flags", ctypes.c_uint),
                ("nregs", ctypes.c_int), ("regs", (ctypes.c_void_p * 2) * 16)]


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch believes it has CUDA device 0, and the driver pinshm loads is the double: its state."""
    fake = os.environ.get("PINSHM_FAKE_CUDA", "")
    if not fake or not os.path.exists(fake):
        pytest.skip("PINSHM_FAKE_CUDA does not name the fake driver (run through make check)")
    monkeypatch.setenv("PINSHM_CUDA_LIBRARY", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return _FakeCuda.in_dll(ctypes.CDLL(fake), "fake_cuda")


def test_pin_memory_registers_the_records(clean, fake_gpu, monkeypatch):
    """pin_memory=True registers every worker's channel with the current CUDA device: each batch
    lies in a range the driver pinned; they go with the channels.  It does not initialize torch's
    CUDA (torch.cuda.current_device() would), which would make the workers spawned, not forked."""
    asked = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: asked.append(1) or 0)
    regs0 = fake_gpu.nregs
    feed = Feed(Squares(24), batch_size=4, num_workers=2, pin_memory=True, timeout=30)
    with feed:
        seen = 0
        for k, batch in enumerate(feed):
            check(batch, range(4 * k, 4 * k + 4))
            p = batch[0].data_ptr()
            assert any(b <= p < b + n for b, n in list(fake_gpu.regs)[:fake_gpu.nregs]), \
                "batch %d is not in a registered range" % k
            seen += 1
        assert seen == 6 and feed.pin_device is not None and feed.pin_device.kind == "cuda"
        assert not asked, "torch.cuda.current_device() called while torch's CUDA was not initialized"
    del batch
    gc.collect()
    assert fake_gpu.nregs == regs0  # unregistered with the channels


def test_pin_memory_without_cuda_warns(clean, monkeypatch):
    """pin_memory=True where torch has no CUDA device: a warning, as DataLoader, and plain batches;
    the same where torch has one but the driver cannot be loaded."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with Feed(Squares(8), batch_size=4, num_workers=1, pin_memory=True, timeout=30) as feed:
        with pytest.warns(UserWarning, match="pin_memory=True but torch has no CUDA device"):
            batches = [check(b, range(4 * k, 4 * k + 4)) for k, b in enumerate(feed)]
        assert len(batches) == 2 and feed.pin_device is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("PINSHM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1")
    with Feed(Squares(8), batch_size=4, num_workers=1, pin_memory=True, timeout=30) as feed:
        with pytest.warns(UserWarning, match="CUDA device 0 cannot be opened"):
            assert len([check(b, range(4 * k, 4 * k + 4)) for k, b in enumerate(feed)]) == 2
    with pytest.raises(ValueError):
        Feed(Squares(8), batch_size=4, num_workers=1, pin_memory=True, pin_memory_device="cpu")


def test_bench_counts_copies(clean):
    """bench_feed's copies column is measured: 0 for a feed batch (the record) and for
    DataLoader's (a worker's shared memory), 1 for a copy of either."""
    from pinshm.bench_feed import _copies

    ds = torch.arange(8 * 16, dtype=torch.float32).reshape(8, 16)
    with Feed(ds, batch_size=4, num_workers=1, timeout=30) as feed:
        for batch in feed:
            assert _copies(feed, batch, False) == 0
            assert _copies(feed, batch.clone(), False) == 1
    del batch
    dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)
    for batch in dl:
        assert _copies(dl, batch, False) == 0
        assert _copies(dl, batch.clone(), False) == 1


def test_feed_dropped_mid_epoch(clean):
    """A feed and its epoch dropped mid-way, no close(): the garbage collector ends the
    workers and unlinks the channels (clean checks), persistent workers too."""
    for persistent in (False, True):
        feed = Feed(Squares(40), batch_size=4, num_workers=2, persistent_workers=persistent, timeout=30)
        it = iter(feed)
        batch = next(it)
        check(batch, range(4))
        assert len(children()) >= 2
        del feed, it, batch
        gc.collect()


class Counted(Squares):
    """Squares that count the samples made, in a counter shared with the workers."""

    def __init__(self, n, counter, slow_worker=None):
        super().__init__(n)
        self.counter, self.slow_worker = counter, slow_worker

    def __getitem__(self, i):
        with self.counter.get_lock():
            self.counter.value += 1
        info = pf.get_worker_info()
        if self.slow_worker is not None and info.id == self.slow_worker and i == 0:
            # Slow until another worker has made a batch (2 samples besides this one), then
            # long enough for it to reach the loop.
            deadline = time.monotonic() + 10
            while self.counter.value < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
        return super().__getitem__(i)


def test_in_flight_bound(clean):
    """While the loop holds its second batch, the workers have made the two taken and
    prefetch_factor x num_workers batches besides, and no more."""
    import multiprocessing

    counter = multiprocessing.get_context("fork").Value("l", 0)
    with Feed(Counted(200, counter), batch_size=2, num_workers=2, prefetch_factor=3, timeout=30) as feed:
        it = iter(feed)
        check(next(it), [0, 1])
        check(next(it), [2, 3])  # both workers have their channels now
        assert sum(len(w.tasks) for w in feed._workers) <= 3 * 2
        bound = (3 * 2 + 2) * 2
        deadline = time.monotonic() + 3
        while counter.value < bound and time.monotonic() < deadline:  # the workers do what they were given
            time.sleep(0.05)
        time.sleep(0.2)  # and would go on here, were they given more
        assert counter.value == bound, "%d samples made, %d in flight at most" % (counter.value, bound)
        del it


@pytest.mark.parametrize("in_order", [False, True])
def test_unordered_overtakes_a_slow_worker(clean, in_order):
    """Worker 0 slow on its first batch: in_order=False gives worker 1's batches first,
    in_order=True waits for batch 0; every batch once either way."""
    import multiprocessing

    counter = multiprocessing.get_context("fork").Value("l", 0)
    ds = Counted(16, counter, slow_worker=0)
    with Feed(ds, batch_size=2, num_workers=2, in_order=in_order, output="numpy", timeout=30) as feed:
        firsts = [int(y[0]) for x, y, d in feed]
    assert sorted(firsts) == list(range(0, 16, 2))
    if in_order:
        assert firsts == list(range(0, 16, 2))
    else:
        assert firsts[0] != 0 and firsts.index(0) > 0, firsts
