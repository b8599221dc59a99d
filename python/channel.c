/*
 * channel.c - pinshm.Channel: one endpoint of a channel (pinshm_channel_t).
 *
 * Calls that may wait run without the GIL, in slices of WAIT_SLICE_MS so
 * that a signal (Ctrl-C) is seen between them; the handle is marked busy
 * meanwhile (one thread at a time, the library's rule).
 */
#include "pyshm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100
#define RUN_ONCE INT_MIN /* run_waiting(): one call without the GIL */
#define RECV_STACK 4096 /* a copied message up to this long is received without a size probe */

PyObject *pyshm_ChannelType;

PyObject *pyshm_channel_new(pinshm_channel_t *ch, ClientObject *client, int role, const char *name)
{
	ChannelObject *self = PyObject_New(ChannelObject, (PyTypeObject *)pyshm_ChannelType);
	pinshm_channel_info_t info;

	if (!self) {
		pinshm_channel_close(ch);
		return NULL;
	}
	memset((char *)self + sizeof(PyObject), 0, sizeof(*self) - sizeof(PyObject));
	self->ch = ch;
	self->client = client;
	Py_XINCREF((PyObject *)client);
	self->pid = pyshm_pid();
	self->role = role;
	self->max_message = pinshm_channel_info(ch, &info) == 0 ? info.max_message : 0;
	snprintf(self->name, sizeof(self->name), "%s", name ? name : "");
	return (PyObject *)self;
}

int pyshm_channel_usable(ChannelObject *self)
{
	if (self->closed || !self->ch) {
		PyErr_SetString(PyExc_ValueError, "the channel is closed");
		return -1;
	}
	if (self->pid != pyshm_pid()) {
		PyErr_SetString(pyshm_Error, "this channel belongs to the parent process (fork): open it again");
		return -1;
	}
	if (pyshm_client_closed(self)) {
		pyshm_raise(-ENOTCONN, "the client it was opened through is closed, and its endpoint with it: open it again",
			    PYSHM_OTHER);
		return -1;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "the channel is in use by another thread (one thread at a time)");
		return -1;
	}
	if (self->release_err < 0) { /* a release when a Message went: reported once, here */
		int rc = self->release_err;
		self->release_err = 0;
		pyshm_raise(rc, "releasing a message dropped earlier failed (an overrun topic overwrote it while held)",
			    PYSHM_RECV);
		return -1;
	}
	return 0;
}

int pyshm_channel_reap(ChannelObject *self)
{
	if (!self->ch || self->busy || self->closed || self->pid != pyshm_pid() || pyshm_client_closed(self))
		return 0;
	if (self->abort_pending) {
		self->abort_pending = false;
		pinshm_abort(self->ch);
	}
	uint64_t k = self->first;
	while (k < self->end && self->held[k % PYSHM_MAX_HELD].obj == NULL)
		k++;
	if (k == self->first)
		return 0;
	/* One release for each run without events, one release_after() for
	 * each record with one (the library queues those behind a pending one).
	 * Busy meanwhile: dropping an event object may run Python code, whose
	 * calls on this channel must not reap the same records again. */
	int rc = 0;
	self->busy = true;
	for (uint64_t j = self->first; j < k; j++) {
		struct held_slot *s = &self->held[j % PYSHM_MAX_HELD];
		int r = 0;
		if (s->event)
			r = pyshm_release_slot_after(self, s);
		else if (j + 1 == k || self->held[(j + 1) % PYSHM_MAX_HELD].event)
			r = pinshm_release(self->ch, &s->msg);
		s->event = NULL;
		s->dev = NULL;
		if (r < 0 && rc == 0)
			rc = r;
	}
	self->first = k;
	self->busy = false;
	if (rc < 0)
		self->release_err = rc;
	if (self->ev_count > 0) /* keep the objects of the events still pending only */
		pyshm_channel_events_trim(self, pinshm_release_poll(self->ch, NULL, 0, NULL));
	return rc;
}

