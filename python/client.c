/*
 * client.c - pinshm.Client: a connection to pinshmd (pinshm_client_t).
 *
 * The library's client is thread-safe: requests run without the GIL, each
 * counted in users, so that close() (pinshm_disconnect()) never frees it
 * under another thread's request or under a call on one of its channels.
 */
#include "pyshm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

PyObject *pyshm_ClientType;

/* Raise unless @p self may make a request now. @return 0 or -1. */
static int client_usable(ClientObject *self)
{
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return -1;
	}
	if (self->pid != pyshm_pid()) {
		PyErr_SetString(pyshm_Error, "this client belongs to the parent process (fork): connect again");
		return -1;
	}
	return 0;
}

/* The role argument: PRODUCER, CONSUMER, "producer" or "consumer". */
static int parse_role(PyObject *arg, int *role)
{
	if (PyUnicode_Check(arg)) {
		const char *s = PyUnicode_AsUTF8AndSize(arg, NULL);
		if (!s)
			return -1;
		*role = strcmp(s, "producer") == 0 ? PINSHM_PRODUCER : strcmp(s, "consumer") == 0 ? PINSHM_CONSUMER : 0;
	} else {
		long r = PyLong_AsLong(arg);
		if (r == -1 && PyErr_Occurred())
			return -1;
		*role = r == PINSHM_PRODUCER || r == PINSHM_CONSUMER ? (int)r : 0;
	}
	if (!*role) {
		PyErr_SetString(PyExc_ValueError, "role must be PRODUCER, CONSUMER, 'producer' or 'consumer'");
		return -1;
	}
	return 0;
}

/* One request to the daemon, its arguments and results. */
enum req_kind { REQ_CREATE, REQ_OPEN, REQ_UNLINK, REQ_STAT, REQ_LIST, REQ_STATUS, REQ_SHUTDOWN };

struct request {
	enum req_kind kind;
	const char *name;
	pinshm_channel_attr_t attr; /* REQ_CREATE, with mode and flags */
	mode_t mode;
	unsigned flags;
	int role;                   /* REQ_OPEN: in, with owner; ch: out */
	uid_t owner;
	pinshm_channel_t *ch;
	pinshm_list_entry_t entry;  /* REQ_STAT */
	pinshm_list_entry_t *entries; /* REQ_LIST, count of them */
	size_t count;
	pinshm_status_t status;     /* REQ_STATUS */
};

static int request_run(pinshm_client_t *c, struct request *r)
{
	switch (r->kind) {
	case REQ_CREATE:
		return pinshm_create(c, r->name, &r->attr, r->mode, r->flags);
	case REQ_OPEN:
		return pinshm_open_owned(c, r->name, (pinshm_role_t)r->role, r->owner, &r->ch);
	case REQ_UNLINK:
		return pinshm_unlink(c, r->name);
	case REQ_STAT:
		return pinshm_stat(c, r->name, &r->entry);
	case REQ_LIST:
		return pinshm_list(c, &r->entries, &r->count);
	case REQ_STATUS:
		return pinshm_status(c, &r->status, NULL, NULL);
	case REQ_SHUTDOWN:
		return pinshm_daemon_shutdown(c);
	}
	return -EINVAL;
}

/* Make request @p r without the GIL (counted in users, so that no other
 * thread disconnects meanwhile).  @return 0, or -1 with the exception of
 * its failure set, carrying the daemon's reason. */
