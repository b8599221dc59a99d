"""numpy arrays over pinshm channels, received in place.

A message that carries an array is a header, then the array's bytes::

    offset  size  field
    0       4     magic b"PSHA"
    4       1     format version (1)
    5       1     order: b"C" or b"F"
    6       1     ndim (0..32)
    7       1     0
    8       4     descr_len: bytes of the dtype's description (little-endian u32)
    12      4     data_offset: where the array's bytes start (a multiple of 64)
    16      8*ndim shape (little-endian u64 each)
    ...     descr_len  the dtype, as numpy.lib.format.dtype_to_descr() gives it, repr()'d (UTF-8)
    ...     zeros up to data_offset
    data_offset  itemsize * prod(shape)  the array, in that order

A record is 16-byte aligned and data_offset a multiple of 64 (checked on
receipt), so the array's bytes are 16-byte aligned.  On receipt every
field is checked, and the record's length must be exactly data_offset plus
the array's size; dtypes that hold Python objects are refused both ways.
"""

import ast
import functools
import struct

ARRAY_MAGIC = b"PSHA"
_VERSION = 1
_FIXED = struct.Struct("<4sBBBBII")
_MAX_DIMS = 32
_MAX_DESCR = 65536
_ALIGN = 64


def _np():
    import numpy  # only the array helpers need numpy

    return numpy


def _descr(np, dtype):
    """The dtype's description as bytes; TypeError for object dtypes."""
    if dtype.hasobject:
        raise TypeError("pinshm cannot send arrays of Python objects (dtype %s): they hold pointers" % dtype)
    return repr(np.lib.format.dtype_to_descr(dtype)).encode("utf-8")


def _header(np, dtype, shape, order):
    """The header of an array of dtype, shape and order ('C' or 'F')."""
    descr = _descr(np, dtype)
    if len(shape) > _MAX_DIMS:
        raise ValueError("arrays of more than %d dimensions cannot be sent" % _MAX_DIMS)
    end = _FIXED.size + 8 * len(shape) + len(descr)
    offset = (end + _ALIGN - 1) // _ALIGN * _ALIGN
    head = _FIXED.pack(ARRAY_MAGIC, _VERSION, ord(order), len(shape), 0, len(descr), offset)
    head += struct.pack("<%dQ" % len(shape), *shape) + descr
    return head + bytes(offset - end)


def send_array(channel, array, timeout=None, more=False):
    """Send a numpy array (or anything numpy.asarray takes) as one message.

    The array's dtype, shape and order (C, or Fortran for an array that is
    Fortran-contiguous only) travel in a header (see the module's doc); its
    bytes are copied once, straight into the reserved record.  timeout as
    Channel.send(); more as Reservation.commit().  TypeError for object
    arrays; pinshm.Error (EMSGSIZE) for an array over the channel's
    max_message with its header.
    """
    np = _np()
    a = np.asarray(array)
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    head = _header(np, a.dtype, a.shape, order)
    r = channel.reserve(len(head) + a.nbytes, timeout)
    with r:
        view = memoryview(r)
        try:
            view[: len(head)] = head
            if a.nbytes:
                dst = np.ndarray(a.shape, a.dtype, buffer=view, offset=len(head), order=order)
                np.copyto(dst, a, casting="no")
                del dst
        finally:
            view.release()
        r.commit(more=more)


@functools.lru_cache(maxsize=256)
def _dtype(descr):
    """The dtype that description descr (bytes) names; ValueError if it names
    none, one of Python objects, or one of no size.  Cached: a stream of
    arrays names few dtypes, and parsing one costs microseconds."""
    np = _np()
    try:
        dtype = np.lib.format.descr_to_dtype(ast.literal_eval(descr.decode("utf-8")))
    except Exception as e:  # whatever the text makes numpy or the parser say
        raise ValueError("malformed array header: bad dtype (%s: %s)" % (type(e).__name__, e)) from None
    if dtype.hasobject:
        raise ValueError("array message of Python objects (dtype %s) refused" % dtype)
    if dtype.itemsize == 0:
        raise ValueError("malformed array header: dtype %s has no size" % dtype)
    return dtype