/* Raise for @p rc with the handle's detail: none for no room or nothing
 * in time, which the library gives none (its text is an earlier
 * failure's). */
static PyObject *chan_raise(ChannelObject *self, int rc, enum pyshm_side side)
{
	bool own = self->ch && rc != -EAGAIN && rc != -ETIMEDOUT;
	return pyshm_raise(rc, own ? pinshm_channel_error(self->ch) : "", side);
}

/* Unmap and free the handle (closing the endpoint where it is this
 * process's: a request to the daemon, made without the GIL), and drop the
 * client.  @return the close's result. */
static int chan_unmap(ChannelObject *self)
{
	int rc = 0;
	pinshm_channel_t *ch = self->ch;

	self->ch = NULL;
	if (ch && self->pid != pyshm_pid()) {
		pinshm_channel_forget(ch);
	} else if (ch) {
		ClientObject *c = self->client;
		if (c)
			c->users++;
		Py_BEGIN_ALLOW_THREADS
		rc = pinshm_channel_close(ch);
		Py_END_ALLOW_THREADS
		if (c)
			c->users--;
	}
	Py_CLEAR(self->client);
	pyshm_channel_devices_clear(self);
	return rc;
}

void pyshm_channel_obj_gone(ChannelObject *self)
{
	self->objs--;
	if (self->closed && self->objs == 0 && self->ch)
		chan_unmap(self);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A library call that may wait: the handle, its argument, a timeout. */
typedef int (*wait_op)(pinshm_channel_t *ch, void *arg, int ms);

/*
 * Run @p op with @p timeout_ms: at once with the GIL for PINSHM_NONBLOCK,
 * else once so, then (where it would wait) without it in slices, checking
 * signals in between; RUN_ONCE: once
 * without it (a call that waits for the daemon, not for the channel).
 * @return its result, or INT_MIN with an exception set (a signal).
 */
static int run_waiting(ChannelObject *self, wait_op op, void *arg, int timeout_ms)
{
	if (timeout_ms == 0) {
		int rc = op(self->ch, arg, 0);
		pyshm_channel_reap(self);
		return rc;
	}
	bool once = timeout_ms == RUN_ONCE;
	if (!once) { /* first without waiting, and so without giving up the GIL */
		int rc = op(self->ch, arg, 0);
		if (rc != -EAGAIN) {
			pyshm_channel_reap(self);
			return rc;
		}
	}
	uint64_t deadline = timeout_ms > 0 ? now_ms() + (uint64_t)timeout_ms : 0;
	int rc;
	for (;;) {
		int slice = WAIT_SLICE_MS;
		if (timeout_ms > 0) {
			uint64_t now = now_ms();
			uint64_t left = deadline > now ? deadline - now : 0;
			slice = left < WAIT_SLICE_MS ? (int)left : WAIT_SLICE_MS;
		}
		pinshm_channel_t *ch = self->ch;
		ClientObject *c = self->client;
		self->busy = true;
		if (c)
			c->users++;
		Py_BEGIN_ALLOW_THREADS
		rc = op(ch, arg, slice);
		Py_END_ALLOW_THREADS
		if (c)
			c->users--;
		self->busy = false;
		pyshm_channel_reap(self);
		if (once || (rc != -ETIMEDOUT && !(rc == -EAGAIN && slice == 0)))
			return rc;
		if (timeout_ms > 0 && now_ms() >= deadline)
			return -ETIMEDOUT;
		if (PyErr_CheckSignals() < 0)
			return INT_MIN;
		/* A signal handler may have closed the channel (or another thread taken it). */
		if (pyshm_channel_usable(self) < 0)
			return INT_MIN;
	}
}

/* ---- sending ---------------------------------------------------------- */

struct send_arg {
	const void *buf;
	size_t len;
};

static int op_send(pinshm_channel_t *ch, void *arg, int ms)
{
	struct send_arg *a = arg;
	return pinshm_send(ch, a->buf, a->len, ms);
}

PyDoc_STRVAR(send_doc, "send(data, timeout=None)\n\n"
		       "Copy the bytes-like data into the channel as one message (pinshm_send()).\n"
		       "timeout: None waits for room as long as needed, 0 never waits (pinshm.Full),\n"
		       "seconds waits that long (pinshm.Timeout).  pinshm.PeerGone: every consumer left.");

static PyObject *chan_send(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"data", "timeout", NULL};
	Py_buffer b;
	PyObject *tmo = Py_None;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|O:send", kwlist, &b, &tmo))
		return NULL;
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
	struct send_arg a = {b.buf, (size_t)b.len};
	int rc = run_waiting(self, op_send, &a, ms);
	PyBuffer_Release(&b);
	if (rc == INT_MIN)
		return NULL;
	if (rc < 0)
		return chan_raise(self, rc, PYSHM_SEND);
	Py_RETURN_NONE;
}

