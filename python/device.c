/*
 * device.c - pinshm.Device (an accelerator the library hands records to by
 * DMA: pinshm_device_t), a channel's registration with it, and
 * Message.release_after(): a record released once a device's copy of it
 * has completed.
 *
 * A Channel holds each Device it is registered with (strong), so that the
 * device is closed only after the channel's registration went with its
 * handle.  Event objects given to release_after() (a torch.cuda.Event)
 * are held by the channel until their release is no longer pending (the
 * driver cannot retain a CUDA event, which must outlive the wait): by the
 * record's slot until it goes to the library, then in the channel's ring
 * of pending ones, trimmed after each release.
 */
#include "pyshm.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

PyObject *pyshm_DeviceType;

static const char *kind_name(pinshm_device_kind_t k)
{
	return k == PINSHM_DEVICE_CUDA ? "cuda" : "opencl";
}

/* A new Device over @p dev (owned), or NULL with it closed. */
static PyObject *device_new(pinshm_device_t *dev)
{
	DeviceObject *d = PyObject_New(DeviceObject, (PyTypeObject *)pyshm_DeviceType);

	if (!d) {
		pinshm_device_close(dev);
		return NULL;
	}
	d->dev = dev;
	d->pid = pyshm_pid();
	return (PyObject *)d;
}

/* Raise Error for a failed pinshm_device_open_*() returning @p rc. */
static PyObject *open_failed(int rc)
{
	return pyshm_raise(rc, pinshm_device_error(), PYSHM_OTHER);
}

const char pyshm_cuda_doc[] = "cuda_device(ordinal=0) -> Device\n\n"
		       "Open CUDA device ordinal through the driver (libcuda.so.1, loaded now;\n"
		       "pinshm_device_open_cuda()), in its primary context, the one the CUDA runtime\n"
		       "and torch use.  pinshm.Error with errno ENODEV where there is no driver or no\n"
		       "such device, ENOTSUP where the driver lacks an entry point.";

PyObject *pyshm_cuda_device(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"ordinal", NULL};
	int ordinal = 0, rc;
	pinshm_device_t *dev = NULL;

	(void)mod;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:cuda_device", kwlist, &ordinal))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = pinshm_device_open_cuda(ordinal, &dev);
	Py_END_ALLOW_THREADS
	return rc < 0 ? open_failed(rc) : device_new(dev);
}

/* Copy the @p n bytes at @p p to @p out, asking the kernel, which answers
 * EFAULT where a load would fault: process_vm_readv() of this process, or
 * a pipe where a filter forbids that.  No byte at @p p is loaded here, so
 * a bad address is an answer, not a crash.  @return whether all n were
 * read; false too where neither way is open (no descriptor left for the
 * pipe): the handle is refused rather than followed. */
static bool peek(const void *p, void *out, size_t n)
{
	struct iovec here = { out, n }, there = { (void *)p, n };
	int fd[2];

	ssize_t r = process_vm_readv(getpid(), &here, 1, &there, 1, 0);
	if (r >= 0 || errno == EFAULT)
		return r == (ssize_t)n;
	if (pipe2(fd, O_CLOEXEC) < 0)
		return false;
	bool ok = write(fd[1], p, n) == (ssize_t)n && read(fd[0], out, n) == (ssize_t)n;
	close(fd[0]);
	close(fd[1]);
	return ok;
}

/* Whether @p h looks like an object of an OpenCL ICD driver (a context, an
 * event): its first word a readable dispatch table whose clGetContextInfo
 * entry (the ninth: the ICD's fixed order) lies in a loaded library.  The
 * OpenCL API itself has no call that checks a handle without following
 * it.  A probe, not a proof: a stray integer or a pointer to anything else
 * fails it; a live object of another OpenCL type passes. */
static bool icd_object(const void *h)
{
	const void *table, *entries[9];
	Dl_info info;

	if (!peek(h, &table, sizeof(table)) || !table || !peek(table, entries, sizeof(entries)))
		return false;
	return entries[8] && dladdr(entries[8], &info) && info.dli_fbase;
}

