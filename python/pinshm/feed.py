"""pinshm.feed: a DataLoader whose workers write batches into pinned shared memory.

Feed takes a map-style dataset (``len(ds)`` and ``ds[i]``) and the usual
arguments of torch.utils.data.DataLoader; its workers run the dataset's
``__getitem__`` and a collate that writes each batch straight into a record
reserved in a pinshm channel, and the main process iterates the batches in
place, as torch tensors or numpy arrays over the record (no host copy
between a worker's write and the consumer's tensor)::

    from pinshm.feed import Feed
    feed = Feed(dataset, batch_size=64, shuffle=True, num_workers=4, seed=0, pin_memory=True)
    for epoch in range(10):
        for images, labels in feed:          # tensors over the records
            loss = model(images.cuda(non_blocking=True), labels.cuda())
            ...
    feed.close()

Each worker has a channel of its own (a queue created by the main process
on the daemon that pinshm.connect() reaches, named ``@UID.feed...``), sized
from its first batch.  Batch k goes to worker k % num_workers, and in order
(the default) batch k is taken from that worker's channel; with
``in_order=False`` whichever batch is ready comes first.  At most
``prefetch_factor`` batches per worker are in flight.

Lifetime of a batch: a batch's tensors and arrays are the record itself,
read-only in spirit (a torch tensor is writable whatever DLPack says: do
not write into it).  The record stays valid while any of them is alive, and
goes back to the worker once they are all gone.  Records go back in order,
per worker: a batch kept alive holds back every later record of its worker,
so the loop may keep at most its latest ``prefetch_factor`` batches per
worker alive (the last one, a few for logging); holding back as many
records as a worker's channel holds (an old batch kept while the loop goes
on does) raises RuntimeError rather than stalling the workers.  Copy (``tensor.clone()``,
``array.copy()``) what must live longer.  On an accelerator, let a
non-blocking copy from a batch complete (e.g. synchronize, or any ``.item()``
after it) before the batch goes: with ``pin_memory=True`` (the channels
registered with the CUDA device, the batches pinned) the copy is a DMA
from the record that runs after the call returns, and a record let go is
the worker's to write again.

Errors: an exception in a worker is raised in the main process when its
batch is due, as the same exception type where it can be made from a
message (else WorkerError), with the worker's traceback in its text.  A
worker that dies (a signal, os._exit) fails the iteration at once with
WorkerDied (batches it committed before may go
undelivered); it is not restarted.  A collate must let go of its views of
out when it returns: a view kept beyond (in a global, an exception kept
alive) keeps the record reserved, and that batch and the worker's later
ones fail saying so until the view goes.  Workers end themselves once
the main process has ended (a thread of theirs watches the parent's pid).  A break, an exception in the loop body or
Ctrl-C stops the workers of the epoch (or, with persistent_workers, leaves
them for the next epoch until close()) and unlinks the channels: no process
and no channel name is left behind.

The fork rule: a process forked from one that uses pinshm may not use the
Client, Channel, Message or Reservation objects it inherits (their methods
raise pinshm.Error; close() only forgets them); it connects and opens
channels by itself.  The workers do exactly that, so the default start
method is fork, as DataLoader's (no pickling of the dataset, fast start);
``multiprocessing_context="spawn"`` or ``"forkserver"`` works too (then the
dataset, collate_fn and worker_init_fn must pickle), and is the safe choice
once the main process has initialised CUDA (it is chosen then by default).

The layout header of a record, little-endian::

    offset  size  field
    0       4     magic b"PSHF"
    4       2     format version (1)
    6       2     leaves: number of arrays in the batch (1..1024)
    8       4     epoch (u32)
    12      4     data_offset: where the first array starts (a multiple of 64)
    16      8     batch number in the epoch (u64)
    24      4     text_len: bytes of the description (u32)
    28      4     0
    32      text_len  the description: JSON {"s": structure, "l": leaves}
    ...     zeros up to data_offset

structure is a leaf number, or ``["t", [...]]`` (tuple), ``["l", [...]]``
(list) or ``["d", [[key, structure], ...]]`` (dict with string keys), at most
8 deep, naming every leaf once; each leaf is ``[kind, dtype, shape,
offset]``: kind "t" (a torch tensor, dtype a torch dtype's name such as
"float32") or "n" (a numpy array, dtype numpy's dtype.str such as "<f4"),
shape a list of at most 32 sizes, offset a multiple of 64 at or after
data_offset.  The arrays are C-contiguous, in increasing offsets without
overlap, and the last ends at or before the record's end.  Every field is
checked on receipt (ValueError otherwise).

The worker side lives in pinshm.feed_worker, the record format in
pinshm.feed_format and the collates in pinshm.feed_collate; their public
names are pinshm.feed's.
"""

