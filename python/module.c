/*
 * module.c - the _pinshm module: its exceptions, constants and module
 * functions.  pinshm/__init__.py re-exports it with the numpy helpers.
 */
#include "pyshm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

PyObject *pyshm_Error, *pyshm_Full, *pyshm_Empty, *pyshm_Timeout, *pyshm_PeerGone, *pyshm_Corrupt,
	*pyshm_TooManyHeld, *pyshm_Stale;

/* This process's id, kept across fork() by an atfork handler: glibc's
 * getpid() is a system call, and every call on an object asks it. */
static pid_t cached_pid;

static void after_fork_child(void)
{
	cached_pid = getpid();
}

pid_t pyshm_pid(void)
{
	return cached_pid;
}

PyObject *pyshm_raise(int rc, const char *detail, enum pyshm_side side)
{
	PyObject *type = pyshm_Error;
	int err = rc < 0 ? -rc : rc;

	switch (err) {
	case EAGAIN:
		type = side == PYSHM_SEND ? pyshm_Full : side == PYSHM_RECV ? pyshm_Empty : pyshm_Error;
		break;
	case ETIMEDOUT:
		type = pyshm_Timeout;
		break;
	case EPIPE:
		type = pyshm_PeerGone;
		break;
	case EBADMSG:
		type = pyshm_Corrupt;
		break;
	case ENOBUFS:
		type = pyshm_TooManyHeld;
		break;
	case ESTALE:
		type = pyshm_Stale;
		break;
	}
	if (!detail)
		detail = "";
	PyObject *msg = detail[0] ? PyUnicode_FromFormat("%s: %s", pinshm_strerror(-err), detail)
				  : PyUnicode_FromString(pinshm_strerror(-err));
	if (!msg)
		return NULL;
	PyObject *exc = PyObject_CallFunction(type, "iO", err, msg);
	Py_DECREF(msg);
	if (!exc)
		return NULL;
	PyObject *d = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail), "replace");
	if (!d || PyObject_SetAttrString(exc, "detail", d) < 0) {
		Py_XDECREF(d);
		Py_DECREF(exc);
		return NULL;
	}
	Py_DECREF(d);
	PyErr_SetObject(type, exc);
	Py_DECREF(exc);
	return NULL;
}

int pyshm_u64(PyObject *arg, void *out)
{
	PyObject *i = PyNumber_Index(arg);
	if (!i)
		return 0;
	unsigned long long v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return 0;
	*(uint64_t *)out = v;
	return 1;
}

int pyshm_u32(PyObject *arg, void *out)
{
	uint64_t v;
	if (!pyshm_u64(arg, &v))
		return 0;
	if (v > UINT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "%llu is too large (at most %u)", (unsigned long long)v, UINT32_MAX);
		return 0;
	}
	*(unsigned *)out = (unsigned)v;
	return 1;
}

int pyshm_timeout_ms(PyObject *arg, int *ms)
{
	if (!arg || arg == Py_None) {
		*ms = PINSHM_FOREVER;
		return 0;
	}
	double s = PyFloat_AsDouble(arg);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	if (isnan(s) || s < 0) {
		PyErr_SetString(PyExc_ValueError, "timeout must be None (forever) or seconds >= 0");
		return -1;
	}
	double m = ceil(s * 1000.0);
	*ms = m >= (double)INT_MAX ? PINSHM_FOREVER : (int)m;
	return 0;
}

PyDoc_STRVAR(connect_doc,
	     "connect(socket=None, autostart=False) -> Client\n\n"
	     "Connect to pinshmd.  socket: the daemon's socket path; None: $PINSHM_SOCKET if set,\n"
	     "else the user-mode socket, else the system socket /run/pinshm/socket (as pinshm_connect()).\n"
	     "autostart: start a user-mode pinshmd where none answers (pinshm_connect_flags()\n"
	     "with PINSHM_CONNECT_AUTOSTART; $PINSHM_AUTOSTART=0 forbids it, =1 always allows it).\n"
	     "Raises pinshm.Error with the reason (its detail) on failure.");

