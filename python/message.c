/*
 * message.c - pinshm.Message (a record received in place, read-only) and
 * pinshm.Reservation (room reserved in place, writable): the buffer
 * exporters of the module.
 *
 * Each counts its buffer exports, and its channel counts them all: a
 * record cannot be released, a reservation committed or aborted, nor the
 * channel closed while one is alive (BufferError).
 */
#include "pyshm.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

PyObject *pyshm_MessageType, *pyshm_ReservationType;

/* ---- Message ------------------------------------------------------------ */

PyObject *pyshm_message_new(ChannelObject *chan, uint64_t seq)
{
	MessageObject *m = PyObject_New(MessageObject, (PyTypeObject *)pyshm_MessageType);
	const pinshm_msg_t *msg = &chan->held[seq % PYSHM_MAX_HELD].msg;

	if (!m)
		return NULL;
	Py_INCREF((PyObject *)chan);
	m->chan = chan;
	m->data = msg->data;
	m->len = msg->len;
	m->lost = msg->lost;
	m->seq = seq;
	m->views = 0;
	m->done = false;
	m->release_after = false;
	chan->objs++;
	chan->held[seq % PYSHM_MAX_HELD].obj = m;
	return (PyObject *)m;
}

void pyshm_message_done(MessageObject *m)
{
	if (m->done)
		return;
	m->done = true;
	m->chan->held[m->seq % PYSHM_MAX_HELD].obj = NULL;
}

/* Raise pinshm.Error where @p chan's handle was inherited across fork():
 * its records and reservation are the parent's. */
static int parents(const ChannelObject *chan)
{
	if (chan->pid == pyshm_pid())
		return 0;
	PyErr_SetString(pyshm_Error, "this object belongs to the parent process (fork)");
	return -1;
}

/* Raise BufferError unless @p m may export its record. */
int pyshm_message_exportable(MessageObject *m)
{
	if (parents(m->chan) < 0)
		return -1;
	if (m->done || m->release_after) {
		PyErr_SetString(PyExc_BufferError, "the message was released");
		return -1;
	}
	return 0;
}

static int msg_getbuffer(MessageObject *m, Py_buffer *view, int flags)
{
	if (pyshm_message_exportable(m) < 0)
		return -1;
	if (PyBuffer_FillInfo(view, (PyObject *)m, (void *)m->data, (Py_ssize_t)m->len, 1, flags) < 0)
		return -1;
	m->views++;
	m->chan->views++;
	return 0;
}

static void msg_releasebuffer(MessageObject *m, Py_buffer *view)
{
	(void)view;
	m->views--;
	m->chan->views--;
}

PyDoc_STRVAR(msg_release_doc,
	     "release()\n\n"
	     "Release the record: no new view of it can be made, and it goes back to the\n"
	     "library once every message received before it is released too.  BufferError\n"
	     "while a view (memoryview, array) of it is alive.  Releasing twice does nothing.");

static PyObject *msg_release(MessageObject *m, PyObject *unused)
{
	(void)unused;
	if (parents(m->chan) < 0)
		return NULL;
	if (m->done)
		Py_RETURN_NONE;
	if (m->views > 0) {
		PyErr_Format(PyExc_BufferError, "cannot release: %zd view(s) of the message are alive", m->views);
		return NULL;
	}
	pyshm_message_done(m);
	int rc = pyshm_channel_reap(m->chan);
	if (rc < 0) {
		m->chan->release_err = 0; /* reported here, not by the next call */
		return pyshm_raise(rc, m->chan->ch ? pinshm_channel_error(m->chan->ch) : "", PYSHM_RECV);
	}
	Py_RETURN_NONE;
}

PyDoc_STRVAR(msg_tobytes_doc, "tobytes() -> bytes\n\nA copy of the payload.");

static PyObject *msg_tobytes(MessageObject *m, PyObject *unused)
{
	(void)unused;
	if (parents(m->chan) < 0)
		return NULL;
	if (m->done) {
		PyErr_SetString(PyExc_ValueError, "the message was released");
		return NULL;
	}
	return PyBytes_FromStringAndSize(m->data, (Py_ssize_t)m->len);
}