import collections
import errno
import itertools
import os
import select
import signal
import struct
import sys
import time
import warnings
import weakref

import _pinshm

from .arrays import _ALIGN, _np
from .feed_collate import Collate, StackCollate
from .feed_format import _FIXED, _TORCH_DL, Leaf, _build, _torch, _torch_name, parse_header
from .feed_worker import WorkerInfo, _worker, get_worker_info

__all__ = ["Feed", "Collate", "StackCollate", "Leaf", "WorkerError", "WorkerDied", "get_worker_info", "WorkerInfo",
           "parse_header"]


class WorkerError(RuntimeError):
    """An exception raised in a worker, where its own type could not be made."""


class WorkerDied(RuntimeError):
    """A worker process ended during an iteration (a signal, os._exit, a crash)."""


def _reraise(err):
    """Raise a worker's exception (type, text) again: that type where it takes the text."""
    cls, text = err
    try:
        exc = cls(text) if cls is not None else None
    except Exception:
        exc = None
    if not isinstance(exc, BaseException) or str(exc) != text:
        exc = WorkerError(text)
    raise exc


# ---- the main process ------------------------------------------------------


def _tell_stop(conn):
    """Tell a worker to stop through its pipe, never waiting: False where the pipe is full
    (a worker that reads no more) or closed, and the worker is to be terminated."""
    try:
        os.set_blocking(conn.fileno(), False)
        conn.send(None)
        return True
    except OSError:  # BlockingIOError: full; a partial message does not matter, it is ended
        return False


def _pow2(n):
    """The smallest power of two at least n (and 64 KiB)."""
    return 1 << max(16, (int(n) - 1).bit_length())


_feeds = itertools.count()


class _Worker:
    """The main process's view of one worker: process, pipe, channel, records."""

    def __init__(self, wid, proc, conn):
        self.id, self.proc, self.conn = wid, proc, conn
        self.chan = None  # the consumer end of its channel, once it asked for one
        self.name = self.fd = None
        self.slots = 0  # records its channel holds at least
        self.tasks = collections.deque()  # (epoch, number) sent, oldest first
        self.kept = []  # messages of batches yielded, not yet released
        self.aside = None  # a record received while the error of an earlier task was due
        self.errors = {}  # (epoch, number) -> (type, text) of the worker's exception