static PyObject *mod_connect(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "autostart", NULL};
	PyObject *path = Py_None, *bytes = NULL;
	int autostart = 0;
	pinshm_client_t *c = NULL;
	char why[512];

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Op:connect", kwlist, &path, &autostart))
		return NULL;
	if (path != Py_None && !PyUnicode_FSConverter(path, &bytes))
		return NULL;
	const char *p = bytes ? PyBytes_AsString(bytes) : NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = pinshm_connect_flags(p, autostart ? PINSHM_CONNECT_AUTOSTART : 0, &c);
	/* The reason is kept per thread: read it on this one. */
	snprintf(why, sizeof(why), "%s", rc < 0 ? pinshm_client_error(NULL) : "");
	Py_END_ALLOW_THREADS
	Py_XDECREF(bytes);
	if (rc < 0)
		return pyshm_raise(rc, why, PYSHM_OTHER);
	ClientObject *self = PyObject_New(ClientObject, (PyTypeObject *)pyshm_ClientType);
	if (!self) {
		pinshm_disconnect(c);
		return NULL;
	}
	self->c = c;
	self->pid = pyshm_pid();
	self->users = 0;
	return (PyObject *)self;
}

PyDoc_STRVAR(strerror_doc, "strerror(errno) -> str\n\nThe library's description of an errno value "
			   "(positive or negative).");

static PyObject *mod_strerror(PyObject *mod, PyObject *arg)
{
	(void)mod;
	long e = PyLong_AsLong(arg);
	if (e == -1 && PyErr_Occurred())
		return NULL;
	if (e > INT_MAX || e < -INT_MAX) {
		PyErr_SetString(PyExc_ValueError, "errno out of range");
		return NULL;
	}
	return PyUnicode_FromString(pinshm_strerror(e > 0 ? -(int)e : (int)e));
}

PyDoc_STRVAR(own_name_doc, "own_name(rest) -> str\n\n"
			   "The caller's owned channel name \"@UID.rest\", UID its effective uid\n"
			   "(pinshm_name_own()): only this user (and root) may create it, and\n"
			   "Client.open() of it opens only this user's channel.  rest: one or more\n"
			   "characters of [A-Za-z0-9._-]; pinshm.Error with errno EINVAL otherwise, or\n"
			   "ENAMETOOLONG where the name would be over 63 characters.  Needs no daemon.");

static PyObject *mod_own_name(PyObject *mod, PyObject *args)
{
	const char *rest;
	char buf[PINSHM_NAME_MAX + 1];

	(void)mod;
	if (!PyArg_ParseTuple(args, "s:own_name", &rest))
		return NULL;
	int rc = pinshm_name_own(buf, sizeof(buf), rest);
	if (rc < 0) {
		/* The library keeps no reason for this one: say it here. */
		char why[128] = "";
		if (rc == -EINVAL)
			snprintf(why, sizeof(why), "'%.40s' is not one or more characters of [A-Za-z0-9._-]", rest);
		else if (rc == -ENAMETOOLONG)
			snprintf(why, sizeof(why), "an owned name has at most %d characters", PINSHM_NAME_MAX);
		return pyshm_raise(rc, why, PYSHM_OTHER);
	}
	return PyUnicode_FromString(buf);
}

PyDoc_STRVAR(dlpack_doc, "_dlpack(message, offset, shape, strides, code, bits, **dlpack) -> capsule\n\n"
			 "A DLPack capsule over message from byte offset (pinshm.array_dlpack() uses it):\n"
			 "shape and strides (in elements, or None for C order) tuples, DLPack type code\n"
			 "and bits.  The geometry must lie within the record.  The keywords are those\n"
			 "of Message.__dlpack__() (max_version, dl_device, copy, stream).");

/* Read a tuple of up to 32 int64 into @p out. @return its length, or -1. */
static int int64_tuple(PyObject *t, int64_t *out)
{
	if (!PyTuple_Check(t) || PyTuple_Size(t) > 32) {
		PyErr_SetString(PyExc_ValueError, "a tuple of at most 32 integers");
		return -1;
	}
	int n = (int)PyTuple_Size(t);
	for (int i = 0; i < n; i++) {
		out[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
		if (out[i] == -1 && PyErr_Occurred())
			return -1;
	}
	return n;
}

/* Whether @p ndim dimensions of @p itemsize bytes with @p shape and
 * @p strides (elements, NULL: C order) from @p offset lie within @p len bytes. */
static bool geometry_fits(size_t len, size_t offset, int ndim, const int64_t *shape, const int64_t *strides,
			  size_t itemsize)
{
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0)
			return false;
	for (int i = 0; i < ndim; i++)
		if (shape[i] == 0)
			return offset <= len; /* empty: no element is read */
	__int128 lo = (__int128)offset, hi = (__int128)offset, step = (__int128)itemsize;

	for (int i = ndim - 1; i >= 0; i--) {
		__int128 s = strides ? (__int128)strides[i] * (__int128)itemsize : step;
		__int128 mag = s < 0 ? -s : s;
		/* Each dimension's span within len on its own, so that neither
		 * the sums nor step (at most 2 * len) can overflow. */
		if ((uint64_t)shape[i] > len || (mag > 0 && (__int128)(shape[i] - 1) > (__int128)len / mag))
			return false;
		__int128 span = s * (__int128)(shape[i] - 1);
		if (span < 0)
			lo += span;
		else
			hi += span;
		step = s * shape[i];
	}
	return lo >= 0 && hi + (__int128)itemsize <= (__int128)len;
}