struct batch_arg {
	struct iovec *iov;
	unsigned n;
};

static int op_send_batch(pinshm_channel_t *ch, void *arg, int ms)
{
	struct batch_arg *a = arg;
	return pinshm_send_batch(ch, a->iov, a->n, ms);
}

PyDoc_STRVAR(send_batch_doc, "send_batch(messages, timeout=None) -> int\n\n"
			     "Send each bytes-like object of the sequence messages, in order, with one\n"
			     "wake-up for all (pinshm_send_batch()); the timeout applies to each wait.\n"
			     "Returns how many were sent (fewer after a partial send); raises if none was.");

static PyObject *chan_send_batch(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"messages", "timeout", NULL};
	PyObject *seq_arg, *tmo = Py_None, *seq;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:send_batch", kwlist, &seq_arg, &tmo))
		return NULL;
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0)
		return NULL;
	seq = PySequence_List(seq_arg);
	if (!seq)
		return NULL;
	Py_ssize_t n = PyList_Size(seq);
	if (n > (Py_ssize_t)UINT_MAX / 2) {
		Py_DECREF(seq);
		PyErr_SetString(PyExc_ValueError, "too many messages");
		return NULL;
	}
	Py_buffer *bufs = PyMem_Calloc((size_t)n + 1, sizeof(*bufs));
	struct iovec *iov = PyMem_Calloc((size_t)n + 1, sizeof(*iov));
	Py_ssize_t got = 0;
	PyObject *ret = NULL;
	if (!bufs || !iov) {
		PyErr_NoMemory();
		goto out;
	}
	for (; got < n; got++) {
		if (PyObject_GetBuffer(PyList_GetItem(seq, got), &bufs[got], PyBUF_SIMPLE) < 0)
			goto out;
		iov[got] = (struct iovec){bufs[got].buf, (size_t)bufs[got].len};
	}
	/* run_waiting() tries once without waiting, and waits in slices: a
	 * try that fills the ring part way returns how many went.  The rest
	 * waits as pinshm_send_batch() would, each wait up to the timeout,
	 * unless the call was not to wait at all. */
	unsigned done = 0;
	int rc = 0;
	do {
		if (pyshm_channel_usable(self) < 0) /* the sequence's code, or a finalizer, may have closed it */
			goto out;
		struct batch_arg a = {iov + done, (unsigned)n - done};
		rc = run_waiting(self, op_send_batch, &a, ms);
		if (rc == INT_MIN)
			goto out;
		if (rc > 0)
			done += (unsigned)rc;
	} while (rc > 0 && done < (unsigned)n && ms != 0);
	ret = done == 0 && rc < 0 ? chan_raise(self, rc, PYSHM_SEND) : PyLong_FromLong((long)done);
out:
	for (Py_ssize_t i = 0; i < got; i++)
		PyBuffer_Release(&bufs[i]);
	PyMem_Free(bufs);
	PyMem_Free(iov);
	Py_DECREF(seq);
	return ret;
}

