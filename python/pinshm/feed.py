"""pinshm.feed: a DataLoader whose workers write batches into pinned shared memory.

Feed takes a map-style dataset (``len(ds)`` and ``ds[i]``) and the usual
arguments of torch.utils.data.DataLoader; its workers run the dataset's
``__getitem__`` and a collate that writes each batch straight into a record
reserved in a pinshm channel, and the main process iterates the batches in
place, as torch tensors or numpy arrays over the record (no host copy
between a worker's write and the consumer's tensor)::

    from pinshm.feed import Feed
    feed = Feed(dataset, batch_size=64, shuffle=True, num_workers=4, seed=0)
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
after it) before the batch goes.

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
"""

import collections
import errno
import itertools
import json
import os
import random
import select
import signal
import struct
import sys
import time
import traceback
import weakref

import _pinshm

from .arrays import _ALIGN, _MAX_DIMS, _np  # the array messages' alignment, dimensions, numpy on first use

__all__ = ["Feed", "Collate", "StackCollate", "Leaf", "WorkerError", "WorkerDied", "get_worker_info"]

MAGIC = b"PSHF"
_VERSION = 1
_FIXED = struct.Struct("<4sHHIIQII")
_MAX_LEAVES = 1024
_MAX_DEPTH = 8
_MAX_TEXT = 1 << 20


class WorkerError(RuntimeError):
    """An exception raised in a worker, where its own type could not be made."""


class WorkerDied(RuntimeError):
    """A worker process ended during an iteration (a signal, os._exit, a crash)."""


# ---- torch and numpy, imported on first use --------------------------------


def _torch():
    """torch, imported on first use (a feed of numpy arrays never imports it)."""
    import torch

    return torch


_TORCH_DL = {  # torch dtype name -> (DLPack code, bits)
    "bool": (1, 8),  # as uint8, viewed as bool on receipt
    "uint8": (1, 8), "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "float16": (2, 16), "bfloat16": (4, 16), "float32": (2, 32), "float64": (2, 64),
    "complex64": (5, 64), "complex128": (5, 128),
}


def _torch_dtype(name):
    """The torch dtype of a name of _TORCH_DL."""
    return getattr(_torch(), name)


def _is_tensor(x):
    """Whether x is a torch tensor (False where torch was never imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_array(x):
    """Whether x is a numpy array."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


class Leaf:
    """One array of a batch: kind "t" (torch tensor) or "n" (numpy array), dtype, shape.

    dtype is a torch dtype's name ("float32") for kind "t", a numpy dtype
    or its str ("<f4") for kind "n".  nbytes is its size.
    """

    __slots__ = ("kind", "dtype", "shape", "nbytes")

    def __init__(self, kind, dtype, shape):
        self.kind = kind
        self.shape = tuple(int(d) for d in shape)
        if kind == "t":
            self.dtype = str(dtype).replace("torch.", "")
            if self.dtype not in _TORCH_DL:
                raise TypeError("pinshm.feed cannot carry tensors of dtype %s" % dtype)
            size = _TORCH_DL[self.dtype][1] // 8
        elif kind == "n":
            dt = _np().dtype(dtype)
            if dt.hasobject or dt.names or dt.subdtype:
                raise TypeError("pinshm.feed carries plain numpy dtypes only, not %s" % dt)
            self.dtype = dt.str
            size = dt.itemsize
        else:
            raise ValueError("leaf kind %r: 't' or 'n'" % (kind,))
        for d in self.shape:
            if d < 0:
                raise ValueError("negative size in shape %s" % (self.shape,))
            size *= d
        self.nbytes = size

    def __repr__(self):
        """Leaf(kind, dtype, shape)."""
        return "Leaf(%r, %r, %r)" % (self.kind, self.dtype, self.shape)

    @classmethod
    def like(cls, x, prefix=()):
        """The Leaf of a tensor, an array or a Python number, with prefix dimensions before."""
        if _is_tensor(x):
            return cls("t", x.dtype, tuple(prefix) + tuple(x.shape))
        np = _np()
        if isinstance(x, (bool, int, float, complex, np.generic)) or _is_array(x):
            a = np.asarray(x)
            return cls("n", a.dtype, tuple(prefix) + a.shape)
        raise TypeError("pinshm.feed batches hold tensors, numpy arrays and numbers, not %s" % type(x).__name__)


# ---- structures: tuples, lists and dicts of leaves -------------------------