static int client_request(ClientObject *self, struct request *r)
{
	char why[512];
	int rc;

	if (client_usable(self) < 0)
		return -1;
	self->users++;
	Py_BEGIN_ALLOW_THREADS
	rc = request_run(self->c, r);
	snprintf(why, sizeof(why), "%s", pinshm_client_error(self->c));
	Py_END_ALLOW_THREADS
	self->users--;
	if (rc < 0) {
		pyshm_raise(rc, why, PYSHM_OTHER);
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(create_doc,
	     "create(name, kind=QUEUE, capacity=1048576, max_message=0, max_producers=4,\n"
	     "       max_consumers=1, overrun=False, mode=0o600, persistent=False, flags=0)\n\n"
	     "Create the channel name (pinshm_create()): a QUEUE or a TOPIC, capacity ring bytes per\n"
	     "producer (a power of two), max_message the largest payload (0: capacity / 2 - 32).\n"
	     "overrun: a topic whose publishers never wait.  mode: permission bits (read: may open\n"
	     "as consumer, write: as producer).  persistent: outlives its users until unlinked.\n"
	     "flags: more PINSHM_* create flags (HUGEPAGES).");

static PyObject *client_create(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name",     "kind", "capacity",   "max_message", "max_producers", "max_consumers",
				 "overrun", "mode", "persistent", "flags",       NULL};
	struct request r = {.kind = REQ_CREATE};
	unsigned kind, maxmsg, prods, cons, mode = 0600, flags = 0;
	uint64_t cap;
	int overrun = 0, persistent = 0;

	pinshm_channel_attr_init(&r.attr);
	kind = r.attr.kind;
	cap = r.attr.capacity;
	maxmsg = r.attr.max_message;
	prods = r.attr.max_producers;
	cons = r.attr.max_consumers;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O&O&O&O&O&pO&pO&:create", kwlist, &r.name, pyshm_u32, &kind,
					 pyshm_u64, &cap, pyshm_u32, &maxmsg, pyshm_u32, &prods, pyshm_u32, &cons,
					 &overrun, pyshm_u32, &mode, &persistent, pyshm_u32, &flags))
		return NULL;
	r.attr = (pinshm_channel_attr_t){.kind = kind,
					 .flags = overrun ? PINSHM_OVERRUN : 0,
					 .capacity = cap,
					 .max_message = maxmsg,
					 .max_producers = prods,
					 .max_consumers = cons};
	r.mode = (mode_t)mode;
	r.flags = flags | (persistent ? PINSHM_PERSISTENT : 0);
	if (client_request(self, &r) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* The owner argument: None (PINSHM_OWNER_ANY) or a uid. */
static int parse_owner(PyObject *arg, uid_t *owner)
{
	if (arg == Py_None) {
		*owner = PINSHM_OWNER_ANY;
		return 0;
	}
	if (!PyLong_Check(arg)) {
		PyErr_SetString(PyExc_TypeError, "owner must be None or a uid (an int)");
		return -1;
	}
	unsigned long v = PyLong_AsUnsignedLong(arg);
	if (v == (unsigned long)-1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return -1;
		PyErr_Clear();
	} else if (v < (unsigned long)PINSHM_OWNER_ANY) {
		*owner = (uid_t)v;
		return 0;
	}
	PyErr_Format(PyExc_ValueError, "owner must be None or a uid from 0 to %lu",
		     (unsigned long)PINSHM_OWNER_ANY - 1);
	return -1;
}

PyDoc_STRVAR(open_doc, "open(name, role, owner=None) -> Channel\n\n"
		       "Open the channel name as a PRODUCER or a CONSUMER (or 'producer', 'consumer'):\n"
		       "pinshm_open_owned().  owner: the uid the channel must belong to; one of another\n"
		       "user raises pinshm.Error with errno EPERM, its detail naming the owner.  None: any\n"
		       "owner, except for an owned name \"@UID.rest\" (own_name()), which opens only\n"
		       "UID's channel (an owner other than UID raises EINVAL).  The channel keeps this\n"
		       "client alive; close it before the client.");

static PyObject *client_open(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "role", "owner", NULL};
	struct request r = {.kind = REQ_OPEN};
	PyObject *role_arg, *owner_arg = Py_None;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|O:open", kwlist, &r.name, &role_arg, &owner_arg))
		return NULL;
	if (parse_role(role_arg, &r.role) < 0 || parse_owner(owner_arg, &r.owner) < 0 ||
	    client_request(self, &r) < 0)
		return NULL;
	return pyshm_channel_new(r.ch, self, r.role, r.name);
}

PyDoc_STRVAR(unlink_doc, "unlink(name)\n\nRemove the name (pinshm_unlink()): users of the old channel "
			 "keep it until they leave.");