struct reserve_arg {
	size_t len;
	void *buf;
};

static int op_reserve(pinshm_channel_t *ch, void *arg, int ms)
{
	struct reserve_arg *a = arg;
	return pinshm_reserve(ch, a->len, &a->buf, ms);
}

PyDoc_STRVAR(reserve_doc, "reserve(n, timeout=None) -> Reservation\n\n"
			  "Reserve room for a message of up to n bytes in the channel (pinshm_reserve())\n"
			  "and return it as a writable buffer: write into it, then commit() or abort().\n"
			  "As a context manager it commits on a normal exit and aborts on an exception.\n"
			  "One reservation at a time; timeout as send().");

static PyObject *chan_reserve(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"n", "timeout", NULL};
	Py_ssize_t n;
	PyObject *tmo = Py_None;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O:reserve", kwlist, &n, &tmo))
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "negative size");
		return NULL;
	}
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0)
		return NULL;
	if (self->resv) {
		PyErr_SetString(pyshm_Error, "a reservation is pending: commit() or abort() it first");
		return NULL;
	}
	struct reserve_arg a = {(size_t)n, NULL};
	int rc = run_waiting(self, op_reserve, &a, ms);
	if (rc == INT_MIN)
		return NULL;
	if (rc < 0)
		return chan_raise(self, rc, PYSHM_SEND);
	return pyshm_reservation_new(self, a.buf, a.len);
}

PyDoc_STRVAR(flush_doc, "flush()\n\nWake the receivers of messages committed with more=True (pinshm_flush()).");

static PyObject *chan_flush(ChannelObject *self, PyObject *unused)
{
	(void)unused;
	if (pyshm_channel_usable(self) < 0)
		return NULL;
	pinshm_flush(self->ch);
	Py_RETURN_NONE;
}

/* ---- receiving -------------------------------------------------------- */

struct recv_arg {
	void *buf;
	size_t cap, len;
};

static int op_recv(pinshm_channel_t *ch, void *arg, int ms)
{
	struct recv_arg *a = arg;
	return pinshm_recv(ch, a->buf, a->cap, &a->len, ms);
}

/* A message longer than RECV_STACK, whose length @p a->len the first try
 * learnt: received straight into a bytes object of that size. */
static PyObject *recv_long(ChannelObject *self, struct recv_arg *a, int *rc)
{
	for (;;) {
		PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)a->len);
		if (!b)
			return NULL;
		struct recv_arg big = {PyBytes_AsString(b), a->len, 0};
		*rc = op_recv(self->ch, &big, 0);
		if (*rc == 0 && big.len == a->len)
			return b;
		if (*rc == 0) { /* another consumer took it: this one is shorter */
			PyObject *s = PyBytes_FromStringAndSize(big.buf, (Py_ssize_t)big.len);
			Py_DECREF(b);
			return s;
		}
		Py_DECREF(b);
		if (*rc != -EMSGSIZE)
			return NULL;
		a->len = big.len;
	}
}

PyDoc_STRVAR(recv_doc, "recv(timeout=None) -> bytes\n\n"
		       "Receive the next message as a copy (pinshm_recv()).  timeout: None waits as long\n"
		       "as needed, 0 never waits (pinshm.Empty), seconds waits that long (pinshm.Timeout).\n"
		       "pinshm.PeerGone: empty and every producer has left.");

static PyObject *chan_recv(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *tmo = Py_None;
	char stack[RECV_STACK];
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:recv", kwlist, &tmo))
		return NULL;
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0)
		return NULL;
	for (;;) {
		struct recv_arg a = {stack, sizeof(stack), 0};
		int rc = run_waiting(self, op_recv, &a, ms);
		if (rc == INT_MIN)
			return NULL;
		if (rc == 0)
			return PyBytes_FromStringAndSize(stack, (Py_ssize_t)a.len);
		if (rc != -EMSGSIZE)
			return chan_raise(self, rc, PYSHM_RECV);
		PyObject *b = recv_long(self, &a, &rc);
		if (b || PyErr_Occurred())
			return b;
		if (rc != -EAGAIN) /* -EAGAIN: another consumer took it; wait again */
			return chan_raise(self, rc, PYSHM_RECV);
	}
}