def _flatten(tree, leaves, depth=0):
    """The structure of tree (see the module's doc), appending its leaves to leaves."""
    if depth > _MAX_DEPTH:
        raise ValueError("a batch nested more than %d deep" % _MAX_DEPTH)
    if isinstance(tree, dict):
        for k in tree:
            if not isinstance(k, str):
                raise TypeError("dict keys of a batch must be strings, not %s" % type(k).__name__)
        return ["d", [[k, _flatten(v, leaves, depth + 1)] for k, v in tree.items()]]
    if isinstance(tree, (tuple, list)):
        return ["t" if isinstance(tree, tuple) else "l", [_flatten(v, leaves, depth + 1) for v in tree]]
    leaves.append(tree)
    return len(leaves) - 1


def _build(struct_, leaves):
    """The tree of struct_ with leaf numbers replaced by leaves[n]."""
    if isinstance(struct_, int):
        return leaves[struct_]
    tag, items = struct_
    if tag == "d":
        return {k: _build(v, leaves) for k, v in items}
    seq = [_build(v, leaves) for v in items]
    return tuple(seq) if tag == "t" else seq


def _check_struct(s, n, seen, depth=0):
    """ValueError unless s is a structure naming leaves below n, each once."""
    if depth > _MAX_DEPTH:
        raise ValueError("malformed feed header: structure nested too deep")
    if isinstance(s, int) and not isinstance(s, bool):
        if not 0 <= s < n or s in seen:
            raise ValueError("malformed feed header: leaf %d named twice or out of range" % s)
        seen.add(s)
        return
    if not (isinstance(s, list) and len(s) == 2 and s[0] in ("t", "l", "d") and isinstance(s[1], list)):
        raise ValueError("malformed feed header: bad structure %.80r" % (s,))
    for item in s[1]:
        if s[0] == "d":
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise ValueError("malformed feed header: bad dict item %.80r" % (item,))
            item = item[1]
        _check_struct(item, n, seen, depth + 1)


# ---- the record's header ---------------------------------------------------


def _layout(structure, leaves, epoch, number):
    """(header bytes, offsets of the leaves, record size) of a batch."""
    offsets, desc = [], []
    text_len = 0
    # The description's length depends on the offsets' digits: iterate to a fixed point.
    for _ in range(4):
        start = (_FIXED.size + text_len + _ALIGN - 1) // _ALIGN * _ALIGN
        offsets, pos = [], start
        for leaf in leaves:
            offsets.append(pos)
            pos += (leaf.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        desc = [[lf.kind, lf.dtype, list(lf.shape), off] for lf, off in zip(leaves, offsets)]
        text = json.dumps({"s": structure, "l": desc}, separators=(",", ":")).encode()
        if len(text) <= text_len:
            break
        text_len = len(text) + 16
    text = text.ljust(text_len)
    head = _FIXED.pack(MAGIC, _VERSION, len(leaves), epoch & 0xFFFFFFFF, start, number, text_len, 0) + text
    return head + bytes(start - len(head)), offsets, max(pos, start)


def parse_header(view):
    """(epoch, number, structure, leaves) of the record in view (a bytes-like).

    leaves is a list of (Leaf, offset).  ValueError where anything disagrees
    with the format or with the record's length.
    """
    n = len(view)
    if n < _FIXED.size:
        raise ValueError("not a feed record: %d bytes" % n)
    magic, version, count, epoch, start, number, text_len, _ = _FIXED.unpack_from(view, 0)
    if magic != MAGIC or version != _VERSION:
        raise ValueError("not a feed record of version %d (magic %r, version %d)" % (_VERSION, magic, version))
    if not 1 <= count <= _MAX_LEAVES or text_len > _MAX_TEXT or start % _ALIGN:
        raise ValueError("malformed feed header (%d leaves, %d bytes of text, data at %d)" % (count, text_len, start))
    if _FIXED.size + text_len > start or start > n:
        raise ValueError("malformed feed header: data at %d, text ends at %d, record of %d bytes"
                         % (start, _FIXED.size + text_len, n))
    try:
        d = json.loads(bytes(view[_FIXED.size:_FIXED.size + text_len]).decode("utf-8"))
        structure, desc = d["s"], d["l"]
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        raise ValueError("malformed feed header: bad description (%s)" % e) from None
    if not isinstance(desc, list) or len(desc) != count:
        raise ValueError("malformed feed header: %d leaves announced, description differs" % count)
    _check_struct(structure, count, set())
    leaves, pos = [], start
    for item in desc:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[2], list) and len(item[2]) <= _MAX_DIMS
                and all(type(x) is int for x in item[2] + [item[3]]) and isinstance(item[1], str)):
            raise ValueError("malformed feed header: bad leaf %.80r" % (item,))
        try:
            leaf = Leaf(item[0], item[1], item[2])
        except (TypeError, ValueError) as e:
            raise ValueError("malformed feed header: %s" % e) from None
        off = item[3]
        if off < pos or off % _ALIGN or leaf.nbytes > n - off:
            raise ValueError("malformed feed header: leaf of %d bytes at %d (from %d) in a record of %d bytes"
                             % (leaf.nbytes, off, pos, n))
        leaves.append((leaf, off))
        pos = off + leaf.nbytes
    return epoch, number, structure, leaves


