"""pinshm.feed's worker processes: each connects, opens its channel as the
producer, and writes each batch it is given into a record reserved in it;
a failure goes to the main process as (exception type, text)."""

import collections
import os
import random
import signal
import sys
import time
import traceback

import _pinshm

from .arrays import _np
from .feed_collate import Collate, _copy_into
from .feed_format import Leaf, _build, _flatten, _layout, _torch, _torch_dtype


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