const char pyshm_opencl_doc[] = "opencl_device(context) -> Device\n\n"
			 "Use an OpenCL context (pinshm_device_open_opencl()), retained until the\n"
			 "Device goes: a pyopencl.Context, or any object with its cl_context handle as\n"
			 "int_ptr, or that handle as an integer.  The handle is checked before use as\n"
			 "far as OpenCL allows (it has no call that checks a handle without following\n"
			 "it): 0, an address that cannot be read or whose first word is not an ICD\n"
			 "driver's dispatch table raise pinshm.Error (EINVAL); a live OpenCL object\n"
			 "of another type (a queue, a buffer) passes that check and is undefined\n"
			 "behaviour in the driver, as with ctypes: pass only a live cl_context.\n"
			 "pinshm.Error: ENODEV (no OpenCL loader), EINVAL (not a context).";

PyObject *pyshm_opencl_device(PyObject *mod, PyObject *arg)
{
	pinshm_device_t *dev = NULL;
	PyObject *h = PyLong_Check(arg) ? (Py_INCREF(arg), arg) : PyObject_GetAttrString(arg, "int_ptr");

	(void)mod;
	if (!h || !PyLong_Check(h)) {
		Py_XDECREF(h);
		PyErr_Clear();
		PyErr_SetString(PyExc_TypeError, "context: a pyopencl.Context (int_ptr) or a cl_context handle (int)");
		return NULL;
	}
	void *ctx = PyLong_AsVoidPtr(h);
	Py_DECREF(h);
	if (!ctx && PyErr_Occurred())
		return NULL;
	if (ctx && !icd_object(ctx))
		return pyshm_raise(-EINVAL, "not an OpenCL context: the handle is not an object of an ICD driver",
				   PYSHM_OTHER);
	int rc = pinshm_device_open_opencl(ctx, &dev);
	return rc < 0 ? open_failed(rc) : device_new(dev);
}

static PyObject *dev_get_kind(DeviceObject *d, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(kind_name(pinshm_device_kind(d->dev)));
}

static void dev_dealloc(DeviceObject *d)
{
	/* Every channel registered with it holds it: none is left.  A child
	 * after fork() leaves the parent's device alone. */
	if (d->pid == pyshm_pid())
		pinshm_device_close(d->dev);
	pyshm_free((PyObject *)d);
}

static PyGetSetDef dev_getset[] = {
	{"kind", (getter)dev_get_kind, NULL, "'cuda' or 'opencl'.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(dev_doc, "An accelerator that reads records and writes reservations by DMA\n"
		      "(pinshm.cuda_device(), pinshm.opencl_device()).\n\n"
		      "Register a channel's mapping with it (Channel.register()) so that the device\n"
		      "copies from records in place; closed when its last reference goes (each\n"
		      "channel registered with it holds one).");

static PyType_Slot dev_slots[] = {
	{Py_tp_doc, (void *)dev_doc},
	{Py_tp_getset, dev_getset},
	{Py_tp_dealloc, dev_dealloc},
	{0, NULL},
};

static PyType_Spec dev_spec = {"pinshm.Device", sizeof(DeviceObject), 0,
			       Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, dev_slots};

int pyshm_device_init(PyObject *module)
{
	pyshm_DeviceType = pyshm_add_type(module, &dev_spec, "Device");
	return pyshm_DeviceType ? 0 : -1;
}

/* ---- a channel's registrations ------------------------------------------ */

/* The index of @p d among @p self's devices, or -1. */
static int dev_index(ChannelObject *self, PyObject *d)
{
	for (int i = 0; i < PYSHM_MAX_DEVICES; i++)
		if (self->devs[i] == d)
			return i;
	return -1;
}

static int device_arg(PyObject *o, void *out)
{
	if (!PyObject_TypeCheck(o, (PyTypeObject *)pyshm_DeviceType)) {
		PyErr_SetString(PyExc_TypeError, "a pinshm.Device (pinshm.cuda_device(), pinshm.opencl_device())");
		return 0;
	}
	*(PyObject **)out = o;
	return 1;
}

/* The registration calls, which may pin or wait for copies. */
static int do_register(pinshm_channel_t *ch, pinshm_device_t *dev, unsigned flags)
{
	return pinshm_channel_register(ch, dev, flags);
}

static int do_unregister(pinshm_channel_t *ch, pinshm_device_t *dev, unsigned flags)
{
	(void)flags;
	return pinshm_channel_unregister(ch, dev);
}

/* @p op without the GIL, the handle marked busy and its client in use. */
static int without_gil(ChannelObject *self, int (*op)(pinshm_channel_t *, pinshm_device_t *, unsigned),
		       pinshm_channel_t *ch, pinshm_device_t *dev, unsigned flags)
{
	ClientObject *c = self->client;
	int rc;

	self->busy = true;
	if (c)
		c->users++;
	Py_BEGIN_ALLOW_THREADS
	rc = op(ch, dev, flags);
	Py_END_ALLOW_THREADS
	if (c)
		c->users--;
	self->busy = false;
	return rc;
}

const char pyshm_register_doc[] = "register(device, read_only=False, strict=False)\n\n"
			   "Register this handle's mapping of the channel with device\n"
			   "(pinshm_channel_register()), so that its DMA engine reads records and writes\n"
			   "reservations in place.  A consumer's registration is read-only where the device\n"
			   "allows (read_only=True asks for it on a producer too); strict=True fails\n"
			   "(ENOTSUP) rather than register writable.  Again with the same device: nothing.";

PyObject *pyshm_channel_register(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"device", "read_only", "strict", NULL};
	PyObject *d;
	int ro = 0, strict = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|pp:register", kwlist, device_arg, &d, &ro, &strict) ||
	    pyshm_channel_usable(self) < 0)
		return NULL;
	int i = dev_index(self, d), free_slot = dev_index(self, NULL);
	if (i < 0 && free_slot < 0)
		return pyshm_raise(-ENOSPC, "registered with 4 devices already", PYSHM_OTHER);
	unsigned flags = (ro ? PINSHM_REGISTER_READ_ONLY : 0) | (strict ? PINSHM_REGISTER_STRICT : 0);
	pinshm_channel_t *ch = self->ch;
	pinshm_device_t *dev = ((DeviceObject *)d)->dev;
	rc = without_gil(self, do_register, ch, dev, flags);
	if (rc < 0)
		return pyshm_raise(rc, pinshm_channel_error(self->ch), PYSHM_OTHER);
	if (i < 0) {
		Py_INCREF(d);
		self->devs[free_slot] = d;
	}
	Py_RETURN_NONE;
}