PyDoc_STRVAR(msg_dlpack_doc,
	     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
	     "The record as a one-dimensional uint8 DLPack tensor, in place (torch.from_dlpack(msg),\n"
	     "numpy.from_dlpack(msg)).  The record stays held until every consumer of the capsule\n"
	     "has let go.  max_version (1, 0) or later: a \"dltensor_versioned\" capsule marked\n"
	     "read-only; otherwise \"dltensor\".  dl_device: (1, 0) kDLCPU (the default) or (3, 0)\n"
	     "kDLCUDAHost, which only the record of a channel registered with a CUDA device gets\n"
	     "(else, and for a copy, the tensor says kDLCPU); another device raises BufferError.\n"
	     "copy=True: a copy of the record's own.  stream is not used (host memory).  For\n"
	     "the array of an array message, pinshm.array_dlpack(msg).");

static PyObject *msg_dlpack(MessageObject *m, PyObject *args, PyObject *kw)
{
	struct pyshm_dl_request req;

	if (pyshm_dlpack_request(args, kw, &req) < 0 || pyshm_message_exportable(m) < 0)
		return NULL;
	return pyshm_dlpack_bytes((PyObject *)m, &m->views, m->chan, (void *)m->data, m->len, true, &req);
}

static PyObject *msg_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *msg_exit(MessageObject *m, PyObject *args)
{
	(void)args;
	return msg_release(m, NULL);
}

static Py_ssize_t msg_length(MessageObject *m)
{
	return (Py_ssize_t)m->len;
}

static PyObject *msg_get_lost(MessageObject *m, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(m->lost);
}

static PyObject *msg_get_released(MessageObject *m, void *closure)
{
	(void)closure;
	return PyBool_FromLong(m->done);
}

static PyObject *msg_get_channel(MessageObject *m, void *closure)
{
	(void)closure;
	Py_INCREF((PyObject *)m->chan);
	return (PyObject *)m->chan;
}

static void msg_dealloc(MessageObject *m)
{
	ChannelObject *chan = m->chan;

	pyshm_message_done(m);
	pyshm_channel_reap(chan);
	pyshm_channel_obj_gone(chan);
	Py_DECREF(chan);
	pyshm_free((PyObject *)m);
}