# ---- collates --------------------------------------------------------------


class Collate:
    """A collate that writes a batch into memory it is given (the record).

    Subclasses define layout(samples), the batch's structure with a Leaf
    for each array (what the record must hold), and __call__(samples, out),
    which fills out: the same structure with a writable array or tensor
    over the record in place of each Leaf.  The feed calls layout() in the
    worker, reserves the record, and calls the collate with out.
    A plain function given as collate_fn instead (DataLoader's kind,
    samples -> batch) also works: its batch is copied into the record.
    """

    def layout(self, samples):
        """The batch's structure, with a Leaf for each array."""
        raise NotImplementedError

    def __call__(self, samples, out):
        """Write the batch of samples into out (the structure of layout())."""
        raise NotImplementedError


class StackCollate(Collate):
    """The default collate: stacks the samples along a new first dimension.

    Samples are tensors, numpy arrays, numbers, or tuples, lists and dicts
    of them, all of the same structure, shapes and dtypes; each leaf of the
    batch is the leaves of the samples stacked (torch.stack(out=),
    numpy.stack(out=)).  Numbers become numpy arrays (int64, float64, bool);
    Feed(output="torch") gives every leaf as a tensor.
    """

    def layout(self, samples):
        """The structure of the first sample, each leaf with len(samples) before its shape."""
        if not samples:
            raise ValueError("an empty batch")
        leaves = []
        structure = _flatten(samples[0], leaves)
        return _build(structure, [Leaf.like(x, (len(samples),)) for x in leaves])

    def __call__(self, samples, out):
        """Stack each leaf of the samples into its leaf of out."""
        leaves = []
        structure = _flatten(samples[0], leaves)
        rows = [[] for _ in leaves]
        for s in samples:
            got = []
            if _flatten(s, got) != structure:
                raise ValueError("samples of different structures cannot be stacked")
            for r, x in zip(rows, got):
                r.append(x)
        outs = []
        _flatten(out, outs)
        for dst, r in zip(outs, rows):
            _stack_into(dst, r)


def _stack_into(dst, items):
    """Stack items (tensors, arrays or numbers) into dst along its first dimension."""
    if _is_tensor(dst):
        torch = _torch()
        if all(_is_tensor(x) for x in items):
            torch.stack(items, 0, out=dst)
        else:
            dst.copy_(torch.as_tensor(_np().stack([_np().asarray(x) for x in items])))
        return
    np = _np()
    if all(_is_array(x) for x in items):
        np.stack(items, 0, out=dst)
    else:
        for i, x in enumerate(items):
            dst[i] = np.asarray(x)


def _copy_into(dst, src):
    """Copy one leaf of a batch (tensor, array or number) into dst."""
    if _is_tensor(dst):
        dst.copy_(src if _is_tensor(src) else _torch().as_tensor(src))
    elif _is_tensor(src):
        dst[...] = src.detach().cpu().numpy()
    else:
        dst[...] = src


# ---- the worker ------------------------------------------------------------


class WorkerInfo:
    """What get_worker_info() returns in a worker: id, num_workers, seed, dataset."""

    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        """WorkerInfo(id=..., num_workers=..., seed=...)."""
        return "WorkerInfo(id=%d, num_workers=%d, seed=%d)" % (self.id, self.num_workers, self.seed)


_worker_info = None


def get_worker_info():
    """In a feed worker, its WorkerInfo (id, num_workers, seed, dataset); None elsewhere."""
    return _worker_info