const char pyshm_unregister_doc[] = "unregister(device)\n\n"
			     "Release the registration with device, after waiting for the copies of its\n"
			     "records still pending (pinshm_channel_unregister()).  pinshm.Error (ENOENT)\n"
			     "where it is not registered with it.";

PyObject *pyshm_channel_unregister(ChannelObject *self, PyObject *arg)
{
	PyObject *d;
	int rc;

	if (!device_arg(arg, &d) || pyshm_channel_usable(self) < 0)
		return NULL;
	pinshm_channel_t *ch = self->ch;
	rc = without_gil(self, do_unregister, ch, ((DeviceObject *)d)->dev, 0);
	pyshm_channel_reap(self);
	if (rc < 0)
		return pyshm_raise(rc, pinshm_channel_error(self->ch), PYSHM_OTHER);
	int i = dev_index(self, d);
	if (i >= 0)
		Py_CLEAR(self->devs[i]);
	Py_RETURN_NONE;
}

const char pyshm_registered_doc[] = "registered(device) -> int\n\n"
			     "0 where this handle is not registered with device, else REGISTERED, with\n"
			     "REGISTERED_READ_ONLY where the device may only read (pinshm_channel_registered()).";

PyObject *pyshm_channel_registered(ChannelObject *self, PyObject *arg)
{
	PyObject *d;

	if (!device_arg(arg, &d) || pyshm_channel_usable(self) < 0)
		return NULL;
	return PyLong_FromUnsignedLong(pinshm_channel_registered(self->ch, ((DeviceObject *)d)->dev));
}

const char pyshm_release_poll_doc[] = "release_poll() -> int\n\n"
			       "Release the records whose device copies completed (Message.release_after())\n"
			       "and return how many still wait (pinshm_release_poll()).  Receives and releases\n"
			       "on the channel do it too.";

PyObject *pyshm_channel_release_poll(ChannelObject *self, PyObject *unused)
{
	(void)unused;
	if (pyshm_channel_usable(self) < 0)
		return NULL;
	int n = pyshm_channel_reap(self);
	if (n >= 0)
		n = pinshm_release_poll(self->ch, NULL, 0, NULL);
	if (n < 0)
		return pyshm_raise(n, pinshm_channel_error(self->ch), PYSHM_RECV);
	pyshm_channel_events_trim(self, n);
	return PyLong_FromLong(n);
}