static PyObject *mod_dlpack(PyObject *mod, PyObject *args, PyObject *kw)
{
	PyObject *msg, *shape_t, *strides_t;
	struct pyshm_dl_request req;
	unsigned long long offset;
	unsigned char code, bits;
	int64_t shape[32], strides[32];

	(void)mod;
	PyObject *none = PyTuple_New(0);
	int bad = !none || pyshm_dlpack_request(none, kw, &req) < 0;
	Py_XDECREF(none);
	if (bad)
		return NULL;
	if (!PyArg_ParseTuple(args, "O!KOObb:_dlpack", (PyTypeObject *)pyshm_MessageType, &msg, &offset, &shape_t,
			      &strides_t, &code, &bits))
		return NULL;
	int ndim = int64_tuple(shape_t, shape);
	if (ndim < 0)
		return NULL;
	if (strides_t != Py_None && int64_tuple(strides_t, strides) != ndim) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "strides and shape differ in length");
		return NULL;
	}
	MessageObject *m = (MessageObject *)msg;
	if (bits == 0 || bits % 8 || !geometry_fits(m->len, offset, ndim, shape, strides_t == Py_None ? NULL : strides,
						    bits / 8)) {
		PyErr_SetString(PyExc_ValueError, "the tensor does not lie within the record");
		return NULL;
	}
	if (pyshm_message_exportable(m) < 0)
		return NULL;
	struct pyshm_dl_geometry g = {
		.offset = offset,
		.ndim = ndim,
		.shape = shape,
		.strides = strides_t == Py_None ? NULL : strides,
		.code = code,
		.bits = bits,
	};
	return pyshm_dlpack_capsule(msg, &m->views, m->chan, (void *)m->data, m->len, true, &req, &g);
}