static PyMethodDef msg_methods[] = {
	{"release", (PyCFunction)msg_release, METH_NOARGS, msg_release_doc},
	{"tobytes", (PyCFunction)msg_tobytes, METH_NOARGS, msg_tobytes_doc},
	{"release_after", (PyCFunction)(void (*)(void))pyshm_message_release_after, METH_VARARGS | METH_KEYWORDS,
	 pyshm_release_after_doc},
	{"__dlpack__", (PyCFunction)(void (*)(void))msg_dlpack, METH_VARARGS | METH_KEYWORDS, msg_dlpack_doc},
	{"__dlpack_device__", pyshm_dlpack_device, METH_NOARGS, "__dlpack_device__() -> (1, 0): kDLCPU, device 0."},
	{"__enter__", msg_enter, METH_NOARGS, "Return self."},
	{"__exit__", (PyCFunction)msg_exit, METH_VARARGS, "release()."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef msg_getset[] = {
	{"lost", (getter)msg_get_lost, NULL, "Overrun topic: messages of its producer lost just before it.", NULL},
	{"released", (getter)msg_get_released, NULL, "Whether it was released (or its channel closed).", NULL},
	{"channel", (getter)msg_get_channel, NULL, "The Channel it was received on.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(msg_doc, "A message received in place (Channel.recv_inplace()).\n\n"
		      "Exports its record read-only through the buffer protocol: memoryview(msg),\n"
		      "numpy.asarray(msg), bytes(msg).  len(msg) is its length.  Released by release(),\n"
		      "a with block, or when its last reference goes.  Whatever holds it (an array from\n"
		      "numpy.frombuffer(msg) does) keeps the channel's mapping alive.");

static PyType_Slot msg_slots[] = {
	{Py_tp_doc, (void *)msg_doc},
	{Py_tp_methods, msg_methods},
	{Py_tp_getset, msg_getset},
	{Py_tp_dealloc, msg_dealloc},
	{Py_bf_getbuffer, msg_getbuffer},
	{Py_bf_releasebuffer, msg_releasebuffer},
	{Py_mp_length, msg_length},
	{0, NULL},
};

static PyType_Spec msg_spec = {"pinshm.Message", sizeof(MessageObject), 0,
			       Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, msg_slots};

/* ---- Reservation -------------------------------------------------------- */

PyObject *pyshm_reservation_new(ChannelObject *chan, void *data, size_t len)
{
	ReservationObject *r = PyObject_New(ReservationObject, (PyTypeObject *)pyshm_ReservationType);

	if (!r) {
		pinshm_abort(chan->ch);
		return NULL;
	}
	Py_INCREF((PyObject *)chan);
	r->chan = chan;
	r->data = data;
	r->len = len;
	r->views = 0;
	r->done = false;
	chan->objs++;
	chan->resv = r;
	return (PyObject *)r;
}

void pyshm_reservation_drop(ReservationObject *r)
{
	ChannelObject *chan = r->chan;

	if (r->done)
		return;
	r->done = true;
	chan->resv = NULL;
	if (!chan->ch || chan->closed || chan->pid != pyshm_pid() || pyshm_client_closed(chan))
		return; /* close() drops it with the handle */
	if (chan->busy)
		chan->abort_pending = true;
	else
		pinshm_abort(chan->ch);
}

static int resv_getbuffer(ReservationObject *r, Py_buffer *view, int flags)
{
	if (parents(r->chan) < 0)
		return -1;
	if (r->done) {
		PyErr_SetString(PyExc_BufferError, "the reservation was committed or aborted");
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)r, r->data, (Py_ssize_t)r->len, 0, flags) < 0)
		return -1;
	r->views++;
	r->chan->views++;
	return 0;
}

static void resv_releasebuffer(ReservationObject *r, Py_buffer *view)
{
	(void)view;
	r->views--;
	r->chan->views--;
}

/* Raise unless @p r may be committed or aborted now. */
static int resv_check(ReservationObject *r)
{
	if (r->done) {
		PyErr_SetString(PyExc_ValueError, "the reservation was committed or aborted already");
		return -1;
	}
	if (pyshm_channel_usable(r->chan) < 0)
		return -1;
	if (r->views > 0) {
		PyErr_Format(PyExc_BufferError, "%zd view(s) of the reservation are alive", r->views);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(commit_doc, "commit(n=None, more=False)\n\n"
			 "Publish the first n bytes (None: all that was reserved) as a message\n"
			 "(pinshm_commit()).  more=True defers waking the receivers to a later commit,\n"
			 "send or Channel.flush().  BufferError while a view of it is alive.");

static PyObject *resv_commit(ReservationObject *r, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n", "more", NULL};
	PyObject *n_arg = Py_None;
	int more = 0;
	uint64_t n = 0;

	/* The arguments first: n's __index__ may run code that commits r. */
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op:commit", kwlist, &n_arg, &more) ||
	    (n_arg != Py_None && !pyshm_u64(n_arg, &n)) || resv_check(r) < 0)
		return NULL;
	if (n_arg == Py_None)
		n = r->len;
	if (n > r->len) {
		PyErr_Format(PyExc_ValueError, "commit of %llu bytes in a reservation of %zu", (unsigned long long)n,
			     r->len);
		return NULL;
	}
	int rc = pinshm_commit(r->chan->ch, n, more ? PINSHM_MORE : 0);
	r->done = true;
	r->chan->resv = NULL;
	if (rc < 0)
		return pyshm_raise(rc, pinshm_channel_error(r->chan->ch), PYSHM_SEND);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(abort_doc, "abort()\n\nDrop the reservation: nothing is published (pinshm_abort()).  "
			"BufferError while a view of it is alive.");

static PyObject *resv_abort(ReservationObject *r, PyObject *unused)
{
	(void)unused;
	if (resv_check(r) < 0)
		return NULL;
	pyshm_reservation_drop(r);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(resv_dlpack_doc,
	     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
	     "The reservation as a writable one-dimensional uint8 DLPack tensor, in place\n"
	     "(torch.from_dlpack(r)): write the message through it, let the tensor go, then\n"
	     "commit().  Arguments as Message.__dlpack__() (a versioned capsule is not marked\n"
	     "read-only).");

static PyObject *resv_dlpack(ReservationObject *r, PyObject *args, PyObject *kw)
{
	struct pyshm_dl_request req;

	if (pyshm_dlpack_request(args, kw, &req) < 0 || parents(r->chan) < 0)
		return NULL;
	if (r->done) {
		PyErr_SetString(PyExc_BufferError, "the reservation was committed or aborted");
		return NULL;
	}
	return pyshm_dlpack_bytes((PyObject *)r, &r->views, r->chan, r->data, r->len, false, &req);
}

static PyObject *resv_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *resv_exit(ReservationObject *r, PyObject *args)
{
	PyObject *type = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None;

	if (r->done)
		Py_RETURN_NONE;
	if (type && type != Py_None)
		return resv_abort(r, NULL);
	PyObject *none = PyTuple_New(0);
	PyObject *ret = none ? resv_commit(r, none, NULL) : NULL;
	Py_XDECREF(none);
	return ret;
}

static Py_ssize_t resv_length(ReservationObject *r)
{
	return (Py_ssize_t)r->len;
}

static PyObject *resv_get_done(ReservationObject *r, void *closure)
{
	(void)closure;
	return PyBool_FromLong(r->done);
}

static void resv_dealloc(ReservationObject *r)
{
	ChannelObject *chan = r->chan;

	pyshm_reservation_drop(r);
	pyshm_channel_obj_gone(chan);
	Py_DECREF(chan);
	pyshm_free((PyObject *)r);
}

static PyMethodDef resv_methods[] = {
	{"commit", (PyCFunction)(void (*)(void))resv_commit, METH_VARARGS | METH_KEYWORDS, commit_doc},
	{"abort", (PyCFunction)resv_abort, METH_NOARGS, abort_doc},
	{"__dlpack__", (PyCFunction)(void (*)(void))resv_dlpack, METH_VARARGS | METH_KEYWORDS, resv_dlpack_doc},
	{"__dlpack_device__", pyshm_dlpack_device, METH_NOARGS, "__dlpack_device__() -> (1, 0): kDLCPU, device 0."},
	{"__enter__", resv_enter, METH_NOARGS, "Return self."},
	{"__exit__", (PyCFunction)resv_exit, METH_VARARGS, "commit() on a normal exit, abort() on an exception."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef resv_getset[] = {
	{"done", (getter)resv_get_done, NULL, "Whether it was committed or aborted.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(resv_doc, "Room reserved in a channel (Channel.reserve()), a writable buffer.\n\n"
		       "Write the message into it (memoryview(r)[:n] = data, numpy.asarray(r)), then\n"
		       "commit() or abort(); as a context manager it commits on a normal exit and\n"
		       "aborts on an exception.  Dropped without either, it is aborted.");

static PyType_Slot resv_slots[] = {
	{Py_tp_doc, (void *)resv_doc},
	{Py_tp_methods, resv_methods},
	{Py_tp_getset, resv_getset},
	{Py_tp_dealloc, resv_dealloc},
	{Py_bf_getbuffer, resv_getbuffer},
	{Py_bf_releasebuffer, resv_releasebuffer},
	{Py_mp_length, resv_length},
	{0, NULL},
};

static PyType_Spec resv_spec = {"pinshm.Reservation", sizeof(ReservationObject), 0,
				Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, resv_slots};

int pyshm_message_init(PyObject *module)
{
	pyshm_MessageType = pyshm_add_type(module, &msg_spec, "Message");
	pyshm_ReservationType = pyshm_MessageType ? pyshm_add_type(module, &resv_spec, "Reservation") : NULL;
	return pyshm_ReservationType ? 0 : -1;
}
