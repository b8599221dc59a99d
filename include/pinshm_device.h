/*
 * pinshm_device.h - the accelerator API of libpinshm: devices that read
 * records in place and write reservations by DMA (CUDA, OpenCL), the
 * registration of a handle's mapping with them, and releases and commits
 * that wait for a device's completion event.
 *
 * pinshm.h includes it: `#include <pinshm.h>` declares all of libpinshm.
 * Included alone, it includes pinshm.h (the channels it works on, the
 * rules of errors, threads and trust).
 */
#ifndef PINSHM_DEVICE_H
#define PINSHM_DEVICE_H

#include "pinshm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* ---- devices: accelerators that read and write records by DMA --------- */
/* ======================================================================== */

/*
 * A device's DMA engine can read a record in place and write into a
 * reservation, with no host copy, once the handle's mapping is registered
 * with it.  One build serves machines with and without accelerators: the
 * driver is loaded at run time (libcuda.so.1, libOpenCL.so.1); where it or
 * a device is missing the calls fail with -ENODEV or -ENOTSUP and a detail.
 *
 * Registration is per process and per handle (a driver pins the caller's
 * own mapping): each process that hands records to a device registers its
 * own handle.  Registering twice is harmless; pinshm_channel_unregister()
 * or pinshm_channel_close() releases it (close first waits for the events
 * of records still pending).  A child forked after registration inherits
 * none: its copy of the handle is not registered, and
 * pinshm_channel_forget() there makes no driver call.
 *
 * Records a device reads are released after the device is done: give the
 * copy's completion event to pinshm_release_after().  Records are released
 * in order, each once its own event and those of every record received
 * before it have completed; this is checked at each later receive and
 * release on the handle and by pinshm_release_poll().  While a release
 * waits, pinshm_release() of a later record waits with it, so that no
 * record is ever released under a running DMA.
 *
 * Threads: the rule at the top of pinshm.h.  Close a device after every
 * handle registered with it has unregistered or closed.
 */

typedef enum pinshm_device_kind {
	PINSHM_DEVICE_CUDA = 1,
	PINSHM_DEVICE_OPENCL = 2,
} pinshm_device_kind_t;

typedef struct pinshm_device pinshm_device_t;

/**
 * Open CUDA device @p ordinal through the driver API (libcuda.so.1, loaded
 * at the first call; the device's primary context, which the CUDA runtime
 * uses too).
 * @return 0; -ENODEV (no driver, no device, or @p ordinal out of range);
 *         -ENOTSUP (the driver lacks an entry point); -ENOMEM.
 *         pinshm_device_error() says why.
 */
PINSHM_EXPORT int pinshm_device_open_cuda(int ordinal, pinshm_device_t **out);

/**
 * Use OpenCL context @p context (a cl_context, retained until
 * pinshm_device_close()) through the ICD loader (libOpenCL.so.1, loaded
 * at run time).  Buffers are made in it, so its command queues and
 * kernels can use them.
 * @return 0; -ENODEV (no loader); -EINVAL (@p context NULL or not a
 *         context); -ENOMEM.  pinshm_device_error() says why.
 */
PINSHM_EXPORT int pinshm_device_open_opencl(void *context, pinshm_device_t **out);

/**
 * Close @p dev (NULL: nothing).
 * @return 0, or -EBUSY (a handle is still registered with it: nothing done).
 */
PINSHM_EXPORT int pinshm_device_close(pinshm_device_t *dev);

/** @return PINSHM_DEVICE_CUDA or PINSHM_DEVICE_OPENCL. */
PINSHM_EXPORT pinshm_device_kind_t pinshm_device_kind(const pinshm_device_t *dev);

/** @return why the last pinshm_device_open_*() of this thread failed, or "". */
PINSHM_EXPORT const char *pinshm_device_error(void);

/* Flags of pinshm_channel_register(). */
#define PINSHM_REGISTER_READ_ONLY 0x1u /* the device may only read (implied for a consumer) */
#define PINSHM_REGISTER_STRICT 0x2u    /* fail with -ENOTSUP rather than register writable where
					* the device cannot map read-only */

/**
 * Register handle @p ch's mapping of its channel with @p dev.  A consumer's
 * registration is read-only where the device supports it (CUDA:
 * CU_MEMHOSTREGISTER_READ_ONLY; OpenCL: CL_MEM_READ_ONLY), so that its
 * device cannot write the records others read; where it does not, the
 * mapping is registered writable (pinshm_channel_registered() says which)
 * unless PINSHM_REGISTER_STRICT is given.  Registering again with the same
 * device does nothing and returns 0.
 * @return 0; -EINVAL (bad flags); -ENOSPC (already with 4 devices);
 *         -ENOTSUP (read-only refused with PINSHM_REGISTER_STRICT); -ENOMEM,
 *         -EPERM or -EIO as the driver says; pinshm_channel_error() says why.
 */
PINSHM_EXPORT int pinshm_channel_register(pinshm_channel_t *ch, pinshm_device_t *dev, unsigned flags);

/**
 * Release @p ch's registration with @p dev, after waiting for the events of
 * its records still pending (they are released).
 * @return 0, or -ENOENT (not registered with it).
 */
PINSHM_EXPORT int pinshm_channel_unregister(pinshm_channel_t *ch, pinshm_device_t *dev);