/* Raise TooManyHeld unless the handle may hold one more record. */
static int check_room(ChannelObject *self)
{
	if (self->end - self->first < PYSHM_MAX_HELD)
		return 0;
	pyshm_raise(-ENOBUFS,
		    "64 messages are held in place (the library's limit), the oldest still referenced: "
		    "release() it or drop every reference to it",
		    PYSHM_RECV);
	return -1;
}

/* Take the @p n records of @p msgs received in place into the held list,
 * as Message objects.  @return a list of them, or NULL. */
static PyObject *hold_all(ChannelObject *self, const pinshm_msg_t *msgs, int n)
{
	/* Busy until every record is held: an allocation may run a finalizer
	 * that tries to close the channel, which would unmap the records. */
	self->busy = true;
	PyObject *l = PyList_New(0);

	for (int i = 0; i < n; i++) {
		uint64_t seq = self->end++;
		self->held[seq % PYSHM_MAX_HELD] = (struct held_slot){.msg = msgs[i], .obj = NULL};
		PyObject *m = l ? pyshm_message_new(self, seq) : NULL;
		if (m && PyList_Append(l, m) == 0) {
			Py_DECREF(m);
			continue;
		}
		Py_XDECREF(m);
		Py_CLEAR(l);
	}
	self->busy = false;
	pyshm_channel_reap(self); /* the slots of messages not made, if any */
	return l;
}

static int op_recv_inplace(pinshm_channel_t *ch, void *arg, int ms)
{
	return pinshm_recv_inplace(ch, arg, ms);
}

PyDoc_STRVAR(recv_inplace_doc,
	     "recv_inplace(timeout=None) -> Message\n\n"
	     "Receive the next message in place (pinshm_recv_inplace()): a Message exporting the\n"
	     "record read-only through the buffer protocol, released by release(), a with block,\n"
	     "or when its last reference goes.  Records go back to the library in the order\n"
	     "received, once each one and every earlier one is released; at most 64 are held\n"
	     "(pinshm.TooManyHeld).  timeout as recv().");

static PyObject *chan_recv_inplace(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *tmo = Py_None;
	pinshm_msg_t msg;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:recv_inplace", kwlist, &tmo))
		return NULL;
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0 || check_room(self) < 0)
		return NULL;
	int rc = run_waiting(self, op_recv_inplace, &msg, ms);
	if (rc == INT_MIN)
		return NULL;
	if (rc < 0)
		return chan_raise(self, rc, PYSHM_RECV);
	PyObject *l = hold_all(self, &msg, 1);
	if (!l)
		return NULL;
	PyObject *m = PyList_GetItem(l, 0);
	Py_INCREF(m);
	Py_DECREF(l);
	return m;
}

struct rbatch_arg {
	pinshm_msg_t *msgs;
	unsigned max;
};

static int op_recv_batch(pinshm_channel_t *ch, void *arg, int ms)
{
	struct rbatch_arg *a = arg;
	return pinshm_recv_batch(ch, a->msgs, a->max, ms);
}

PyDoc_STRVAR(recv_batch_doc, "recv_batch(max=64, timeout=None) -> list of Message\n\n"
			     "Receive up to max messages in place, waiting only for the first\n"
			     "(pinshm_recv_batch()); never more than the handle may still hold.");