static PyMethodDef mod_methods[] = {
	{"connect", (PyCFunction)(void (*)(void))mod_connect, METH_VARARGS | METH_KEYWORDS, connect_doc},
	{"strerror", mod_strerror, METH_O, strerror_doc},
	{"own_name", mod_own_name, METH_VARARGS, own_name_doc},
	{"cuda_device", (PyCFunction)(void (*)(void))pyshm_cuda_device, METH_VARARGS | METH_KEYWORDS, pyshm_cuda_doc},
	{"opencl_device", pyshm_opencl_device, METH_O, pyshm_opencl_doc},
	{"_dlpack", (PyCFunction)(void (*)(void))mod_dlpack, METH_VARARGS | METH_KEYWORDS, dlpack_doc},
	{NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(mod_doc, "_pinshm: the C extension of the pinshm package (import pinshm instead).\n\n"
		      "Messages between the processes of one machine over pinned shared memory:\n"
		      "connect() to pinshmd, then create, open and use channels.  See pinshm-python(3).");

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT, "_pinshm", mod_doc, -1, mod_methods, NULL, NULL, NULL, NULL,
};

/* Make exception @p name (module.name) with @p doc, deriving from @p bases
 * (a type or a tuple), and add it to @p m. */
static PyObject *add_exception(PyObject *m, const char *name, const char *doc, PyObject *bases)
{
	char full[64];

	snprintf(full, sizeof(full), "pinshm.%s", name);
	PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	if (!e)
		return NULL;
	Py_INCREF(e);
	if (PyModule_AddObject(m, name, e) < 0) {
		Py_DECREF(e);
		Py_DECREF(e);
		return NULL;
	}
	return e;
}

/* Error(OSError) and its subclasses, each also the builtin that fits. */
static int add_exceptions(PyObject *m)
{
	pyshm_Error = add_exception(m, "Error",
				    "A pinshm call failed: errno, strerror, and detail (the library's reason).",
				    PyExc_OSError);
	if (!pyshm_Error)
		return -1;
	static const struct {
		const char *name, *doc;
		PyObject **store, **builtin;
	} sub[] = {
		{"Full", "No room in the channel (a send or reserve that may not wait; EAGAIN).", &pyshm_Full,
		 &PyExc_BlockingIOError},
		{"Empty", "No message (a receive that may not wait; EAGAIN).", &pyshm_Empty, &PyExc_BlockingIOError},
		{"Timeout", "The timeout passed (ETIMEDOUT).", &pyshm_Timeout, &PyExc_TimeoutError},
		{"PeerGone", "Every peer has left: no consumer to send to, no producer to wait for (EPIPE).",
		 &pyshm_PeerGone, &PyExc_BrokenPipeError},
		{"Corrupt", "The channel's shared state was found inconsistent (EBADMSG).", &pyshm_Corrupt, NULL},
		{"TooManyHeld", "The handle holds as many records in place as the library allows (ENOBUFS).",
		 &pyshm_TooManyHeld, NULL},
		{"Stale", "Overrun topic: the message was overwritten while read (ESTALE).", &pyshm_Stale, NULL},
	};
	for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
		PyObject *bases = sub[i].builtin ? PyTuple_Pack(2, pyshm_Error, *sub[i].builtin)
						 : PyTuple_Pack(1, pyshm_Error);
		if (!bases)
			return -1;
		*sub[i].store = add_exception(m, sub[i].name, sub[i].doc, bases);
		Py_DECREF(bases);
		if (!*sub[i].store)
			return -1;
	}
	return 0;
}

static int add_constants(PyObject *m)
{
	static const struct {
		const char *name;
		long long value;
	} k[] = {
		{"QUEUE", PINSHM_QUEUE},
		{"TOPIC", PINSHM_TOPIC},
		{"PRODUCER", PINSHM_PRODUCER},
		{"CONSUMER", PINSHM_CONSUMER},
		{"OVERRUN", PINSHM_OVERRUN},
		{"PERSISTENT", PINSHM_PERSISTENT},
		{"HUGEPAGES", PINSHM_HUGEPAGES},
		{"MAX_HELD", PYSHM_MAX_HELD},
		{"NAME_MAX", PINSHM_NAME_MAX},
		{"LAYOUT_VERSION", PINSHM_LAYOUT_VERSION},
		{"PROTOCOL_VERSION", PINSHM_PROTOCOL_VERSION},
		{"MIN_CAPACITY", PINSHM_MIN_CAPACITY},
		{"REGISTERED", PINSHM_REGISTERED},
		{"REGISTERED_READ_ONLY", PINSHM_REGISTERED_READ_ONLY},
	};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (PyModule_AddIntConstant(m, k[i].name, (long)k[i].value) < 0)
			return -1;
	PyObject *adaptive = PyLong_FromUnsignedLongLong(PINSHM_SPIN_ADAPTIVE);
	if (!adaptive || PyModule_AddObject(m, "SPIN_ADAPTIVE", adaptive) < 0) {
		Py_XDECREF(adaptive);
		return -1;
	}
	return PyModule_AddStringConstant(m, "LIBRARY_VERSION", pinshm_version());
}

PyMODINIT_FUNC PyInit__pinshm(void);

PyMODINIT_FUNC PyInit__pinshm(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	cached_pid = getpid();
	if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
		Py_DECREF(m);
		return PyErr_NoMemory();
	}
	if (add_exceptions(m) < 0 || add_constants(m) < 0 || pyshm_client_init(m) < 0 ||
	    pyshm_channel_init(m) < 0 || pyshm_message_init(m) < 0 ||
	    pyshm_device_init(m) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}

PyObject *pyshm_add_type(PyObject *module, PyType_Spec *spec, const char *name)
{
	PyObject *t = PyType_FromSpec(spec);

	if (!t)
		return NULL;
	Py_INCREF(t);
	if (PyModule_AddObject(module, name, t) < 0) {
		Py_DECREF(t);
		Py_DECREF(t);
		return NULL;
	}
	return t;
}

void pyshm_free(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	f(self);
	Py_DECREF(tp);
}