void pyshm_channel_events_trim(ChannelObject *self, int pending)
{
	if (pending < 0)
		return; /* a failed poll says nothing of what is pending */
	while (self->ev_count > (unsigned)pending) {
		/* Out of the ring first: the object's finalizer may call back. */
		PyObject *ev = self->events[self->ev_first];
		self->events[self->ev_first] = NULL;
		self->ev_first = (self->ev_first + 1) % PYSHM_MAX_HELD;
		self->ev_count--;
		Py_DECREF(ev);
	}
}

int pyshm_release_slot_after(ChannelObject *self, struct held_slot *s)
{
	int rc = pinshm_release_after(self->ch, &s->msg, s->dev, s->event);
	PyObject *keep = s->keep;

	s->keep = NULL;
	if (!keep)
		return rc;
	/* The pending releases are the newest handed over (in order), at most
	 * one per held record: after dropping those no longer pending, there
	 * is room.  A release that failed or went at once needs no object. */
	if (rc == 0 && self->ev_count == PYSHM_MAX_HELD)
		pyshm_channel_events_trim(self, pinshm_release_poll(self->ch, NULL, 0, NULL));
	if (rc != 0) {
		Py_DECREF(keep);
	} else if (self->ev_count < PYSHM_MAX_HELD) {
		self->events[(self->ev_first + self->ev_count) % PYSHM_MAX_HELD] = keep;
		self->ev_count++;
	}
	/* Else the poll failed (a corrupt channel): the object is kept for
	 * ever rather than freed while the driver may still query its event. */
	return rc;
}

void pyshm_channel_devices_clear(ChannelObject *self)
{
	pyshm_channel_events_trim(self, 0);
	for (int i = 0; i < PYSHM_MAX_HELD; i++)
		Py_CLEAR(self->held[i].keep);
	for (int i = 0; i < PYSHM_MAX_DEVICES; i++)
		Py_CLEAR(self->devs[i]);
}

/* ---- Message.release_after() -------------------------------------------- */

/* The device of @p self that @p spec names: a Device it is registered
 * with, a kind ("cuda", "opencl"), or None (its only one).  @return it
 * (borrowed), or NULL with an exception set. */
static DeviceObject *pick_device(ChannelObject *self, PyObject *spec)
{
	DeviceObject *found = NULL;
	int n = 0;

	if (spec != Py_None && !PyUnicode_Check(spec) && !PyObject_TypeCheck(spec, (PyTypeObject *)pyshm_DeviceType)) {
		PyErr_SetString(PyExc_TypeError, "device: a pinshm.Device, 'cuda', 'opencl' or None");
		return NULL;
	}
	const char *kind = PyUnicode_Check(spec) ? PyUnicode_AsUTF8AndSize(spec, NULL) : NULL;
	if (PyUnicode_Check(spec) && (!kind || (strcmp(kind, "cuda") && strcmp(kind, "opencl")))) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "device kind %R: 'cuda' or 'opencl'", spec);
		return NULL;
	}
	for (int i = 0; i < PYSHM_MAX_DEVICES; i++) {
		DeviceObject *d = (DeviceObject *)self->devs[i];
		if (!d || (kind && strcmp(kind_name(pinshm_device_kind(d->dev)), kind)) ||
		    (spec != Py_None && !kind && (PyObject *)d != spec))
			continue;
		found = d;
		n++;
	}
	if (n == 1)
		return found;
	if (n == 0)
		pyshm_raise(-ENOENT, "the channel is not registered with that device (Channel.register())",
			    PYSHM_OTHER);
	else
		PyErr_SetString(PyExc_ValueError, "the channel is registered with several such devices: name one");
	return NULL;
}

/* The event handle that @p ev stands for: an int, an object with a
 * cuda_event (torch.cuda.Event), or a stream with record_event()
 * (torch.cuda.Stream: an event recorded on it now).  *@p keep gets the
 * object to hold until the release (a new reference, or NULL).
 * @return the handle, or NULL with an exception set. */