static PyObject *client_unlink(ClientObject *self, PyObject *args)
{
	struct request r = {.kind = REQ_UNLINK};

	if (!PyArg_ParseTuple(args, "s:unlink", &r.name) || client_request(self, &r) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* Set d[key] = v (a new reference, stolen). @return 0 or -1. */
static int put(PyObject *d, const char *key, PyObject *v)
{
	if (!v)
		return -1;
	int rc = PyDict_SetItemString(d, key, v);
	Py_DECREF(v);
	return rc;
}

/* A listed channel as a dict. */
static PyObject *entry_dict(const pinshm_list_entry_t *e)
{
	PyObject *d = PyDict_New();

	if (!d)
		return NULL;
	if (put(d, "name", PyUnicode_FromString(e->name)) < 0 ||
	    put(d, "kind", PyUnicode_FromString(e->kind == PINSHM_TOPIC ? "topic" : "queue")) < 0 ||
	    put(d, "flags", PyLong_FromUnsignedLong(e->flags)) < 0 ||
	    put(d, "capacity", PyLong_FromUnsignedLongLong(e->capacity)) < 0 ||
	    put(d, "max_message", PyLong_FromUnsignedLong(e->max_message)) < 0 ||
	    put(d, "max_producers", PyLong_FromUnsignedLong(e->max_producers)) < 0 ||
	    put(d, "max_consumers", PyLong_FromUnsignedLong(e->max_consumers)) < 0 ||
	    put(d, "state", PyLong_FromUnsignedLong(e->state)) < 0 ||
	    put(d, "pinned", PyBool_FromLong(!!(e->state & PINSHM_LIST_PINNED))) < 0 ||
	    put(d, "locking", PyBool_FromLong(!!(e->state & PINSHM_LIST_LOCKING))) < 0 ||
	    put(d, "persistent", PyBool_FromLong(!!(e->state & PINSHM_LIST_PERSISTENT))) < 0 ||
	    put(d, "uid", PyLong_FromUnsignedLong(e->uid)) < 0 || put(d, "gid", PyLong_FromUnsignedLong(e->gid)) < 0 ||
	    put(d, "mode", PyLong_FromUnsignedLong(e->mode)) < 0 ||
	    put(d, "size", PyLong_FromUnsignedLongLong(e->size)) < 0 ||
	    put(d, "producers", PyLong_FromUnsignedLong(e->producers)) < 0 ||
	    put(d, "consumers", PyLong_FromUnsignedLong(e->consumers)) < 0 ||
	    put(d, "node", PyLong_FromLong(e->node)) < 0 ||
	    put(d, "messages", PyLong_FromUnsignedLongLong(e->messages)) < 0 ||
	    put(d, "bytes", PyLong_FromUnsignedLongLong(e->bytes)) < 0 ||
	    put(d, "lost", PyLong_FromUnsignedLongLong(e->lost)) < 0 ||
	    put(d, "refused", PyLong_FromUnsignedLongLong(e->refused)) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

PyDoc_STRVAR(stat_doc, "stat(name) -> dict\n\nThe channel name as the daemon lists it (pinshm_stat()): "
		       "geometry, owner, mode,\nendpoints attached, and statistics (messages, bytes, lost, "
		       "refused: figures its users keep,\nnot to trust).");

static PyObject *client_stat(ClientObject *self, PyObject *args)
{
	struct request r = {.kind = REQ_STAT};

	if (!PyArg_ParseTuple(args, "s:stat", &r.name) || client_request(self, &r) < 0)
		return NULL;
	return entry_dict(&r.entry);
}

PyDoc_STRVAR(list_doc, "list() -> list of dict\n\nEvery named channel, in the order created "
		       "(pinshm_list()), each as stat() gives it.");

static PyObject *client_list(ClientObject *self, PyObject *unused)
{
	struct request r = {.kind = REQ_LIST};

	(void)unused;
	if (client_request(self, &r) < 0)
		return NULL;
	PyObject *l = PyList_New(0);
	for (size_t i = 0; l && i < r.count; i++) {
		PyObject *d = entry_dict(&r.entries[i]);
		if (!d || PyList_Append(l, d) < 0) {
			Py_XDECREF(d);
			Py_CLEAR(l);
			break;
		}
		Py_DECREF(d);
	}
	free(r.entries);
	return l;
}

PyDoc_STRVAR(status_doc, "status() -> dict\n\nThe daemon's figures (pinshm_status()): pid, user_mode, uptime_ms, "
			 "budget and pinned\n(bytes), channels_pinned, channels_unpinned, connections.");

static PyObject *client_status(ClientObject *self, PyObject *unused)
{
	struct request r = {.kind = REQ_STATUS};
	const pinshm_status_t *st = &r.status;

	(void)unused;
	if (client_request(self, &r) < 0)
		return NULL;
	return Py_BuildValue("{s:I,s:O,s:K,s:K,s:K,s:I,s:I,s:I}", "pid", st->pid, "user_mode",
			     (st->flags & PINSHM_STATUS_USER_MODE) ? Py_True : Py_False, "uptime_ms",
			     (unsigned long long)st->uptime_ms, "budget", (unsigned long long)st->budget, "pinned",
			     (unsigned long long)st->pinned, "channels_pinned", st->channels_pinned,
			     "channels_unpinned", st->channels_unpinned, "connections", st->connections);
}

PyDoc_STRVAR(shutdown_doc, "shutdown_daemon()\n\nAsk the daemon to stop (pinshm_daemon_shutdown(): "
			   "only root or its own user may).\nChannels already mapped keep working.");

static PyObject *client_shutdown(ClientObject *self, PyObject *unused)
{
	struct request r = {.kind = REQ_SHUTDOWN};

	(void)unused;
	if (client_request(self, &r) < 0)
		return NULL;
	Py_RETURN_NONE;
}

PyDoc_STRVAR(close_doc, "close()\n\nDisconnect (pinshm_disconnect()).  Channels opened through it stay "
			"mapped, but their\nendpoints go with the connection: every call on them but close() then "
			"raises\npinshm.Error (ENOTCONN), and a release does nothing.  Close them first.\n"
			"Closing twice does nothing.");

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
	(void)unused;
	if (!self->c)
		Py_RETURN_NONE;
	/* In a child after fork(), this closes nothing of the parent's, and
	 * the parent's threads that were using it do not run here. */
	if (self->users > 0 && self->pid == pyshm_pid()) {
		PyErr_SetString(PyExc_RuntimeError, "the client is in use by another thread");
		return NULL;
	}
	pinshm_disconnect(self->c);
	self->c = NULL;
	Py_RETURN_NONE;
}

static PyObject *client_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *client_exit(ClientObject *self, PyObject *args)
{
	(void)args;
	return client_close(self, NULL);
}

static PyObject *client_get_error(ClientObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->c ? pinshm_client_error(self->c) : "");
}

static PyObject *client_get_closed(ClientObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->c == NULL);
}

static void client_dealloc(ClientObject *self)
{
	if (self->c)
		pinshm_disconnect(self->c);
	pyshm_free((PyObject *)self);
}

static PyMethodDef client_methods[] = {
	{"create", (PyCFunction)(void (*)(void))client_create, METH_VARARGS | METH_KEYWORDS, create_doc},
	{"open", (PyCFunction)(void (*)(void))client_open, METH_VARARGS | METH_KEYWORDS, open_doc},
	{"unlink", (PyCFunction)client_unlink, METH_VARARGS, unlink_doc},
	{"stat", (PyCFunction)client_stat, METH_VARARGS, stat_doc},
	{"list", (PyCFunction)client_list, METH_NOARGS, list_doc},
	{"status", (PyCFunction)client_status, METH_NOARGS, status_doc},
	{"shutdown_daemon", (PyCFunction)client_shutdown, METH_NOARGS, shutdown_doc},
	{"close", (PyCFunction)client_close, METH_NOARGS, close_doc},
	{"__enter__", client_enter, METH_NOARGS, "Return self."},
	{"__exit__", (PyCFunction)client_exit, METH_VARARGS, "close()."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
	{"error", (getter)client_get_error, NULL, "The daemon's message about the last request, or \"\".", NULL},
	{"closed", (getter)client_get_closed, NULL, "Whether close() was called.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(client_doc, "A connection to pinshmd, made by pinshm.connect().\n\n"
			 "It creates, opens, unlinks and describes channels by name; a context manager\n"
			 "that closes it.  Thread-safe; after fork() a child must connect by itself.");

static PyType_Slot client_slots[] = {
	{Py_tp_doc, (void *)client_doc},   {Py_tp_methods, client_methods}, {Py_tp_getset, client_getset},
	{Py_tp_dealloc, client_dealloc}, {0, NULL},
};

static PyType_Spec client_spec = {"pinshm.Client", sizeof(ClientObject), 0,
				   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, client_slots};

int pyshm_client_init(PyObject *module)
{
	pyshm_ClientType = pyshm_add_type(module, &client_spec, "Client");
	return pyshm_ClientType ? 0 : -1;
}