def _views(mv, tree_leaves, offsets):
    """Writable arrays (kind "n") or tensors (kind "t") over mv at offsets."""
    np = _np()
    out = []
    for leaf, off in zip(tree_leaves, offsets):
        if leaf.kind == "n":
            dt = np.dtype(leaf.dtype)
            count = leaf.nbytes // dt.itemsize if dt.itemsize else 0
            out.append(np.frombuffer(mv, dt, count, off).reshape(leaf.shape))  # holds mv's export
        else:
            torch = _torch()
            raw = np.frombuffer(mv, np.uint8, leaf.nbytes, off)
            t = torch.from_numpy(raw)
            t = t.view(_torch_dtype(leaf.dtype)) if leaf.nbytes else torch.empty(0, dtype=_torch_dtype(leaf.dtype))
            out.append(t.view(leaf.shape))
    return out


def _fill(mv, leaves, offsets, structure, samples, collate, data):
    """Write the batch into mv: collate(samples, out), or copy data (a plain collate's leaves)."""
    out = _views(mv, leaves, offsets)
    if data is None:
        collate(samples, _build(structure, out))
    else:
        for dst, src in zip(out, data):
            _copy_into(dst, src)


class _Producer:
    """A worker's side: its client, its channel, writing batches into records."""

    def __init__(self, wid, socket, conn):
        self.wid = wid
        self.client = _pinshm.connect(socket)
        self.conn = conn
        self.chan = None
        self.room = 0
        self.tasks = collections.deque()  # tasks that came while waiting for the channel
        self.stuck = None  # (memoryview, Reservation, epoch, number): a record a view outlived

    def task(self):
        """The next task (epoch, number, indices), or None: stop."""
        return self.tasks.popleft() if self.tasks else self.conn.recv()

    def channel(self, size):
        """The worker's channel, asked of the main process for records of size bytes."""
        if self.chan is None:
            self.conn.send(("size", size))
            while True:
                msg = self.conn.recv()
                if msg is None:
                    raise _Stop()
                if msg[0] == "chan":
                    break
                self.tasks.append(msg)
            self.chan = self.client.open(msg[1], _pinshm.PRODUCER)
            self.room = msg[2]
        if size > self.room:
            raise ValueError("a batch of %d bytes does not fit the feed's records of %d (sized from the first "
                             "batch): pass Feed(max_batch_bytes=)" % (size, self.room))
        return self.chan

    def put(self, epoch, number, samples, collate):
        """Collate samples into a record of the channel and commit it.

        A failure of the collate raises _BatchFailed with its text, formatted before the
        exception (whose traceback and arguments may hold views of the record) is dropped.
        """
        self._unstick(epoch, number)
        plain = not isinstance(collate, Collate)
        leaves = []
        structure = _flatten(collate(samples) if plain else collate.layout(samples), leaves)
        data = None
        if plain:  # leaves are the batch's arrays: copy them
            data, leaves = leaves, [Leaf.like(x) for x in leaves]
        head, offsets, size = _layout(structure, leaves, epoch, number)
        r = self.channel(size).reserve(size)
        mv = memoryview(r)
        failed = None
        try:
            mv[: len(head)] = head
            _fill(mv, leaves, offsets, structure, samples, collate, data)
        except Exception as e:
            failed = _wrap(e, self.wid, number)
        except BaseException as e:
            _drop_views(e, mv, r)
            raise
        # Out of the except block, the exception, its traceback and their views are gone.
        if failed is not None:
            if not _abort(mv, r):
                self.stuck = (mv, r, epoch, number)
                failed = (failed[0], failed[1] + "\n" + self._stuck_text(epoch, number))
            raise _BatchFailed(failed)
        if not _let_go(mv, r, lambda: r.commit(size)):
            self.stuck = (mv, r, epoch, number)
            raise BufferError(self._stuck_text(epoch, number))

    def _stuck_text(self, epoch, number):
        """What a view kept of the record of batch (epoch, number) does."""
        return ("pinshm.feed worker %d: a view of the record of batch %d (epoch %d) is still alive, kept by the "
                "collate or the dataset (in a global, an attribute or an exception that lives on): the record "
                "stays reserved, and the worker's later batches fail until the view goes; let go of every view "
                "of out once the collate returns" % (self.wid, number, epoch))

    def _unstick(self, epoch, number):
        """Abort the record a view outlived, once it is gone; RuntimeError while it lives."""
        if self.stuck is None:
            return
        mv, r, e0, n0 = self.stuck
        if not _abort(mv, r):
            raise RuntimeError("%s (batch %d of epoch %d cannot be written)" % (self._stuck_text(e0, n0), number,
                                                                                 epoch))
        self.stuck = None

    def close(self):
        """Leave the channel and disconnect."""
        if self.chan is not None:
            try:
                self.chan.close()
            except BufferError:
                pass  # a view outlived its record: the channel goes with the process
        self.client.close()


