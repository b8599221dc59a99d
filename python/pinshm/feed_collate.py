"""pinshm.feed's collates: Collate (writes a batch into the record it is given),
StackCollate (the default: samples stacked into the record), and the copy
of a plain collate's batch into the record."""

from .arrays import _np
from .feed_format import Leaf, _build, _flatten, _is_array, _is_tensor, _torch


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
