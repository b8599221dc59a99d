"""Benchmark: pinshm.feed.Feed against torch.utils.data.DataLoader.

    python3 -m pinshm.bench_feed [--sizes 64K,256K,1M,4M,16M,64M] [--workers 2]
                                 [--rounds 4] [--mib 256] [--daemon PATH]

Both iterate the same synthetic dataset with the same workers, batch size
(16 samples) and prefetch_factor (2), persistent workers, one warm-up
epoch each.  Sample i is a float32 tensor of size/16 bytes made by one
pass over memory (base + i: the defined work per sample); the default
collate stacks the samples into the batch.  The consumer checksums every
batch (its sum, read from every byte) on both sides, and checks it.  On a
machine where torch.cuda.is_available(), both go to the GPU:
DataLoader(pin_memory=True) then .cuda(non_blocking=True), the feed's
record .cuda(non_blocking=True), the checksum taken there.

The feed runs with pin_memory=True there too (its channels registered
with the device, so that the copy is a DMA from the record).

The two alternate in rounds (A B A B ...), an epoch of each per round;
an epoch moves --mib MiB (8 to 256 batches); the report gives, per batch
size, each one's median batches/s and GB/s, host copies per batch between
a worker's write and the GPU or the consumer's tensor, and the median of
the per-round ratios feed / DataLoader.  The copies are measured on every
batch, not assumed: one where the consumer's tensor is not the memory the
worker wrote (the feed: its data pointer lies outside the record received;
DataLoader: its storage is not shared memory, as after the pin thread's
copy into pinned memory), and on the GPU one more where the tensor is not
pinned (the driver stages a pageable copy); the column gives their mean.

--daemon PATH starts that pinshmd on a private socket for the run, with
no max_segment_size (the rings of 64 MiB batches take 512 MiB); without it
the feed connects as pinshm.connect(autostart=True) does.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SAMPLES = 16
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class Synthetic:
    """n samples of `size` bytes each: sample i is base + i (float32), one pass over memory."""

    def __init__(self, n, size):
        import torch

        self.n = n
        self.base = torch.arange(size // 4, dtype=torch.float32).remainder_(251.0)
        self.base_sum = float(self.base.double().sum())

    def __len__(self):
        """n."""
        return self.n

    def __getitem__(self, i):
        """Sample i: base + i % 64, a new tensor."""
        import torch

        return torch.add(self.base, float(i % 64))

    def expected(self, indices):
        """The checksum of the batch of indices."""
        return sum(self.base_sum + float(i % 64) * self.base.numel() for i in indices)


def _size(text):
    """Bytes of a size such as 64K, 4M or 4MiB."""
    text = text.strip().upper().rstrip("B").rstrip("I")
    mult = _UNITS.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def _human(n):
    """n bytes as KiB or MiB."""
    for unit, m in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return "%g %s" % (n / m, unit)
    return "%d B" % n


def _in_record(feed, t):
    """Whether tensor t lies in a record the feed received (the memory its worker wrote)."""
    import numpy as np

    p = t.data_ptr()
    for w in feed._workers:
        for m in w.kept:
            a = np.frombuffer(m, np.uint8)
            if a.ctypes.data <= p < a.ctypes.data + a.nbytes:
                return True
    return False


def _copies(loader, batch, cuda):
    """Host copies of batch between its worker's write and the GPU (cuda) or the consumer."""
    from pinshm.feed import Feed

    own = _in_record(loader, batch) if isinstance(loader, Feed) else batch.is_shared()
    return (0 if own else 1) + (0 if not cuda or batch.is_pinned() else 1)


def _consume(loader, ds, cuda, copies=None):
    """Iterate one epoch, checksumming every batch; (batches, seconds).  copies: a list that
    gets each batch's host copies (_copies())."""
    import torch

    count, t0 = 0, time.perf_counter()
    for k, batch in enumerate(loader):
        if copies is not None:
            copies.append(_copies(loader, batch, cuda))
        if cuda:
            batch = batch.cuda(non_blocking=True)
        s = float(batch.sum(dtype=torch.float64))  # reads every byte; synchronizes a GPU copy
        want = ds.expected(range(k * SAMPLES, (k + 1) * SAMPLES))
        if abs(s - want) > 1e-6 * abs(want) + 1:
            raise SystemExit("batch %d: checksum %r, expected %r" % (k, s, want))
        count += 1
        del batch
    return count, time.perf_counter() - t0