/* What pinshm_channel_registered() returns. */
#define PINSHM_REGISTERED 0x1u
#define PINSHM_REGISTERED_READ_ONLY 0x2u /* the device cannot write it */

/** @return 0 (not registered with @p dev) or PINSHM_REGISTERED, with
 *  PINSHM_REGISTERED_READ_ONLY where the device may only read. */
PINSHM_EXPORT unsigned pinshm_channel_registered(const pinshm_channel_t *ch, const pinshm_device_t *dev);

/** Where a device finds a record. */
typedef struct pinshm_device_addr {
	uint64_t ptr;    /* CUDA: the device address (CUdeviceptr) of the bytes; 0 with OpenCL */
	void *buffer;    /* OpenCL: the cl_mem over the handle's mapping; NULL with CUDA */
	uint64_t offset; /* OpenCL: the bytes' offset in buffer (a kernel argument) */
} pinshm_device_addr_t;

/**
 * The device-side address of @p len bytes at @p p, in @p ch's mapping (a
 * record received in place, or a reservation), for kernels that read or
 * write mapped host memory directly.  OpenCL gives a buffer and an offset
 * rather than a sub-buffer, whose origin alignment most records miss.
 * @return 0; -ENOENT (not registered with @p dev); -EINVAL (outside the
 *         mapping); -ENOTSUP (CUDA: the device cannot map host memory).
 */
PINSHM_EXPORT int pinshm_device_addr(pinshm_channel_t *ch, pinshm_device_t *dev, const void *p, size_t len,
				     pinshm_device_addr_t *out);

/**
 * Release @p msg, received in place on consumer @p ch, once @p event (a
 * CUevent, or a cl_event) has completed and every record received before
 * it is released; checked now, at each later receive or release on @p ch,
 * and by pinshm_release_poll().  OpenCL: the event is retained until then
 * (release yours at will).  CUDA: the driver cannot retain an event:
 * neither destroy nor record it again until the record is released
 * (pinshm_release_poll() returns 0).  An event that reports a failed
 * command counts as completed: the device no longer touches the record.
 * On an overrun topic a record overwritten meanwhile is counted as lost
 * and handed out by pinshm_release_poll(), as is one released stale here
 * at once.
 * @return 0 (released, or queued); -ESTALE (released at once, and it had
 *         been overwritten); -EINVAL (@p msg not held, or already pending);
 *         -ENOENT (@p ch not registered with @p dev); or the error of the
 *         event's query.
 */
PINSHM_EXPORT int pinshm_release_after(pinshm_channel_t *ch, const pinshm_msg_t *msg, pinshm_device_t *dev,
				       void *event);

/**
 * Commit @p len bytes of @p ch's reservation (as pinshm_commit(ch, len, 0))
 * once @p event (a CUevent, or a cl_event) has completed: the event of
 * the device-to-host copy or the kernel that writes the reservation
 * (pinshm_device_addr()).  The record is never published while the device
 * may still write it: until the event completes, the handle keeps the
 * reservation, and pinshm_reserve(), pinshm_send(), pinshm_commit() and
 * pinshm_abort() on it fail with -EBUSY; each of them, and
 * pinshm_commit_poll(), commits it first where the event completed
 * meanwhile.  pinshm_channel_close() and pinshm_channel_unregister() wait
 * for the event and commit.  One reservation at a time per handle: a
 * pipeline of depth D uses D producer handles (each its own endpoint).
 * OpenCL: the event is retained until then.  CUDA: neither destroy nor
 * record the event again until the commit (pinshm_commit_poll() returns 0).
 * An event that reports a failed command drops the reservation (as
 * pinshm_abort()): -EIO, now or from the call that finds it.
 * @return 0 (committed, or to be); -EINVAL (not a producer, nothing
 *         reserved, @p len over the reservation, no event); -EBUSY (a
 *         commit waits already); -ENOENT (@p ch not registered with
 *         @p dev); -EIO; or the error of the event's query.
 */
PINSHM_EXPORT int pinshm_commit_after(pinshm_channel_t *ch, size_t len, pinshm_device_t *dev, void *event);

/**
 * Commit @p ch's reservation if it waits for an event that has completed
 * (pinshm_commit_after()).  Never blocks.
 * @return 0 (nothing waits: committed now, or none); 1 (its event is still
 *         pending); -EIO (the device's command failed: the reservation was
 *         dropped).
 */
PINSHM_EXPORT int pinshm_commit_poll(pinshm_channel_t *ch);

/**
 * Release the pending records whose events completed (in order), and hand
 * out those of them that were overwritten meanwhile (overrun topic): up to
 * @p max copies of their pinshm_msg_t (as received; the data is no longer
 * theirs) in @p stale, their number in *@p nstale (@p stale and @p nstale
 * may be NULL with @p max 0).  The handle remembers up to 64 stale records
 * between calls; older ones are only counted as lost.
 * @return the number of records still pending (>= 0), or -EBADMSG.
 */
PINSHM_EXPORT int pinshm_release_poll(pinshm_channel_t *ch, pinshm_msg_t *stale, unsigned max, unsigned *nstale);

#ifdef __cplusplus
}
#endif
#endif /* PINSHM_DEVICE_H */