class Feed:
    """A DataLoader whose batches are records of pinned shared memory, in place.

    Feed(dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None,
         num_workers=2, collate_fn=None, drop_last=False, prefetch_factor=2,
         persistent_workers=False, worker_init_fn=None, generator=None, seed=None,
         in_order=True, output=None, timeout=None, max_batch_bytes=None,
         socket=None, autostart=False, multiprocessing_context=None,
         pin_memory=False, pin_memory_device="")

    dataset: map-style (len() and [i]); IterableDataset is not supported.
    batch_size, shuffle, sampler, batch_sampler, drop_last: as DataLoader
    (sampler and batch_sampler: any iterables of indices and of lists of
    indices, torch's samplers included).  num_workers: at least 1, the
    worker processes.  collate_fn: None (StackCollate: samples stacked
    straight into the record), a Collate (writes into the record itself),
    or DataLoader's kind, samples -> batch (its batch is copied into the
    record).  prefetch_factor: batches in flight per worker (1..31).
    persistent_workers: keep workers and channels from one epoch to the
    next, until close().  worker_init_fn(worker_id): called in each worker
    at its start.  generator (torch.Generator or numpy Generator) or seed
    (int): the shuffle order and the workers' seeds (seed + epoch shuffles
    reproducibly; worker i seeds random, numpy and torch with base + i).
    in_order: batches in the sampler's order (True) or as they come.
    output: None keeps each leaf's kind (tensors stay tensors, arrays and
    numbers arrays), "torch" or "numpy" gives every leaf so.  timeout:
    seconds to wait for a batch (None: no limit; pinshm.Timeout after).
    max_batch_bytes: the largest record a batch takes, for batches that grow
    (default: the first batch of each worker, its channel sized for it).
    socket, autostart: as pinshm.connect().  multiprocessing_context: a
    context or a start method's name (default: fork, or spawn once CUDA is
    initialised here).  pin_memory: register each worker's channel with the
    current CUDA device (torch.cuda.current_device(), or pin_memory_device
    such as "cuda:1"; Channel.register()), so that the batches read as
    pinned (tensor.is_pinned()) and tensor.cuda(non_blocking=True) is an
    asynchronous DMA from the record itself, no copy on the host; where
    torch has no CUDA device, or the driver refuses, it warns (as
    DataLoader does) and the batches are plain shared memory.  The device
    is attribute pin_device (None when not pinned).

    Iterating gives batches in place (see the module's doc for how long
    they stay valid); len() is the number of batches of an epoch.
    close() (or the end of a with block) stops the workers and unlinks
    the channels.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=2,
                 collate_fn=None, drop_last=False, prefetch_factor=2, persistent_workers=False, worker_init_fn=None,
                 generator=None, seed=None, in_order=True, output=None, timeout=None, max_batch_bytes=None,
                 socket=None, autostart=False, multiprocessing_context=None, pin_memory=False,
                 pin_memory_device=""):
        if num_workers < 1:
            raise ValueError("pinshm.feed needs num_workers >= 1 (the workers write the records)")
        if not 1 <= prefetch_factor <= (_pinshm.MAX_HELD - 2) // 2:
            raise ValueError("prefetch_factor must be 1 to %d" % ((_pinshm.MAX_HELD - 2) // 2))
        if output not in (None, "torch", "numpy"):
            raise ValueError("output: None, 'torch' or 'numpy'")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler excludes batch_size, shuffle, sampler and drop_last")
        if sampler is not None and shuffle:
            raise ValueError("sampler excludes shuffle")
        if pin_memory_device and str(pin_memory_device).split(":")[0] != "cuda":
            raise ValueError("pin_memory_device: a CUDA device ('cuda', 'cuda:N'), not %r" % (pin_memory_device,))
        self.dataset = dataset
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        self.collate_fn = StackCollate() if collate_fn is None else collate_fn
        self.persistent_workers, self.worker_init_fn = persistent_workers, worker_init_fn
        self.generator, self.in_order, self.output, self.timeout = generator, in_order, output, timeout
        self.max_batch_bytes = max_batch_bytes
        self.socket, self.autostart = socket, autostart
        self.seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed)
        self.epoch = 0
        self.pin_memory, self.pin_memory_device = bool(pin_memory), pin_memory_device
        self.pin_device = None  # the pinshm.Device the channels are registered with
        self._pin_asked = False
        self._ctx = multiprocessing_context
        self._id = next(_feeds)
        self._client = None
        self._workers = []
        self._active = None  # weak reference to the running epoch's generator

    # -- batches of indices --

    def _batches(self, epoch):
        """The lists of indices of epoch's batches."""
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        if self.sampler is not None:
            order = iter(self.sampler)
        elif self.shuffle:
            order = iter(self._permutation(epoch))
        else:
            order = iter(range(len(self.dataset)))
        return self._chunks(order)

    def _permutation(self, epoch):
        """The shuffled order of epoch's indices."""
        n = len(self.dataset)
        g = self.generator
        if g is not None and type(g).__module__.startswith("torch"):
            return _torch().randperm(n, generator=g).tolist()
        if g is None:
            g = _np().random.default_rng([self.seed & 0xFFFFFFFFFFFFFFFF, epoch])
        return g.permutation(n).tolist()

    def _chunks(self, order):
        """Lists of batch_size indices of order (the last shorter unless drop_last)."""
        while True:
            b = list(itertools.islice(order, self.batch_size))
            if not b or (self.drop_last and len(b) < self.batch_size):
                return
            yield b

    def __len__(self):
        """The number of batches of an epoch."""
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # -- workers --

    def _context(self):
        """The multiprocessing context of the workers."""
        import multiprocessing

        ctx = self._ctx
        if ctx is None:
            torch = sys.modules.get("torch")
            cuda = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
            ctx = "spawn" if cuda or "fork" not in multiprocessing.get_all_start_methods() else "fork"
        return multiprocessing.get_context(ctx) if isinstance(ctx, str) else ctx

    def _start(self):
        """Connect and start the workers (their channels come with their first batch)."""
        if self._client is None:
            self._client = _pinshm.connect(self.socket, self.autostart)
        ctx = self._context()  # before the CUDA device: the start method is the program's choice, not ours
        if self.pin_memory and not self._pin_asked:
            self._pin_asked = True
            self.pin_device = self._open_pin_device()
        base = self._base_seed()
        # A forkserver's children are not ours: their parent is the server.
        parent = None if ctx.get_start_method() == "forkserver" else os.getpid()
        try:
            for wid in range(self.num_workers):
                mine, theirs = ctx.Pipe()
                p = ctx.Process(target=_worker, daemon=True, name="pinshm.feed worker %d" % wid,
                                args=(wid, self.num_workers, base + wid, self.socket, theirs, self.dataset,
                                      self.collate_fn, self.worker_init_fn, parent))
                p.start()
                theirs.close()
                self._workers.append(_Worker(wid, p, mine))
        except BaseException:
            self._stop()
            raise

    def _open_pin_device(self):
        """The CUDA device (a pinshm.Device) to register the channels with, or None after a warning."""
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None or not torch.cuda.is_available():
            warnings.warn("pinshm.feed: pin_memory=True but torch has no CUDA device (torch.cuda.is_available() "
                          "is false): the batches are not pinned", stacklevel=4)
            return None
        index = torch.device(self.pin_memory_device).index if self.pin_memory_device else None
        if index is None:
            # torch.cuda.current_device() would initialize torch's CUDA, and the
            # workers would then be spawned where the program forks them.
            index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        ordinal = index
        try:
            return _pinshm.cuda_device(ordinal)
        except _pinshm.Error as e:
            warnings.warn("pinshm.feed: pin_memory=True but CUDA device %d cannot be opened (%s): the batches "
                          "are not pinned" % (ordinal, e), stacklevel=4)
            return None

    def _base_seed(self):
        """The workers' base seed, from generator or seed (and the epoch)."""
        g = self.generator
        if g is not None and type(g).__module__.startswith("torch"):
            return int(_torch().empty((), dtype=_torch().int64).random_(generator=g).item())
        if g is not None:
            return int(g.integers(1 << 62))
        return (self.seed * 1000003 + self.epoch) & ((1 << 62) - 1)

    def _stop(self):
        """Stop the workers, release what the main process holds, unlink the channels."""
        workers, self._workers = self._workers, []
        told = [_tell_stop(w.conn) for w in workers]
        for w in workers:
            self._drop_channel(w)
        for w, asked in zip(workers, told):
            if asked:
                w.proc.join(2)
            if w.proc.exitcode is None:
                w.proc.terminate()
                w.proc.join(2)
            if w.proc.exitcode is None:
                w.proc.kill()
                w.proc.join()
            w.conn.close()

    def _drop_channel(self, w):
        """Unlink w's channel and leave it; records the loop still holds stay valid."""
        if w.chan is None:
            return
        try:
            self._client.unlink(w.name)
        except _pinshm.Error:
            pass
        for m in w.kept + ([w.aside] if w.aside is not None else []):
            try:
                m.release()
            except BufferError:
                pass
        w.kept, w.aside = [], None
        try:
            w.chan.close()
        except BufferError:
            pass  # a batch is still alive: the channel goes with it
        w.chan = None

    def close(self):
        """Stop the workers and unlink the channels (batches still alive stay valid)."""
        active = self._active and self._active()
        if active is not None:
            active.close()
        self._stop()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        """Return self."""
        return self

    def __exit__(self, *exc):
        """close()."""
        self.close()

    def __del__(self):
        """Stop workers left running."""
        try:
            if self._workers:
                self._stop()
        except Exception:
            pass

    # -- the main loop --

    def __iter__(self):
        """An epoch: its batches in place (starts the workers unless they persist)."""
        active = self._active and self._active()
        if active is not None:
            active.close()  # one epoch at a time
        gen = self._epoch()
        self._active = weakref.ref(gen)  # a break drops the loop's reference: the epoch ends then
        return gen

    def _epoch(self):
        """The generator of an epoch; its end (or close()) stops non-persistent workers."""
        self.epoch += 1
        epoch = self.epoch
        try:
            if not self._workers:
                self._start()
            self._drain()
            batches = enumerate(self._batches(epoch))
            yield from (self._ordered if self.in_order else self._unordered)(epoch, batches)
        except WorkerDied:
            self._stop()  # even persistent workers: the dead one's channel holds half a story
            raise
        finally:
            if not self.persistent_workers:
                self._stop()

    def _send(self, w, epoch, number, indices):
        """Give worker w the task of batch (epoch, number)."""
        w.tasks.append((epoch, number))
        try:
            w.conn.send((epoch, number, list(indices)))
        except OSError:  # BrokenPipeError: it died
            self._gone(w, "closed its pipe")

    def _ordered(self, epoch, batches):
        """Batch k from worker k % num_workers, k = 0, 1, ..."""
        n = self.num_workers
        sent = done = 0
        for number, indices in itertools.islice(batches, self.prefetch_factor * n):
            self._send(self._workers[number % n], epoch, number, indices)
            sent += 1
        while done < sent:
            w = self._workers[done % n]
            want, got = self._take(w)
            batch = self._accept(w, want, got, (epoch, done))
            nxt = next(batches, None)
            if nxt is not None:
                self._send(self._workers[nxt[0] % n], epoch, nxt[0], nxt[1])
                sent += 1
            done += 1
            yield batch
            batch = None  # the loop's reference only

    def _unordered(self, epoch, batches):
        """Whichever batch is ready first; its worker gets the next task."""
        pending = 0
        for w in self._workers:
            for number, indices in itertools.islice(batches, self.prefetch_factor):
                self._send(w, epoch, number, indices)
                pending += 1
        while pending:
            w, want, got = self._take_any()
            pending -= 1
            batch = self._accept(w, want, got, want)
            nxt = next(batches, None)
            if nxt is not None:
                self._send(w, epoch, nxt[0], nxt[1])
                pending += 1
            yield batch
            batch = None

    def _drain(self):
        """Persistent workers: drop what an unfinished epoch left in flight."""
        for w in self._workers:
            while w.tasks:
                _, got = self._take(w)
                if not isinstance(got, tuple):
                    got.release()

    def _accept(self, w, want, got, due):
        """The batch of record got for task want (due: what it must be); raises a worker's error."""
        if isinstance(got, tuple):
            _reraise(got)
        try:
            batch, tag = self._unpack(got)
        except BaseException:
            got.release()
            raise
        if tag != want or want != due:
            del batch
            got.release()
            raise RuntimeError("pinshm.feed: worker %d sent batch %s, %s was due" % (w.id, tag, due))
        w.kept.append(got)
        return batch

    def _take(self, w):
        """(task, Message or error) of w's oldest task, waiting for it."""
        while True:
            want = w.tasks[0]
            if want in w.errors:
                w.tasks.popleft()
                return want, w.errors.pop(want)
            got = self._receive([w])[1]
            if got is not None:
                return w.tasks.popleft(), got

    def _take_any(self):
        """(worker, task, Message or error) of whichever worker answers first."""
        while True:
            for w in self._workers:
                if w.tasks and w.tasks[0] in w.errors:
                    want = w.tasks.popleft()
                    return w, want, w.errors.pop(want)
            w, got = self._receive([w for w in self._workers if w.tasks])
            if got is not None:
                return w, w.tasks.popleft(), got

    def _unpack(self, msg):
        """(batch, (epoch, number)) of a record."""
        with memoryview(msg) as view:
            ep, number, structure, leaves = parse_header(view)
        return _build(structure, [self._leaf(msg, lf, off) for lf, off in leaves]), (ep, number)

    def _leaf(self, msg, leaf, off):
        """The tensor or array of leaf at off in msg, in place."""
        kind = self.output[0] if self.output else leaf.kind
        np = _np()
        if kind == "t":
            torch = _torch()
            name = leaf.dtype if leaf.kind == "t" else _torch_name(np.dtype(leaf.dtype))
            code, bits = _TORCH_DL[name]
            t = torch.from_dlpack(_pinshm._dlpack(msg, off, leaf.shape, None, code, bits))
            return t.view(torch.bool) if name == "bool" else t
        if leaf.kind == "t" and leaf.dtype == "bfloat16":
            raise TypeError("pinshm.feed: numpy has no bfloat16 (use output='torch')")
        dt = np.dtype(leaf.dtype)
        count = leaf.nbytes // dt.itemsize if dt.itemsize else 0
        return np.frombuffer(msg, dt, count, off).reshape(leaf.shape)

    def _release_kept(self, w):
        """Give back the records of w the loop has let go of; RuntimeError if it keeps too many."""
        kept = []
        for m in w.kept:
            try:
                m.release()
            except BufferError:
                kept.append(m)
        w.kept = kept
        # Records go back in order: the oldest one kept holds back every later one.  The
        # batch awaited next needs room besides those, or the worker waits forever.
        held = w.chan.held if w.chan is not None else 0
        if held and w.aside is None and held >= w.slots:
            raise RuntimeError(
                "pinshm.feed: the loop keeps batches of worker %d alive that hold %d of its records, and its "
                "channel holds %d (records go back in order: a batch kept holds back every later one): keep "
                "at most prefetch_factor batches per worker alive, the latest ones, or copy them "
                "(tensor.clone(), array.copy())" % (w.id, held, w.slots))

    def _receive(self, ws):
        """(worker, Message) of the first of ws with a record, or (worker, None) after a
        message of its pipe (an error is filed in w.errors)."""
        deadline = None if self.timeout is None else _now() + self.timeout
        for w in ws:
            self._release_kept(w)
        while True:
            armed = True
            for w in ws:
                if w.aside is not None:
                    got, w.aside = w.aside, None
                    return w, got
                try:
                    if w.chan is not None:
                        try:
                            got = w.chan.recv_inplace(0)
                        except _pinshm.Empty:
                            pass
                        else:
                            return w, self._due(w, got)
                    if w.conn.poll():
                        self._control(w)
                        return w, None
                    if w.chan is not None and not w.chan.arm():
                        armed = False
                except _pinshm.PeerGone:
                    self._gone(w, "left its channel")
            self._check_alive()
            if not armed:
                continue
            left = None if deadline is None else deadline - _now()
            if left is not None and left <= 0:
                raise _pinshm.Timeout(errno.ETIMEDOUT, "pinshm.feed: no batch within %s s" % self.timeout)
            fds = [w.conn for w in ws] + [w.fd for w in ws if w.chan is not None]
            select.select(fds + [x.proc.sentinel for x in self._workers], [], [], left)

    def _due(self, w, msg):
        """msg, or None where it is not w's oldest task and the error of that task is in w's pipe.

        A worker sends a batch's error down its pipe, then goes on with its next batch: the
        error is read before that record, which waits aside for its turn.
        """
        try:
            tag = _FIXED.unpack_from(msg, 0)[3:6:2]  # (epoch, number)
        except (struct.error, TypeError, BufferError):
            return msg  # not a record: _accept says so
        if not w.tasks or tag == (w.tasks[0][0] & 0xFFFFFFFF, w.tasks[0][1]):
            return msg
        while w.tasks[0] not in w.errors and w.conn.poll():
            self._control(w)
        if w.tasks[0] not in w.errors:
            return msg  # _accept says it was not due
        w.aside = msg
        return None

    def _control(self, w):
        """Handle a message of w's pipe: a channel request, or an error to file."""
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):
            self._gone(w, "closed its pipe")
        if msg[0] == "size":
            self._make_channel(w, msg[1])
            return
        _, epoch, number, err = msg
        if number < 0:
            _reraise(err)
        w.errors[(epoch, number)] = err

    def _make_channel(self, w, size):
        """Create and open w's channel for records of size bytes, and tell w its name."""
        slot = (max(size, self.max_batch_bytes or 0) + 2 * _ALIGN - 1) // _ALIGN * _ALIGN
        cap = _pow2((self.prefetch_factor + 2) * slot)
        w.name = _pinshm.own_name("feed.%d.%d.%d.%d" % (os.getpid(), self._id, w.id, w.proc.pid))
        while True:  # smaller where the daemon refuses, down to 2 records besides one lost at the end
            try:
                self._client.create(w.name, capacity=cap, max_message=cap // 2 - _ALIGN, max_producers=1)
                break
            except _pinshm.Error as e:
                if e.errno not in (errno.EFBIG, errno.ENOMEM, errno.ENOSPC) or cap // 2 // slot < 3:
                    raise
                cap //= 2
        try:
            w.chan = self._client.open(w.name, _pinshm.CONSUMER)
            w.fd = w.chan.fileno()  # made before arm() may be called
            if self.pin_device is not None:
                self._pin(w)
        except BaseException:
            if w.chan is not None:
                w.chan.close()
                w.chan = None
            try:
                self._client.unlink(w.name)  # no name left behind
            except _pinshm.Error:
                pass
            raise
        # A record may not fit at the ring's end (one slot lost); the library holds 64 at most.
        # The worker's records are at most a slot (its header besides), so that w.slots holds.
        w.slots = min(cap // slot - 1, _pinshm.MAX_HELD - 2)
        w.conn.send(("chan", w.name, slot - _ALIGN))

    def _pin(self, w):
        """Register w's channel with pin_device (a warning, and no pinning, where the driver refuses)."""
        try:
            w.chan.register(self.pin_device)
        except _pinshm.Error as e:
            warnings.warn("pinshm.feed: pin_memory=True but the channel of worker %d cannot be registered with "
                          "CUDA (%s): its batches are not pinned" % (w.id, e), stacklevel=2)

    def _gone(self, w, what):
        """Raise WorkerDied for w, which what (it left): with its exit status once it has one."""
        w.proc.join(10)  # its descriptors close before the kernel reports its end
        self._check_alive()
        raise WorkerDied("pinshm.feed: worker %d (pid %d) %s" % (w.id, w.proc.pid, what))

    def _check_alive(self):
        """Raise WorkerDied if a worker has ended."""
        for w in self._workers:
            code = w.proc.exitcode
            if code is not None:
                how = ("was killed by signal %d (%s)" % (-code, signal.Signals(-code).name) if code < 0
                       else "exited with status %d" % code)
                raise WorkerDied("pinshm.feed: worker %d (pid %d) %s" % (w.id, w.proc.pid, how))


_now = time.monotonic
