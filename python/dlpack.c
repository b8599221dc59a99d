/*
 * dlpack.c - DLPack capsules over records received in place and over
 * reservations, so that torch.from_dlpack() and numpy.from_dlpack() take
 * them without a copy.
 *
 * A capsule holds one buffer export of its owner (a Message or a
 * Reservation) and a reference to it, both dropped by the tensor's
 * deleter: the record cannot be released, the reservation committed, nor
 * the channel closed before every consumer of the capsule has let go.
 *
 * Both capsule kinds of the protocol: "dltensor" (DLManagedTensor, DLPack
 * before 1.0) where the consumer passes no max_version or one below 1.0,
 * "dltensor_versioned" (DLManagedTensorVersioned, 1.0) otherwise, whose
 * flags mark a received record read-only.  The device is kDLCPU, or
 * kDLCUDAHost where the consumer asks for it through dl_device and the
 * memory is the record of a channel registered with a CUDA device (pinned
 * for it); otherwise (a copy, a channel not registered) kDLCPU still.
 */
#include "pyshm.h"

#include <stdlib.h>
#include <string.h>

/* The DLPack ABI (dlpack.h, version 1.0), as its consumers read it. */
typedef struct {
	int32_t device_type; /* kDLCPU 1, kDLCUDAHost 3 */
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code; /* kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool 6 */
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides; /* in elements; NULL: compact C order */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
	uint32_t major, minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ull << 1)
#define DL_MAX_DIMS 32
#define CAP_V0 "dltensor"
#define CAP_V1 "dltensor_versioned"

struct export {
	union {
		DLManagedTensor v0;
		DLManagedTensorVersioned v1;
	} t;
	PyObject *owner;   /* strong, one export of it counted; NULL for a copy */
	Py_ssize_t *views; /* the owner's count of exports */
	ChannelObject *chan;
	void *copy; /* copy=True: the bytes, owned */
	int64_t shape[DL_MAX_DIMS], strides[DL_MAX_DIMS];
};

/* A tensor's deleter, which a consumer may call from any thread, with or
 * without the GIL.  A copy holds nothing of Python's: freed without it,
 * so that a consumer that frees tensors where the GIL is out of reach (a
 * thread of its own, interpreter teardown) does not wait for it. */
static void export_free(struct export *e)
{
	if (!e->owner) {
		free(e->copy);
		free(e);
		return;
	}
	PyGILState_STATE g = PyGILState_Ensure();

	(*e->views)--;
	e->chan->views--;
	Py_DECREF(e->owner);
	free(e);
	PyGILState_Release(g);
}

static void delete_v0(DLManagedTensor *t)
{
	export_free(t->manager_ctx);
}

static void delete_v1(DLManagedTensorVersioned *t)
{
	export_free(t->manager_ctx);
}

/* A capsule nobody consumed (a consumer renames it "used_..."): its
 * destructor deletes the tensor. */
static void capsule_destruct(PyObject *cap)
{
	if (PyCapsule_IsValid(cap, CAP_V0)) {
		DLManagedTensor *t = PyCapsule_GetPointer(cap, CAP_V0);
		t->deleter(t);
	} else if (PyCapsule_IsValid(cap, CAP_V1)) {
		DLManagedTensorVersioned *t = PyCapsule_GetPointer(cap, CAP_V1);
		t->deleter(t);
	}
}

/* Parse a (int, int) tuple into @p a and @p b. @return 0, or -1 with an exception set. */
static int int_pair(PyObject *o, const char *what, long *a, long *b)
{
	if (!PyTuple_Check(o) || PyTuple_Size(o) != 2) {
		PyErr_Format(PyExc_TypeError, "%s must be a tuple of two integers", what);
		return -1;
	}
	*a = PyLong_AsLong(PyTuple_GetItem(o, 0));
	*b = *a == -1 && PyErr_Occurred() ? -1 : PyLong_AsLong(PyTuple_GetItem(o, 1));
	return PyErr_Occurred() ? -1 : 0;
}