static PyObject *chan_recv_batch(ChannelObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"max", "timeout", NULL};
	PyObject *tmo = Py_None;
	unsigned max = PYSHM_MAX_HELD;
	pinshm_msg_t msgs[PYSHM_MAX_HELD];
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&O:recv_batch", kwlist, pyshm_u32, &max, &tmo))
		return NULL;
	if (max == 0) {
		PyErr_SetString(PyExc_ValueError, "max must be at least 1");
		return NULL;
	}
	if (pyshm_timeout_ms(tmo, &ms) < 0 || pyshm_channel_usable(self) < 0 || check_room(self) < 0)
		return NULL;
	unsigned room = PYSHM_MAX_HELD - (unsigned)(self->end - self->first);
	struct rbatch_arg a = {msgs, max < room ? max : room};
	int rc = run_waiting(self, op_recv_batch, &a, ms);
	if (rc == INT_MIN)
		return NULL;
	if (rc < 0)
		return chan_raise(self, rc, PYSHM_RECV);
	return hold_all(self, msgs, rc);
}

/* ---- event loops, information ----------------------------------------- */

/* The wake-up calls, which may make a request through the client: arm
 * with @p arg non-NULL, else the descriptor. */
static int op_event(pinshm_channel_t *ch, void *arg, int ms)
{
	(void)ms;
	return arg ? pinshm_channel_arm(ch) : pinshm_channel_notify_fd(ch);
}

/* op_event() once without the GIL. @return its result, or INT_MIN with an exception set. */
static int event_call(ChannelObject *self, bool arm)
{
	if (pyshm_channel_usable(self) < 0)
		return INT_MIN;
	int rc = run_waiting(self, op_event, arm ? self : NULL, RUN_ONCE);
	if (rc < 0 && rc != INT_MIN && !(arm && rc == -EAGAIN)) {
		chan_raise(self, rc, PYSHM_OTHER);
		return INT_MIN;
	}
	return rc;
}

PyDoc_STRVAR(fileno_doc, "fileno() -> int\n\n"
			 "The consumer's wake-up descriptor (pinshm_channel_notify_fd()), for select,\n"
			 "selectors and asyncio: readable when a message is committed while armed\n"
			 "(arm()).  Owned by the channel: do not close it.");

static PyObject *chan_fileno(ChannelObject *self, PyObject *unused)
{
	(void)unused;
	int rc = event_call(self, false);
	return rc == INT_MIN ? NULL : PyLong_FromLong(rc);
}

PyDoc_STRVAR(arm_doc, "arm() -> bool\n\n"
		      "Arm the wake-up descriptor before sleeping on it (pinshm_channel_arm()).\n"
		      "True: armed, safe to wait for fileno() to be readable; False: a message is\n"
		      "ready, receive it (timeout=0) instead.  pinshm.PeerGone: empty and every\n"
		      "producer has left.");

static PyObject *chan_arm(ChannelObject *self, PyObject *unused)
{
	(void)unused;
	int rc = event_call(self, true);
	return rc == INT_MIN ? NULL : PyBool_FromLong(rc == 0);
}

PyDoc_STRVAR(info_doc, "info() -> dict\n\n"
		       "The channel as this handle sees it (pinshm_channel_info()): kind, flags,\n"
		       "capacity, max_message, max_producers, max_consumers, producers and consumers\n"
		       "attached, segment_size, lost (messages this handle lost to overruns),\n"
		       "endpoint, and held (records this handle holds in place).");

static PyObject *chan_info(ChannelObject *self, PyObject *unused)
{
	pinshm_channel_info_t i;

	(void)unused;
	if (pyshm_channel_usable(self) < 0)
		return NULL;
	int rc = pinshm_channel_info(self->ch, &i);
	if (rc < 0)
		return chan_raise(self, rc, PYSHM_OTHER);
	return Py_BuildValue("{s:s,s:I,s:K,s:I,s:I,s:I,s:I,s:I,s:K,s:K,s:I,s:K}", "kind",
			     i.kind == PINSHM_TOPIC ? "topic" : "queue", "flags", i.flags, "capacity",
			     (unsigned long long)i.capacity, "max_message", i.max_message, "max_producers",
			     i.max_producers, "max_consumers", i.max_consumers, "producers", i.producers, "consumers",
			     i.consumers, "segment_size", (unsigned long long)i.segment_size, "lost",
			     (unsigned long long)i.lost, "endpoint", pinshm_channel_endpoint(self->ch), "held",
			     (unsigned long long)(self->end - self->first));
}

