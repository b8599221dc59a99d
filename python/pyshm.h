/*
 * pyshm.h - the _pinshm extension module: its types and shared helpers.
 *
 * Built against the stable ABI of Python 3.11 (Py_LIMITED_API), over the
 * public API of libpinshm only.
 *
 * Object graph (strong references point left to right, never back):
 *   Message, Reservation -> Channel -> Client
 *                           Channel -> Device (those it is registered with)
 * so that a channel outlives every record object that points into its
 * mapping, a client every channel opened through it, and a device every
 * registration with it.
 *
 * Memory safety: a buffer export (memoryview, numpy array...) holds its
 * Message or Reservation, which holds its Channel, whose mapping therefore
 * stays until the export is gone: Channel.close() with an export alive
 * raises BufferError, and with record objects alive but no export the
 * mapping is kept until the last of them goes (the endpoint's records are
 * released at close).  A released record refuses new exports.
 *
 * Threads: every call runs with the GIL held except the library call
 * itself where it may wait.  A channel is used by one thread at a time
 * (the library's rule): a call while another thread is inside one on the
 * same Channel raises RuntimeError.  Records dropped meanwhile are marked,
 * and released to the library when the channel is next free.
 *
 * fork(): objects inherited by a child belong to the parent's endpoints:
 * in the child their methods raise, and their deallocation forgets the
 * handle (pinshm_channel_forget()) without touching the channel.
 */
#ifndef PINSHM_PYSHM_H
#define PINSHM_PYSHM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pinshm.h"

#define PYSHM_MAX_HELD 64   /* records one handle holds in place (the library's limit) */
#define PYSHM_MAX_DEVICES 4 /* devices one handle registers with (the library's limit) */

typedef struct {
	PyObject_HEAD
	pinshm_client_t *c; /* NULL once closed */
	pid_t pid;          /* the process that connected */
	int users;          /* calls in progress without the GIL, on it or its channels */
} ClientObject;

typedef struct MessageObject MessageObject;
typedef struct ReservationObject ReservationObject;

/* A record the handle holds in place, in the order received. */
struct held_slot {
	pinshm_msg_t msg;
	MessageObject *obj;   /* borrowed; NULL once the message is done with */
	pinshm_device_t *dev; /* release_after(): released after event on dev; NULL: at once */
	void *event;
	PyObject *keep; /* strong: the object of event (torch.cuda.Event) until it goes to the library, or NULL */
};

typedef struct {
	PyObject_HEAD
	pinshm_device_t *dev;
	pid_t pid; /* the process that opened it */
} DeviceObject;

typedef struct {
	PyObject_HEAD
	pinshm_channel_t *ch; /* NULL once unmapped */
	ClientObject *client; /* strong, or NULL (closed with the channel) */
	pid_t pid;            /* the process that attached */
	int role;             /* PINSHM_PRODUCER or PINSHM_CONSUMER */
	bool busy;            /* a call runs without the GIL */
	bool closed;          /* close() was called: methods raise */
	Py_ssize_t objs;      /* Message and Reservation objects alive that point at it */
	Py_ssize_t views;     /* buffer exports alive of its records */
	size_t max_message;
	/* Records held in place: sequence numbers [first, end), slot seq % 64. */
	uint64_t first, end;
	struct held_slot held[PYSHM_MAX_HELD];
	ReservationObject *resv; /* borrowed: the pending reservation, or NULL */
	bool abort_pending;      /* a reservation dropped while the handle was busy: abort it when free */
	int release_err;         /* last error of a deferred release (negative errno), 0: the next call raises it */
	PyObject *devs[PYSHM_MAX_DEVICES]; /* strong: the Devices it is registered with, or NULL */
	/* Strong: the event objects of releases handed to the library, oldest
	 * first (a ring from ev_first).  The library releases in order, so the
	 * pending ones are the newest: trimmed to the pending count after each
	 * release, so that at most PYSHM_MAX_HELD are ever held. */
	PyObject *events[PYSHM_MAX_HELD];
	unsigned ev_first, ev_count;
	char name[PINSHM_NAME_MAX + 1];
} ChannelObject;