def _run_size(size, args, cuda):
    """Rounds of both loaders at batches of size bytes; the report's line fields."""
    import torch.utils.data

    from pinshm.feed import Feed

    batches = max(8, min(256, args.mib * (1 << 20) // size))
    ds = Synthetic(batches * SAMPLES, size // SAMPLES)
    common = dict(batch_size=SAMPLES, num_workers=args.workers, prefetch_factor=2, persistent_workers=True)
    dl = torch.utils.data.DataLoader(ds, pin_memory=cuda, **common)
    feed = Feed(ds, socket=args.socket, autostart=args.socket is None, timeout=120, pin_memory=cuda, **common)
    rates = {"feed": [], "dataloader": []}
    copies = {"feed": [], "dataloader": []}
    ratios = []
    try:
        _consume(dl, ds, cuda)  # warm-up: workers started, pages touched
        _consume(feed, ds, cuda)
        for _ in range(args.rounds):
            r = {}
            for name, loader in (("dataloader", dl), ("feed", feed)):
                n, secs = _consume(loader, ds, cuda, copies[name])
                r[name] = n / secs
                rates[name].append(r[name])
            ratios.append(r["feed"] / r["dataloader"])
    finally:
        feed.close()
        del dl
    return rates, ratios, {k: statistics.mean(v) for k, v in copies.items()}


def _daemon(path):
    """Start pinshmd at path on a private socket: (process, folder, socket)."""
    folder = tempfile.mkdtemp(prefix="pinshm-bench-")
    sock, conf = os.path.join(folder, "sock"), os.path.join(folder, "pinshmd.conf")
    with open(conf, "w") as f:  # 64 MiB batches take rings of 512 MiB, over the default 256M
        f.write("[daemon]\nmax_segment_size = unlimited\ndefault_user_quota = unlimited\n")
    proc = subprocess.Popen([path, "-f", "--user", "-c", conf, "-s", sock], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("pinshmd did not start on %s" % sock)
        time.sleep(0.01)
    return proc, folder, sock


def main(argv=None):
    """Parse the arguments, run every size, print the table."""
    p = argparse.ArgumentParser(prog="python3 -m pinshm.bench_feed", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M", help="batch sizes (bytes; K, M suffixes)")
    p.add_argument("--workers", type=int, default=2, help="worker processes of each loader")
    p.add_argument("--rounds", type=int, default=4, help="rounds (an epoch of each) per size")
    p.add_argument("--mib", type=int, default=256, help="MiB an epoch moves (8 to 256 batches)")
    p.add_argument("--daemon", help="a pinshmd to start on a private socket for the run")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even where CUDA is available")
    args = p.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    proc = folder = None
    args.socket = None
    if args.daemon:
        proc, folder, args.socket = _daemon(args.daemon)
    try:
        where = "to the GPU (DataLoader pin_memory=True)" if cuda else "on the CPU (DataLoader without pin_memory)"
        print("pinshm.feed against torch DataLoader %s: %d workers, %d samples per batch, %d rounds, torch %s"
              % (where, args.workers, SAMPLES, args.rounds, torch.__version__))
        print("%-9s %-10s %10s %8s %7s   %s" % ("batch", "loader", "batches/s", "GB/s", "copies", "feed/DL"))
        for text in args.sizes.split(","):
            size = _size(text)
            rates, ratios, copies = _run_size(size, args, cuda)
            for name in ("dataloader", "feed"):
                bps = statistics.median(rates[name])
                print("%-9s %-10s %10.1f %8.2f %7.2f   %s" % (
                    _human(size), name, bps, bps * size / 1e9, copies[name],
                    "%.2fx (rounds: %s)" % (statistics.median(ratios), " ".join("%.2f" % r for r in ratios))
                    if name == "feed" else ""))
            sys.stdout.flush()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