PyDoc_STRVAR(set_spin_doc, "set_spin(ns)\n\nFix how long a wait polls before it sleeps, in nanoseconds "
			   "(pinshm_channel_set_spin(); 0: sleep at once).  By default the spin adapts, up to\n"
			   "50000 ns, and falls to nothing where spinning does not pay; SPIN_ADAPTIVE restores that.");

static PyObject *chan_set_spin(ChannelObject *self, PyObject *arg)
{
	uint64_t ns;

	if (!pyshm_u64(arg, &ns) || pyshm_channel_usable(self) < 0)
		return NULL;
	pinshm_channel_set_spin(self->ch, ns);
	Py_RETURN_NONE;
}

/* ---- closing ---------------------------------------------------------- */

PyDoc_STRVAR(close_doc, "close()\n\n"
			"Leave the channel (pinshm_channel_close()).  BufferError while a view\n"
			"(memoryview, array) of one of its records or of a reservation is alive.\n"
			"Messages still referenced are released and refuse new views; the mapping\n"
			"goes, and the endpoint leaves the channel, with the last of them.\n"
			"Closing twice does nothing.");

static PyObject *chan_close(ChannelObject *self, PyObject *unused)
{
	(void)unused;
	if (self->closed)
		Py_RETURN_NONE;
	if (self->pid == pyshm_pid()) {
		if (self->busy) {
			PyErr_SetString(PyExc_RuntimeError, "the channel is in use by another thread");
			return NULL;
		}
		if (self->views > 0) {
			PyErr_Format(PyExc_BufferError, "cannot close: %zd view(s) of its records are alive", self->views);
			return NULL;
		}
	}
	for (uint64_t s = self->first; s < self->end; s++)
		if (self->held[s % PYSHM_MAX_HELD].obj)
			pyshm_message_done(self->held[s % PYSHM_MAX_HELD].obj);
	pyshm_channel_reap(self);
	if (self->resv)
		pyshm_reservation_drop(self->resv);
	self->closed = true;
	if (self->objs > 0) {
		/* Unmapped when the last record object goes.  What was
		 * committed with more=True is not left unannounced meanwhile:
		 * the library's close would flush it. */
		if (self->role == PINSHM_PRODUCER && self->pid == pyshm_pid() && !pyshm_client_closed(self))
			pinshm_flush(self->ch);
		Py_RETURN_NONE;
	}
	int rc = chan_unmap(self);
	if (rc < 0)
		return pyshm_raise(rc, "closing the channel", PYSHM_OTHER);
	Py_RETURN_NONE;
}

static PyObject *chan_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Py_INCREF(self);
	return self;
}

static PyObject *chan_exit(ChannelObject *self, PyObject *args)
{
	(void)args;
	return chan_close(self, NULL);
}

static void chan_dealloc(ChannelObject *self)
{
	/* No record object is left (each holds the channel). */
	self->closed = true;
	chan_unmap(self);
	pyshm_free((PyObject *)self);
}

static PyObject *chan_get_closed(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(self->closed);
}

static PyObject *chan_get_role(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->role == PINSHM_PRODUCER ? "producer" : "consumer");
}

static PyObject *chan_get_name(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->name);
}

static PyObject *chan_get_error(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(self->ch ? pinshm_channel_error(self->ch) : "");
}

static PyObject *chan_get_max_message(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromSize_t(self->max_message);
}

static PyObject *chan_get_held(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(self->end - self->first);
}

static PyObject *chan_get_events(ChannelObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLong(self->ev_count);
}