struct MessageObject {
	PyObject_HEAD
	ChannelObject *chan; /* strong */
	const void *data;
	size_t len;
	uint64_t lost;
	uint64_t seq;
	Py_ssize_t views;
	bool done;          /* released: no more exports, its slot is done with */
	bool release_after; /* release_after() was called: no more exports */
};

struct ReservationObject {
	PyObject_HEAD
	ChannelObject *chan; /* strong */
	void *data;
	size_t len;
	Py_ssize_t views;
	bool done; /* committed or aborted */
};

/* Types and exceptions, made at module init. */
extern PyObject *pyshm_ClientType, *pyshm_ChannelType, *pyshm_MessageType, *pyshm_ReservationType,
	*pyshm_DeviceType;
extern PyObject *pyshm_Error, *pyshm_Full, *pyshm_Empty, *pyshm_Timeout, *pyshm_PeerGone, *pyshm_Corrupt,
	*pyshm_TooManyHeld, *pyshm_Stale;

/* Which side of a channel a failure happened on, for -EAGAIN. */
enum pyshm_side { PYSHM_SEND, PYSHM_RECV, PYSHM_OTHER };

/** This process's id (cached; updated in a child after fork()). */
pid_t pyshm_pid(void);

/** Raise the exception for negative errno @p rc with @p detail ("" or NULL: none).
 *  @return NULL. */
PyObject *pyshm_raise(int rc, const char *detail, enum pyshm_side side);

/** Convert a timeout argument (None: forever, seconds >= 0) into
 *  milliseconds (-1: forever).  @return 0, or -1 with an exception set. */
int pyshm_timeout_ms(PyObject *arg, int *ms);
/** "O&" converters of an unsigned argument: any integer (__index__) in
 *  range, else OverflowError (a negative one too) or TypeError, not taken
 *  modulo the type's range as "K" and "I" would. */
int pyshm_u64(PyObject *arg, void *out); /* uint64_t */
int pyshm_u32(PyObject *arg, void *out); /* unsigned, at most UINT32_MAX */

/** Make the module's types; @return 0 or -1 with an exception set. */
int pyshm_client_init(PyObject *module);
int pyshm_channel_init(PyObject *module);
int pyshm_message_init(PyObject *module);
int pyshm_device_init(PyObject *module);