def _parse(np, view):
    """dtype, shape, order and data offset of the array in view; ValueError if malformed."""
    n = len(view)
    if n < _FIXED.size:
        raise ValueError("not an array message: %d bytes, shorter than the header" % n)
    magic, version, order, ndim, _, dlen, offset = _FIXED.unpack_from(view, 0)
    if magic != ARRAY_MAGIC:
        raise ValueError("not an array message (magic %r)" % magic)
    if version != _VERSION:
        raise ValueError("array message of format version %d, this module reads %d" % (version, _VERSION))
    if order not in (ord("C"), ord("F")) or ndim > _MAX_DIMS or dlen > _MAX_DESCR:
        raise ValueError("malformed array header (order %d, ndim %d, descr %d bytes)" % (order, ndim, dlen))
    end = _FIXED.size + 8 * ndim + dlen
    if offset < end or offset > n or offset % _ALIGN:
        raise ValueError("malformed array header: data offset %d (header %d, message %d bytes)" % (offset, end, n))
    shape = struct.unpack_from("<%dQ" % ndim, view, _FIXED.size)
    if any(d > n for d in shape):
        raise ValueError("malformed array header: shape %s larger than the message (%d bytes)" % (tuple(shape), n))
    dtype = _dtype(bytes(view[_FIXED.size + 8 * ndim : end]))
    size = dtype.itemsize
    for d in shape:
        size *= d
    if size != n - offset:
        raise ValueError(
            "array message of %d bytes: its header says %d + %d (dtype %s, shape %s)"
            % (n, offset, size, dtype, tuple(shape))
        )
    return dtype, tuple(shape), chr(order), offset


def as_array(message):
    """The array that message (a Message, or any bytes-like) carries, in place.

    The array is read-only and shares the record's memory; it holds a view of
    the message, so the record stays held until the array (and every view of
    it) is gone, and message.release() raises BufferError until then.
    ValueError where the message is not a well-formed array message.
    """
    np = _np()
    view = memoryview(message)
    flat = None
    try:
        dtype, shape, order, offset = _parse(np, view)
        count = 1
        for d in shape:
            count *= d
        # frombuffer keeps the buffer export (numpy.ndarray(buffer=) lets it go).
        flat = np.frombuffer(view, dtype=dtype, count=count, offset=offset)
        return flat.reshape(shape, order=order)
    except BaseException:
        del flat  # its export of view, or view.release() raises BufferError
        view.release()
        raise


def recv_array(channel, timeout=None):
    """Receive the next message in place and return the array it carries.

    The array is the record itself (read-only; numpy.shares_memory with the
    message is true); the record is released when the array and its views
    are gone.  timeout as Channel.recv().  ValueError where the message is
    not an array message (it is released).
    """
    msg = channel.recv_inplace(timeout)
    try:
        return as_array(msg)
    except ValueError:
        msg.release()
        raise


_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}  # DLPack type codes of numpy kinds


def array_dlpack(message, **dlpack):
    """A DLPack capsule of the array that message carries, in place.

    For torch.from_dlpack(pinshm.array_dlpack(msg)): a tensor of the array's
    dtype, shape and order over the record (on the CPU; no copy).  The record
    stays held until the tensor is gone.  Booleans, integers, floats and
    complex numbers of native byte order only (TypeError otherwise);
    ValueError where the message is not a well-formed array message.  The
    keywords are Message.__dlpack__()'s (max_version=(1, 0): a versioned,
    read-only capsule; dl_device; copy).
    """
    import _pinshm

    np = _np()
    with memoryview(message) as view:
        dtype, shape, order, offset = _parse(np, view)
    if dtype.kind not in _DL_CODES or dtype.names or dtype.subdtype or not dtype.isnative:
        raise TypeError("DLPack has no type for dtype %s" % dtype)
    strides = None
    if order == "F" and len(shape) > 1:
        step, strides = 1, []
        for d in shape:
            strides.append(step)
            step *= d
        strides = tuple(strides)
    return _pinshm._dlpack(message, offset, tuple(shape), strides, _DL_CODES[dtype.kind], dtype.itemsize * 8,
                           **dlpack)