int pyshm_dlpack_request(PyObject *args, PyObject *kw, struct pyshm_dl_request *req)
{
	static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
	PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None, *copy = Py_None;
	long major = 0, minor = 0, type = PYSHM_KDLCPU, id = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream, &maxv, &dev, &copy))
		return -1;
	if (stream != Py_None && !PyLong_Check(stream)) { /* host memory: nothing to order with a stream */
		PyErr_SetString(PyExc_TypeError, "stream must be None or an integer");
		return -1;
	}
	if (maxv != Py_None && int_pair(maxv, "max_version", &major, &minor) < 0)
		return -1;
	if (dev != Py_None && int_pair(dev, "dl_device", &type, &id) < 0)
		return -1;
	if (copy != Py_None && copy != Py_True && copy != Py_False) {
		PyErr_SetString(PyExc_TypeError, "copy must be None, True or False");
		return -1;
	}
	if ((type != PYSHM_KDLCPU && type != PYSHM_KDLCUDAHOST) || id != 0) {
		PyErr_Format(PyExc_BufferError,
			     "pinshm records are host memory: device (%ld, %ld) is neither kDLCPU (1, 0) nor "
			     "kDLCUDAHost (3, 0), and pinshm copies to no device",
			     type, id);
		return -1;
	}
	req->versioned = maxv != Py_None && major >= 1;
	req->copy = copy == Py_True;
	req->device_type = (int32_t)type;
	return 0;
}

/* Whether @p chan's mapping is registered with a CUDA device (pinned for it). */
static bool cuda_registered(ChannelObject *chan)
{
	for (int i = 0; chan->ch && i < PYSHM_MAX_DEVICES; i++) {
		DeviceObject *d = (DeviceObject *)chan->devs[i];
		if (d && pinshm_device_kind(d->dev) == PINSHM_DEVICE_CUDA && pinshm_channel_registered(chan->ch, d->dev))
			return true;
	}
	return false;
}

PyObject *pyshm_dlpack_capsule(PyObject *owner, Py_ssize_t *views, ChannelObject *chan, void *base, size_t len,
			       bool read_only, const struct pyshm_dl_request *req, const struct pyshm_dl_geometry *g)
{
	char *data = (char *)base + g->offset;

	if (g->ndim < 0 || g->ndim > DL_MAX_DIMS || g->offset > len) {
		PyErr_SetString(PyExc_ValueError, "bad DLPack geometry");
		return NULL;
	}
	struct export *e = calloc(1, sizeof(*e));
	if (!e)
		return PyErr_NoMemory();
	if (req->copy) { /* the standard's copy=True: bytes of the consumer's own */
		e->copy = malloc(len ? len : 1);
		if (!e->copy) {
			free(e);
			return PyErr_NoMemory();
		}
		memcpy(e->copy, base, len);
		data = (char *)e->copy + g->offset;
	}
	memcpy(e->shape, g->shape, sizeof(int64_t) * (size_t)g->ndim);
	if (g->strides)
		memcpy(e->strides, g->strides, sizeof(int64_t) * (size_t)g->ndim);
	bool pinned = !req->copy && cuda_registered(chan);
	DLTensor t = {
		.data = data, /* torch 1.13 ignores byte_offset: the offset is in the pointer */
		.device = {req->device_type == PYSHM_KDLCUDAHOST && pinned ? PYSHM_KDLCUDAHOST : PYSHM_KDLCPU, 0},
		.ndim = g->ndim,
		.dtype = {g->code, g->bits, 1},
		.shape = e->shape,
		.strides = g->strides ? e->strides : NULL,
		.byte_offset = 0,
	};
	PyObject *cap;
	if (req->versioned) {
		e->t.v1 = (DLManagedTensorVersioned){
			.version = {1, 0},
			.manager_ctx = e,
			.deleter = delete_v1,
			.flags = req->copy ? DLPACK_FLAG_BITMASK_IS_COPIED
					   : (read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0),
			.dl_tensor = t,
		};
		cap = PyCapsule_New(&e->t.v1, CAP_V1, capsule_destruct);
	} else {
		e->t.v0 = (DLManagedTensor){.dl_tensor = t, .manager_ctx = e, .deleter = delete_v0};
		cap = PyCapsule_New(&e->t.v0, CAP_V0, capsule_destruct);
	}
	if (!cap) {
		free(e->copy);
		free(e);
		return NULL;
	}
	if (!req->copy) {
		Py_INCREF(owner);
		e->owner = owner;
		e->views = views;
		e->chan = chan;
		(*views)++;
		chan->views++;
	}
	return cap;
}

PyObject *pyshm_dlpack_bytes(PyObject *owner, Py_ssize_t *views, ChannelObject *chan, void *base, size_t len,
			     bool read_only, const struct pyshm_dl_request *req)
{
	int64_t shape[1] = {(int64_t)len};
	struct pyshm_dl_geometry g = {.ndim = 1, .shape = shape, .code = 1 /* kDLUInt */, .bits = 8};
	return pyshm_dlpack_capsule(owner, views, chan, base, len, read_only, req, &g);
}

PyObject *pyshm_dlpack_device(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return Py_BuildValue("(ii)", PYSHM_KDLCPU, 0);
}