/* Devices (device.c): module functions, Channel and Message methods, and their docs. */
PyObject *pyshm_cuda_device(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *pyshm_opencl_device(PyObject *mod, PyObject *arg);
PyObject *pyshm_channel_register(ChannelObject *self, PyObject *args, PyObject *kw);
PyObject *pyshm_channel_unregister(ChannelObject *self, PyObject *arg);
PyObject *pyshm_channel_registered(ChannelObject *self, PyObject *arg);
PyObject *pyshm_channel_release_poll(ChannelObject *self, PyObject *unused);
PyObject *pyshm_message_release_after(MessageObject *m, PyObject *args, PyObject *kw);
extern const char pyshm_cuda_doc[], pyshm_opencl_doc[], pyshm_register_doc[], pyshm_unregister_doc[],
	pyshm_registered_doc[], pyshm_release_poll_doc[], pyshm_release_after_doc[];

/** Drop @p self's devices and held event objects (its handle is closed). */
void pyshm_channel_devices_clear(ChannelObject *self);

/** Hand the record of held slot @p s of @p self to the library with its
 *  event (pinshm_release_after()), keeping the slot's event object while
 *  the release is pending.  @return the library's result. */
int pyshm_release_slot_after(ChannelObject *self, struct held_slot *s);

/** Drop the event objects of @p self beyond the @p pending newest ones
 *  (a negative @p pending: none). */
void pyshm_channel_events_trim(ChannelObject *self, int pending);

/** A new Channel object for handle @p ch (owned from now on), of @p client
 *  (borrowed, NULL for none), in role @p role. @return NULL on failure
 *  (the handle is closed). */
PyObject *pyshm_channel_new(pinshm_channel_t *ch, ClientObject *client, int role, const char *name);

/** Raise unless @p self may be used now (open, this process's, not busy).
 *  @return 0, or -1 with an exception set. */
int pyshm_channel_usable(ChannelObject *self);
/* Whether the client the channel was opened through is closed: the daemon
 * reaped the endpoint with the connection and may have given it to
 * another open, so the handle must not send, receive, release or abort on
 * it any more (the library's close then only unmaps it). */
static inline bool pyshm_client_closed(const ChannelObject *self)
{
	return self->client && !self->client->c;
}

/** Where the handle is free: abort a reservation dropped while it was
 *  busy, and release to the library the longest run of done records at the
 *  head of @p self's held list. @return 0 or a negative errno. */
int pyshm_channel_reap(ChannelObject *self);

/** A record object's last reference went: drop its count on @p self, and
 *  unmap a closed channel once none is left. */
void pyshm_channel_obj_gone(ChannelObject *self);

/** New Message for slot @p seq of @p chan. */
PyObject *pyshm_message_new(ChannelObject *chan, uint64_t seq);

/** Raise BufferError unless message @p m may export its record (not
 *  released, no release_after()). @return 0 or -1. */
int pyshm_message_exportable(MessageObject *m);

/** New Reservation of @p len bytes at @p data in @p chan. */
PyObject *pyshm_reservation_new(ChannelObject *chan, void *data, size_t len);

/** Abort reservation @p r where the handle allows, and mark it done. */
void pyshm_reservation_drop(ReservationObject *r);

/** Mark message @p m done (no more exports) and drop its slot; the caller
 *  then calls pyshm_channel_reap(). */
void pyshm_message_done(MessageObject *m);

#define PYSHM_KDLCPU 1
#define PYSHM_KDLCUDAHOST 3

/* What a consumer asked __dlpack__() for. */
struct pyshm_dl_request {
	bool versioned;      /* max_version >= (1, 0): "dltensor_versioned" */
	bool copy;           /* copy=True: the tensor gets bytes of its own */
	int32_t device_type; /* PYSHM_KDLCPU or PYSHM_KDLCUDAHOST */
};

/* A tensor's place in its record. */
struct pyshm_dl_geometry {
	size_t offset; /* of its first byte in the record */
	int ndim;
	const int64_t *shape, *strides; /* strides in elements; NULL: C order */
	uint8_t code, bits;
};

/** Parse __dlpack__()'s keyword arguments (stream, max_version, dl_device,
 *  copy) into @p req: BufferError for a device other than the host.  It may
 *  run the caller's code (an integer's __index__), which may release or
 *  commit the record: check the record's state after it.
 *  @return 0, or -1 with an exception set. */
int pyshm_dlpack_request(PyObject *args, PyObject *kw, struct pyshm_dl_request *req);

/** A DLPack capsule of tensor @p g over the @p len bytes at @p base, the
 *  record of @p owner (a Message or Reservation, its exports counted in
 *  @p views, of channel @p chan), which the capsule holds (one export) until
 *  the tensor's deleter runs; with req->copy over a copy instead.  The
 *  caller checked that @p g lies within the record.  @return it, or NULL. */
PyObject *pyshm_dlpack_capsule(PyObject *owner, Py_ssize_t *views, ChannelObject *chan, void *base, size_t len,
			       bool read_only, const struct pyshm_dl_request *req, const struct pyshm_dl_geometry *g);

/** A whole record as one-dimensional uint8, for @p req (__dlpack__()). */
PyObject *pyshm_dlpack_bytes(PyObject *owner, Py_ssize_t *views, ChannelObject *chan, void *base, size_t len,
			     bool read_only, const struct pyshm_dl_request *req);

/** __dlpack_device__(): (kDLCPU, 0). */
PyObject *pyshm_dlpack_device(PyObject *self, PyObject *unused);

/** Make the type of @p spec and add it to @p module as @p name.
 *  @return the type (a reference kept for the module's globals), or NULL. */
PyObject *pyshm_add_type(PyObject *module, PyType_Spec *spec, const char *name);

/** Free a heap-type instance and its type reference. */
void pyshm_free(PyObject *self);

#endif
