/*
 * device.h - accelerators that read and write channels by DMA (private).
 *
 * A device (struct pinshm_device) is a backend's table of operations and
 * its state: CUDA (cuda.c, the driver API loaded at run time) or OpenCL
 * (opencl.c, the ICD loader loaded at run time).  A handle that uses
 * devices carries a struct device_state (ch->dev, NULL for every other
 * handle, so that the send and receive paths of those pay one test of a
 * pointer at most): its registrations (state.c, register.c), the records
 * whose release waits for a completion event (release.c) and the
 * reservation whose commit waits for one (commit.c).
 */
#ifndef PINSHM_DEVICE_PRIV_H
#define PINSHM_DEVICE_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "channel.h"

/* Devices one handle may be registered with at once. */
#define DEVICE_MAX_PER_HANDLE 4u
/* Stale records (overrun topic) kept for pinshm_release_poll(). */
#define DEVICE_MAX_STALE 64u

/* A backend's registration of one handle's mapping. */
struct device_reg {
	struct pinshm_device *dev;
	void *host;        /* the mapping registered */
	size_t size;       /* CUDA: its bytes */
	size_t piece;      /* CUDA: registered in pieces of this many bytes (the last
			    * one shorter): size where the driver took one range */
	uint64_t dptr;     /* CUDA: the device address of the mapping's start; 0: none */
	void *buffer;      /* OpenCL: the cl_mem over the mapping */
	bool read_only;    /* the device may not write it */
	bool borrowed;     /* CUDA: registered already by someone else: not ours to unregister */
};

struct device_ops {
	const char *name;
	/* Register [base, base + size): fill r (r->dev and r->read_only, the
	 * wish, set; read_only cleared where the device cannot).  0, or -errno
	 * with the detail in why.  Thread-safe, as every op. */
	int (*reg)(struct pinshm_device *dev, void *base, size_t size, struct device_reg *r, char *why);
	void (*unreg)(struct pinshm_device *dev, struct device_reg *r);
	/* 1: the event completed; 0: not yet; -EIO: its command failed (the
	 * device is done with the memory); another -errno: not an event. */
	int (*query)(struct pinshm_device *dev, void *event, char *why);
	/* Block until the event completed (or failed). */
	void (*wait)(struct pinshm_device *dev, void *event);
	/* Keep the event alive while it is queued (OpenCL), and let it go. */
	int (*retain)(struct pinshm_device *dev, void *event, char *why);
	void (*drop)(struct pinshm_device *dev, void *event);
	void (*close)(struct pinshm_device *dev);
};

/* An open device: the backend's state follows it (cuda.c, opencl.c). */
struct pinshm_device {
	const struct device_ops *ops;
	pinshm_device_kind_t kind;
	void *lib;         /* dlopen() handle of the driver */
	_Atomic unsigned users; /* handles registered with it */
};

/* Room for a backend's detail of a failure (the handle's error string). */
#define DEVICE_WHY 160

/* A record whose release waits (release.c). */
struct device_pending {
	pinshm_msg_t msg;  /* as received */
	struct pinshm_device *dev; /* whose event; NULL: none (a pinshm_release() deferred) */
	void *event;
};

/* The device side of one handle. */
struct device_state {
	pid_t pid;         /* the process that registered: a forked child has none of it */
	unsigned nregs;
	struct device_reg regs[DEVICE_MAX_PER_HANDLE];
	/* Pending releases, oldest record first (at most one per held record). */
	unsigned npending;
	struct device_pending pending[PINSHM_MAX_HELD];
	/* Producer: the reservation committed once this event completes
	 * (ch->reserved == RESV_DEVICE; commit.c). */
	struct device_pending_commit {
		struct pinshm_device *dev;
		void *event;
		size_t len;
	} commit;
	/* Records released stale since the last pinshm_release_poll(). */
	unsigned nstale;
	pinshm_msg_t stale[DEVICE_MAX_STALE];
};

/*
 * The units call one way: register.c (the top: registrations, and a
 * handle's close) calls commit.c and release.c, and all three call
 * state.c, which calls none of them.
 */

/* state.c (and device_fork_check(), device_info(), device_report_all():
 * channel.h) */
/** @p ch's device state, made (its pid this process's) where it has none;
 *  NULL: no memory. */
struct device_state *device_state_get(pinshm_channel_t *ch);
/** @p dev's registration in @p ds, or NULL (none, or a forked child's). */
struct device_reg *device_find_reg(struct device_state *ds, const struct pinshm_device *dev);
/** Tell the daemon of a registration made (+1) or dropped (-1), where the
 *  handle was opened through pinshmd (its control plane's device_report).
 *  @return 0, or its refusal. */
int device_report(pinshm_channel_t *ch, pinshm_device_kind_t kind, int delta);
/** Drop registration @p r of ch->dev (its events waited for already):
 *  unregister it and tell the daemon where @p call_driver. */
void device_drop_reg(pinshm_channel_t *ch, struct device_reg *r, bool call_driver);
/** Drop every registration (as device_drop_reg()) and free ch->dev, with
 *  no wait: the caller waited for the events, or they are a forked
 *  parent's (@p call_driver false). */
void device_state_free(pinshm_channel_t *ch, bool call_driver);

/* register.c: device_state_close(): release what is pending once
 * completed, then as device_state_forget(): in the process that
 * registered, wait for the pending events and unregister; in a forked
 * child, free the state with no driver call (channel.h). */

/* load.c */
/** An open begins: clear this thread's detail of a failed open. */
void device_open_begin(void);
/** Set this thread's detail of a failed open (pinshm_device_error(NULL)). @return err. */
int device_open_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** dlopen() @p env's library, else @p soname.  NULL: failed, detail set. */
void *device_dlopen(const char *env, const char *soname);

/* commit.c (and device_commit_progress(): channel.h) */
/** Wait for the event of a commit that waits, then commit (or drop the
 *  reservation where the command failed). */
void device_commit_drain(pinshm_channel_t *ch);
/** Wait for the event of a commit that waits, and forget it, uncommitted. */
void device_commit_forget(pinshm_channel_t *ch);

/* release.c (and device_progress(), device_release(): channel.h) */
/** Wait for every pending event, and release the records. */
void device_release_drain(pinshm_channel_t *ch);
/** Wait for every pending event and forget the records, unreleased. */
void device_release_forget(pinshm_channel_t *ch);

/* cuda.c, opencl.c: the backends' openers. */
int cuda_open(int ordinal, struct pinshm_device **out);
int opencl_open(void *context, struct pinshm_device **out);

#endif /* PINSHM_DEVICE_PRIV_H */