static PyMethodDef chan_methods[] = {
	{"send", (PyCFunction)(void (*)(void))chan_send, METH_VARARGS | METH_KEYWORDS, send_doc},
	{"send_batch", (PyCFunction)(void (*)(void))chan_send_batch, METH_VARARGS | METH_KEYWORDS, send_batch_doc},
	{"reserve", (PyCFunction)(void (*)(void))chan_reserve, METH_VARARGS | METH_KEYWORDS, reserve_doc},
	{"flush", (PyCFunction)chan_flush, METH_NOARGS, flush_doc},
	{"recv", (PyCFunction)(void (*)(void))chan_recv, METH_VARARGS | METH_KEYWORDS, recv_doc},
	{"recv_inplace", (PyCFunction)(void (*)(void))chan_recv_inplace, METH_VARARGS | METH_KEYWORDS,
	 recv_inplace_doc},
	{"recv_batch", (PyCFunction)(void (*)(void))chan_recv_batch, METH_VARARGS | METH_KEYWORDS, recv_batch_doc},
	{"fileno", (PyCFunction)chan_fileno, METH_NOARGS, fileno_doc},
	{"arm", (PyCFunction)chan_arm, METH_NOARGS, arm_doc},
	{"info", (PyCFunction)chan_info, METH_NOARGS, info_doc},
	{"set_spin", (PyCFunction)chan_set_spin, METH_O, set_spin_doc},
	{"register", (PyCFunction)(void (*)(void))pyshm_channel_register, METH_VARARGS | METH_KEYWORDS,
	 pyshm_register_doc},
	{"unregister", (PyCFunction)pyshm_channel_unregister, METH_O, pyshm_unregister_doc},
	{"registered", (PyCFunction)pyshm_channel_registered, METH_O, pyshm_registered_doc},
	{"release_poll", (PyCFunction)pyshm_channel_release_poll, METH_NOARGS, pyshm_release_poll_doc},
	{"close", (PyCFunction)chan_close, METH_NOARGS, close_doc},
	{"__enter__", chan_enter, METH_NOARGS, "Return self."},
	{"__exit__", (PyCFunction)chan_exit, METH_VARARGS, "close()."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef chan_getset[] = {
	{"closed", (getter)chan_get_closed, NULL, "Whether close() was called.", NULL},
	{"role", (getter)chan_get_role, NULL, "'producer' or 'consumer'.", NULL},
	{"name", (getter)chan_get_name, NULL, "The channel's name.", NULL},
	{"error", (getter)chan_get_error, NULL, "The detail of the handle's last failure, or \"\".", NULL},
	{"max_message", (getter)chan_get_max_message, NULL, "The largest payload, in bytes.", NULL},
	{"held", (getter)chan_get_held, NULL, "Records held in place, released to the library or not yet.",
	 NULL},
	{"event_objects", (getter)chan_get_events, NULL,
	 "Event objects (release_after()) the handle holds for releases that may still be pending.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(chan_doc, "One endpoint of a channel, from Client.open().\n\n"
		       "A producer sends (send, send_batch, reserve); a consumer receives (recv,\n"
		       "recv_inplace, recv_batch) and may wait in an event loop (fileno, arm).\n"
		       "Used by one thread at a time; a context manager that closes it.");

static PyType_Slot chan_slots[] = {
	{Py_tp_doc, (void *)chan_doc},   {Py_tp_methods, chan_methods}, {Py_tp_getset, chan_getset},
	{Py_tp_dealloc, chan_dealloc}, {0, NULL},
};

static PyType_Spec chan_spec = {"pinshm.Channel", sizeof(ChannelObject), 0,
				Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, chan_slots};

int pyshm_channel_init(PyObject *module)
{
	pyshm_ChannelType = pyshm_add_type(module, &chan_spec, "Channel");
	return pyshm_ChannelType ? 0 : -1;
}