static void *event_handle(PyObject *ev, PyObject **keep)
{
	PyObject *obj = NULL, *h;

	*keep = NULL;
	if (PyLong_Check(ev)) {
		h = ev;
		Py_INCREF(h);
	} else if (PyObject_HasAttrString(ev, "cuda_event")) {
		obj = ev;
		Py_INCREF(obj);
		h = PyObject_GetAttrString(obj, "cuda_event");
	} else if (PyObject_HasAttrString(ev, "record_event")) {
		obj = PyObject_CallMethod(ev, "record_event", NULL);
		h = obj ? PyObject_GetAttrString(obj, "cuda_event") : NULL;
	} else {
		PyErr_SetString(PyExc_TypeError, "event: an integer handle, a torch.cuda.Event or a torch.cuda.Stream");
		return NULL;
	}
	void *p = h ? PyLong_AsVoidPtr(h) : NULL;
	Py_XDECREF(h);
	if (!p) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "a null event handle (an event never recorded?)");
		Py_XDECREF(obj);
		return NULL;
	}
	*keep = obj;
	return p;
}

const char pyshm_release_after_doc[] = "release_after(event, device=None)\n\n"
	     "Release the record once event has completed (pinshm_release_after()): the\n"
	     "event recorded after a device copy that reads the record, so that dropping the\n"
	     "message after a non-blocking copy never frees the record under its DMA.\n"
	     "event: a torch.cuda.Event (held until the release), a torch.cuda.Stream (an\n"
	     "event is recorded on it now), or an integer handle (a CUevent or cl_event, which\n"
	     "must then be neither destroyed nor recorded again until channel.release_poll()\n"
	     "returns 0; an address that cannot be read, or for OpenCL is no ICD driver's\n"
	     "object, raises ValueError; any other pointer than a live event of the device is\n"
	     "undefined behaviour in the driver, as with ctypes).  device: the pinshm.Device\n"
	     "the channel is registered with, its kind\n"
	     "('cuda', 'opencl'), or None for the only one; pinshm.Error (ENOENT) where the\n"
	     "channel is not registered.  Like release(), the message makes no new view; with\n"
	     "views alive, the release waits for them too (it happens when the message goes).\n"
	     "Records still go back in the order received.  One call per message: a second\n"
	     "raises ValueError (record one event after every copy that reads the record).";

PyObject *pyshm_message_release_after(MessageObject *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"event", "device", NULL};
	PyObject *ev, *spec = Py_None, *keep;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:release_after", kwlist, &ev, &spec))
		return NULL;
	if (m->done || m->release_after) {
		PyErr_SetString(PyExc_ValueError, m->done ? "the message was released already"
							  : "release_after() was called already for this message "
							    "(one event: record it after every copy that reads the record)");
		return NULL;
	}
	ChannelObject *chan = m->chan;
	if (pyshm_channel_usable(chan) < 0)
		return NULL;
	DeviceObject *d = pick_device(chan, spec);
	void *handle = d ? event_handle(ev, &keep) : NULL;
	if (!handle)
		return NULL;
	/* An integer is checked as far as the API allows (see icd_object()). */
	bool cl = pinshm_device_kind(d->dev) != PINSHM_DEVICE_CUDA;
	char byte;
	if (PyLong_Check(ev) && !(cl ? icd_object(handle) : peek(handle, &byte, 1))) {
		PyErr_SetString(PyExc_ValueError, cl ? "event: not a cl_event (not an object of an ICD driver)"
						     : "event: not a CUevent (not a readable address)");
		Py_XDECREF(keep);
		return NULL;
	}
	/* event_handle() may have run Python code (recording an event). */
	if (m->done || m->release_after || pyshm_channel_usable(chan) < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "the message was released meanwhile");
		Py_XDECREF(keep);
		return NULL;
	}
	struct held_slot *s = &chan->held[m->seq % PYSHM_MAX_HELD];
	s->dev = d->dev;
	s->event = handle;
	PyObject *old = s->keep; /* NULL: a slot's object goes when its record does */
	s->keep = keep;          /* held until the release is no longer pending */
	Py_XDECREF(old);
	m->release_after = true;
	if (m->views > 0)
		Py_RETURN_NONE; /* released with the message, once the views are gone */
	pyshm_message_done(m);
	int rc = pyshm_channel_reap(chan);
	if (rc < 0) {
		chan->release_err = 0; /* reported here */
		return pyshm_raise(rc, pinshm_channel_error(chan->ch), PYSHM_RECV);
	}
	Py_RETURN_NONE;
}
