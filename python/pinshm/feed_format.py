"""pinshm.feed's record format: the leaves of a batch (Leaf), their structure
(tuples, lists and dicts), and the header that describes them in a record
(layout and parsing, every field checked).  The format is documented in
pinshm.feed's doc."""

import json
import struct
import sys

from .arrays import _ALIGN, _MAX_DIMS, _np  # the array messages' alignment, dimensions, numpy on first use

MAGIC = b"PSHF"
_VERSION = 1
_FIXED = struct.Struct("<4sHHIIQII")
_MAX_LEAVES = 1024
_MAX_DEPTH = 8
_MAX_TEXT = 1 << 20


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


def _torch_name(dt):
    """The torch dtype name of numpy dtype dt; TypeError if none."""
    name = "bool" if dt.kind == "b" else dt.newbyteorder("=").name
    if not dt.isnative or name not in _TORCH_DL:
        raise TypeError("pinshm.feed: torch has no dtype for %s" % dt)
    return name
