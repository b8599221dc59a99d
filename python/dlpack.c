/*
 * dlpack.c - DLPack capsules over records received in place, so that
 * torch.from_dlpack() and numpy.from_dlpack() take them without a copy.
 *
 * A capsule holds one buffer export of its Message (the record cannot be
 * released, nor the channel closed, before every consumer of the capsule
 * has let go) and a reference to it, both dropped by the tensor's deleter.
 * Unversioned capsules ("dltensor"), device kDLCPU.
 */
#include "pyshm.h"

#include <stdlib.h>
#include <string.h>

/* The DLPack ABI (dlpack.h, version 0.8), as its consumers read it. */
typedef struct {
	int32_t device_type; /* kDLCPU: 1 */
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

#define DL_MAX_DIMS 32
#define KDLCPU 1

struct export {
	DLManagedTensor t;
	MessageObject *msg; /* strong; one export of it counted */
	int64_t shape[DL_MAX_DIMS], strides[DL_MAX_DIMS];
};

static void export_delete(DLManagedTensor *t)
{
	struct export *e = (struct export *)t;
	PyGILState_STATE g = PyGILState_Ensure();

	e->msg->views--;
	e->msg->chan->views--;
	Py_DECREF((PyObject *)e->msg);
	free(e);
	PyGILState_Release(g);
}

/* A capsule nobody consumed: its destructor deletes the tensor. */
static void capsule_destruct(PyObject *cap)
{
	if (PyCapsule_IsValid(cap, "dltensor")) {
		DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
		t->deleter(t);
	}
}

PyObject *pyshm_dlpack_capsule(MessageObject *m, size_t offset, int ndim, const int64_t *shape,
			       const int64_t *strides, uint8_t code, uint8_t bits)
{
	if (m->done) {
		PyErr_SetString(PyExc_BufferError, "the message was released");
		return NULL;
	}
	if (ndim < 0 || ndim > DL_MAX_DIMS || offset > m->len) {
		PyErr_SetString(PyExc_ValueError, "bad DLPack geometry");
		return NULL;
	}
	struct export *e = calloc(1, sizeof(*e));
	if (!e)
		return PyErr_NoMemory();
	memcpy(e->shape, shape, sizeof(int64_t) * (size_t)ndim);
	if (strides)
		memcpy(e->strides, strides, sizeof(int64_t) * (size_t)ndim);
	e->t.dl_tensor = (DLTensor){
		.data = (char *)m->data + offset, /* torch 1.13 ignores byte_offset */
		.device = {KDLCPU, 0},
		.ndim = ndim,
		.dtype = {code, bits, 1},
		.shape = e->shape,
		.strides = strides ? e->strides : NULL,
		.byte_offset = 0,
	};
	e->t.manager_ctx = e;
	e->t.deleter = export_delete;
	e->msg = m;
	PyObject *cap = PyCapsule_New(&e->t, "dltensor", capsule_destruct);
	if (!cap) {
		free(e);
		return NULL;
	}
	Py_INCREF((PyObject *)m);
	m->views++;
	m->chan->views++;
	return cap;
}