def _let_go(mv, r, then):
    """Release memoryview mv of reservation r and call then() (r's commit or abort), collecting
    cycles that hold views of r where it raises BufferError; False where a view lives on."""
    for _ in range(2):
        try:
            mv.release()
            then()
            return True
        except BufferError:
            import gc

            gc.collect()
    return False


def _abort(mv, r):
    """Let go of mv and abort reservation r; False where a view of it lives on."""
    return _let_go(mv, r, r.abort)


def _drop_views(e, mv, r):
    """After e in a collate: let go of the record's views and abort r, so that e (not a BufferError) is raised.

    The frames of e's traceback (and of its context) keep the collate's locals, views of
    mv among them: they are cleared (the traceback still formats).
    """
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
    try:
        _abort(mv, r)
    except BufferError:
        pass  # a view lives on (in e itself?): e is raised still


class _BatchFailed(Exception):
    """A batch's collate failed: err is the (type, text) of its exception for the main process."""

    def __init__(self, err):
        super().__init__(err[1])
        self.err = err


class _Stop(Exception):
    """The main process told the worker to stop."""


def _die_with_parent(parent):
    """End this worker (SIGKILL) when its parent, the main process of pid parent, ends.

    A thread watches os.getppid(): PR_SET_PDEATHSIG would follow the thread that forked
    the worker, not the process, and kill the workers of a feed started by a thread that
    then ends.  parent None (forkserver, whose children are the server's, a process of
    one thread): PR_SET_PDEATHSIG, the server's end.
    """
    if parent is None:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        return
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(_WATCH_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="pinshm.feed parent watch", daemon=True).start()


_WATCH_S = 0.2  # how often a worker checks that the main process lives


def _worker(wid, num_workers, seed, socket, conn, dataset, collate, worker_init_fn, parent):
    """A worker process: take (epoch, number, indices) tasks, write batches, report errors."""
    global _worker_info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides
    _die_with_parent(parent)
    _worker_info = WorkerInfo(wid, num_workers, seed, dataset)
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % (1 << 32))
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(1)
        torch.manual_seed(seed)
    prod = None
    try:
        prod = _Producer(wid, socket, conn)
        if worker_init_fn is not None:
            worker_init_fn(wid)
        while True:
            task = prod.task()
            if task is None:
                break
            epoch, number, indices = task
            try:
                prod.put(epoch, number, [dataset[i] for i in indices], collate)
            except (_Stop, _pinshm.PeerGone, EOFError):
                break
            except _BatchFailed as e:
                conn.send(("error", epoch, number, e.err))
            except Exception as e:
                conn.send(("error", epoch, number, _wrap(e, wid, number)))
    except (_Stop, EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    except Exception as e:
        try:
            conn.send(("error", -1, -1, _wrap(e, wid, -1)))
        except OSError:
            pass
    finally:
        if prod is not None:
            prod.close()


def _wrap(e, wid, number):
    """(exception type or None, text) of e, to raise again in the main process."""
    where = "batch %d" % number if number >= 0 else "start"
    text = "%s in pinshm.feed worker %d (%s)\nOriginal %s" % (
        type(e).__name__, wid, where, "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    cls = type(e)
    try:
        import pickle

        pickle.dumps(cls)
    except Exception:
        cls = None
    return cls, text


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
         socket=None, autostart=False, multiprocessing_context=None)

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
    initialised here).

    Iterating gives batches in place (see the module's doc for how long
    they stay valid); len() is the number of batches of an epoch.
    close() (or the end of a with block) stops the workers and unlinks
    the channels.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=2,
                 collate_fn=None, drop_last=False, prefetch_factor=2, persistent_workers=False, worker_init_fn=None,
                 generator=None, seed=None, in_order=True, output=None, timeout=None, max_batch_bytes=None,
                 socket=None, autostart=False, multiprocessing_context=None):
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
        ctx = self._context()
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


def _torch_name(dt):
    """The torch dtype name of numpy dtype dt; TypeError if none."""
    name = "bool" if dt.kind == "b" else dt.newbyteorder("=").name
    if not dt.isnative or name not in _TORCH_DL:
        raise TypeError("pinshm.feed: torch has no dtype for %s" % dt)
    return name

_now = time.monotonic
