/*
 * check_device.c - devices (pinshm-device(3)): the OpenCL backend for
 * real, on whatever OpenCL platform is installed (pocl on the CPU in CI),
 * and the CUDA backend's logic against the test double of libcuda.so.1
 * (tests/fake_cuda.c, loaded through PINSHM_CUDA_LIBRARY as the driver
 * would be: $PINSHM_FAKE_CUDA names it).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "fake_cuda.h"
#include "pinshm.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADDRESS_SANITIZER 1
#endif
#endif
#ifndef ADDRESS_SANITIZER
#define ADDRESS_SANITIZER 0
#endif

#ifdef HAVE_OPENCL_TEST
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

/* Fill the ring of producer @p p with messages of @p len bytes (numbered
 * from 0 in their first word) until it refuses one. @return how many. */
static unsigned fill(pinshm_channel_t *p, size_t len)
{
	uint8_t buf[4096] = { 0 };
	unsigned n = 0;

	ck_assert_uint_le(len, sizeof(buf));
	for (;; n++) {
		memcpy(buf, &n, sizeof(n));
		int rc = pinshm_send(p, buf, len, PINSHM_NONBLOCK);
		if (rc == -EAGAIN)
			return n;
		TU_RC(rc, 0);
	}
}

static int send_one(pinshm_channel_t *p, size_t len)
{
	uint8_t buf[4096] = { 0 };

	return pinshm_send(p, buf, len, PINSHM_NONBLOCK);
}

/* ======================================================================== */
/* The CUDA backend against the double. */

static struct fake_cuda *fake;

static void fake_setup(void)
{
	const char *path = getenv("PINSHM_FAKE_CUDA");

	ck_assert_msg(path && *path, "PINSHM_FAKE_CUDA is not set (run through make check)");
	setenv("PINSHM_CUDA_LIBRARY", path, 1);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(lib, "%s", dlerror());
	fake = dlsym(lib, "fake_cuda");
	ck_assert_ptr_nonnull(fake);
}

static pinshm_device_t *fake_open(void)
{
	pinshm_device_t *dev = NULL;

	TU_RC(pinshm_device_open_cuda(0, &dev), 0);
	ck_assert_int_eq(pinshm_device_kind(dev), PINSHM_DEVICE_CUDA);
	return dev;
}

START_TEST(test_cuda_no_driver)
{
	pinshm_device_t *dev = NULL;

	setenv("PINSHM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	TU_RC(pinshm_device_open_cuda(0, &dev), -ENODEV);
	ck_assert_msg(strstr(pinshm_device_error(), "cannot load"), "%s", pinshm_device_error());
	fake_setup();
	fake->devices = 0;
	TU_RC(pinshm_device_open_cuda(0, &dev), -ENODEV);
	ck_assert_msg(strstr(pinshm_device_error(), "cuInit"), "%s", pinshm_device_error());
	fake->devices = 1;
	TU_RC(pinshm_device_open_cuda(1, &dev), -ENODEV);
	ck_assert_msg(strstr(pinshm_device_error(), "cuDeviceGet"), "%s", pinshm_device_error());
	ck_assert_int_eq(fake->ctx_retained, 0);
}
END_TEST

/* Entry points through cuGetProcAddress_v2, or dlsym() where it finds none. */
START_TEST(test_cuda_loader)
{
	fake_setup();
	pinshm_device_t *dev = fake_open();
	ck_assert_int_ge(fake->get_proc_calls, 13);
	ck_assert_int_eq(fake->ctx_retained, 1);
	TU_RC(pinshm_device_close(dev), 0);
	ck_assert_int_eq(fake->ctx_retained, 0);
	fake->no_get_proc = 1;
	dev = fake_open();
	TU_RC(pinshm_device_close(dev), 0);
}
END_TEST

START_TEST(test_cuda_register)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();
	pinshm_device_addr_t a;

	ck_assert_uint_eq(pinshm_channel_registered(c, dev), 0);
	TU_RC(pinshm_device_addr(c, dev, NULL, 0, &a), -ENOENT);
	/* A consumer: read-only, portable, mapped. */
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_uint_eq(fake->last_flags, 0x01 | 0x02 | 0x08);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED | PINSHM_REGISTERED_READ_ONLY);
	TU_RC(pinshm_channel_register(c, dev, 0), 0); /* again: nothing */
	ck_assert_int_eq(fake->register_calls, 1);
	ck_assert_int_eq(fake->ctx_depth, 0);
	/* A producer: writable. */
	TU_RC(pinshm_channel_register(p, dev, 0), 0);
	ck_assert_uint_eq(fake->last_flags, 0x01 | 0x02);
	ck_assert_uint_eq(pinshm_channel_registered(p, dev), PINSHM_REGISTERED);
	TU_RC(pinshm_device_close(dev), -EBUSY);

	/* The device address of a record: the mapping's, plus its offset. */
	pinshm_msg_t m;
	TU_RC(send_one(p, 100), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_device_addr(c, dev, m.data, m.len, &a), 0);
	ck_assert_ptr_null(a.buffer);
	uint64_t base = a.ptr - (uint64_t)((const char *)m.data - (const char *)fake->regs[0].base);
	ck_assert_uint_eq(base, FAKE_DPTR_BASE);
	TU_RC(pinshm_device_addr(c, dev, (const char *)m.data - (1 << 20), 1, &a), -EINVAL);
	TU_RC(pinshm_release(c, &m), 0);

	TU_RC(pinshm_channel_unregister(c, dev), 0);
	TU_RC(pinshm_channel_unregister(c, dev), -ENOENT);
	ck_assert_int_eq(fake->unregister_calls, 1);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), 0);
	TU_RC(pinshm_channel_close(p), 0); /* closing releases it */
	ck_assert_int_eq(fake->unregister_calls, 2);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_device_close(dev), 0);
	TU_RC(pinshm_channel_close(c), 0);
	close(fd);
}
END_TEST

/* A mapping the driver refuses as one range is registered in pieces of
 * halved sizes (2 MiB at least), each unregistered at the end; device
 * addresses where the pieces' lie as one range (unified addressing). */
START_TEST(test_cuda_pieces)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 4 << 20, 1, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();
	pinshm_device_addr_t a;
	pinshm_msg_t m;

	fake->max_register = 3 << 20;
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_int_eq(fake->nregs, 3); /* 2 MiB, 2 MiB and the rest */
	for (int i = 0; i < fake->nregs; i++)
		ck_assert_uint_le(fake->regs[i].size, 2 << 20);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED | PINSHM_REGISTERED_READ_ONLY);
	TU_RC(send_one(p, 100), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	/* The double's pieces lie apart on the device: no single address. */
	TU_RC(pinshm_device_addr(c, dev, m.data, m.len, &a), -ENOTSUP);
	ck_assert_msg(strstr(pinshm_channel_error(c), "pieces"), "%s", pinshm_channel_error(c));
	TU_RC(pinshm_release(c, &m), 0);
	int calls = fake->unregister_calls;
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	ck_assert_int_eq(fake->unregister_calls - calls, 3);
	ck_assert_int_eq(fake->nregs, 0);

	/* Unified addressing: the device address is the host's. */
	fake->uva = 1;
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	TU_RC(send_one(p, 100), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_device_addr(c, dev, m.data, m.len, &a), 0);
	ck_assert_uint_eq(a.ptr, (uint64_t)(uintptr_t)m.data);
	TU_RC(pinshm_release(c, &m), 0);
	TU_RC(pinshm_channel_close(c), 0);
	ck_assert_int_eq(fake->nregs, 0);

	/* Below the smallest piece: the driver's error, nothing left registered. */
	fake->max_register = 1 << 20;
	TU_RC(pinshm_channel_register(p, dev, 0), -ENOMEM);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);

	/* Refused after some pieces (the double holds 16): those undone. */
	fd = tu_channel(PINSHM_QUEUE, 4 << 20, 10, 1); /* ten lanes of 4 MiB */
	c = tu_attach(fd, PINSHM_CONSUMER);
	dev = fake_open();
	fake->max_register = 3 << 20;
	TU_RC(pinshm_channel_register(c, dev, 0), -ENOMEM);
	ck_assert_int_eq(fake->nregs, 0);
	ck_assert_int_eq(fake->unregister_calls - calls, 3 + 3 + 16);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);
}
END_TEST

/* No driver-side leak: registrations made and released many times leave
 * none behind, and every context push is popped. */
START_TEST(test_cuda_register_loop)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 1 << 22, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();

	long locked = proc_status_value_kb(getpid(), "VmLck:");
	for (int i = 0; i < 10000; i++) {
		TU_RC(pinshm_channel_register(c, dev, 0), 0);
		TU_RC(pinshm_channel_unregister(c, dev), 0);
	}
	ck_assert_int_eq(proc_status_value_kb(getpid(), "VmLck:"), locked);
	ck_assert_int_eq(fake->register_calls, 10000);
	ck_assert_int_eq(fake->unregister_calls, 10000);
	ck_assert_int_eq(fake->nregs, 0);
	ck_assert_int_eq(fake->ctx_depth, 0);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	ck_assert_int_eq(fake->ctx_retained, 0);
	close(fd);
}
END_TEST

/* Read-only refused: writable instead, or -ENOTSUP with PINSHM_REGISTER_STRICT;
 * driver errors translated; a range registered by the caller itself is
 * used and left to it. */
START_TEST(test_cuda_fallback_errors)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev;

	fake->read_only = 0;
	dev = fake_open();
	TU_RC(pinshm_channel_register(c, dev, PINSHM_REGISTER_STRICT), -ENOTSUP);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_uint_eq(fake->last_flags, 0x01 | 0x02);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED);
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	TU_RC(pinshm_device_close(dev), 0);

	/* Supported by the attribute, refused by the call: writable. */
	fake->read_only = 1;
	fake->refuse_read_only = 1;
	dev = fake_open();
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED);
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	fake->refuse_read_only = 0;

	fake->fail_register = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	TU_RC(pinshm_channel_register(c, dev, 0), -ENOMEM);
	ck_assert_msg(strstr(pinshm_channel_error(c), "CUDA_ERROR_OUT_OF_MEMORY"), "%s", pinshm_channel_error(c));
	fake->fail_register = 800; /* CUDA_ERROR_NOT_PERMITTED */
	TU_RC(pinshm_channel_register(c, dev, 0), -EPERM);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), 0);

	/* Registered already (by the caller itself): used, not ours to unregister. */
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	void *base = fake->regs[0].base;
	size_t size = fake->regs[0].size;
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	int (*reg)(void *, size_t, unsigned) = (int (*)(void *, size_t, unsigned))dlsym(
		dlopen(getenv("PINSHM_FAKE_CUDA"), RTLD_NOW | RTLD_NOLOAD), "cuMemHostRegister_v2");
	ck_assert_ptr_nonnull(reg);
	fake->ctx_depth++;
	TU_RC(reg(base, size, 0), 0);
	fake->ctx_depth--;
	int unregs = fake->unregister_calls;
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED);
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	ck_assert_int_eq(fake->unregister_calls, unregs);
	ck_assert_int_eq(fake->nregs, 1);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);
}
END_TEST

/* While the double waits for an event at close: whether the producer
 * could reuse the room of the record that the event's copy reads. */
static pinshm_channel_t *sync_producer;
static int sync_send_rc;

static void try_send_at_sync(void)
{
	sync_send_rc = send_one(sync_producer, 1000);
}

/* Release after an event, in order; close waits for what is pending. */
START_TEST(test_cuda_release_after)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();
	int ev[3] = { FAKE_EVENT_PENDING, FAKE_EVENT_PENDING, FAKE_EVENT_PENDING };
	pinshm_msg_t m[3];

	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	unsigned n = fill(p, 1000);
	ck_assert_uint_ge(n, 3);
	for (int i = 0; i < 3; i++)
		TU_RC(pinshm_recv_inplace(c, &m[i], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_release_after(c, &m[0], NULL, &ev[0]), -ENOENT);
	TU_RC(pinshm_release_after(c, &m[0], dev, NULL), -EINVAL);
	for (int i = 0; i < 3; i++)
		TU_RC(pinshm_release_after(c, &m[i], dev, &ev[i]), 0);
	TU_RC(pinshm_release_after(c, &m[1], dev, &ev[1]), -EINVAL); /* pending already */
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 3);
	TU_RC(send_one(p, 1000), -EAGAIN);
	/* Out of order: the later ones wait for the first. */
	ev[2] = FAKE_EVENT_DONE;
	ev[1] = FAKE_EVENT_FAILED; /* a failed copy is over too */
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 3);
	TU_RC(send_one(p, 1000), -EAGAIN);
	ev[0] = FAKE_EVENT_DONE;
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 0);
	TU_RC(send_one(p, 1000), 0);

	/* Close waits for the pending event before releasing and unregistering:
	 * while it waits, the record's room is not the producer's. */
	while (pinshm_recv_inplace(c, &m[0], PINSHM_NONBLOCK) == 0)
		TU_RC(pinshm_release(c, &m[0]), 0);
	fill(p, 1000);
	TU_RC(pinshm_recv_inplace(c, &m[0], PINSHM_NONBLOCK), 0);
	ev[0] = FAKE_EVENT_PENDING;
	TU_RC(pinshm_release_after(c, &m[0], dev, &ev[0]), 0);
	sync_producer = p;
	sync_send_rc = 1;
	fake->on_sync = try_send_at_sync;
	TU_RC(pinshm_channel_close(c), 0);
	fake->on_sync = NULL;
	ck_assert_int_eq(fake->syncs, 1);
	TU_RC(sync_send_rc, -EAGAIN);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);
}
END_TEST

/* A queue of one producer and one consumer, both attached, and a device
 * of the double. */
struct fake_pair {
	int fd;
	pinshm_channel_t *p, *c;
	pinshm_device_t *dev;
};

static struct fake_pair fake_pair_open(void)
{
	struct fake_pair f;

	fake_setup();
	f.fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	f.p = tu_attach(f.fd, PINSHM_PRODUCER);
	f.c = tu_attach(f.fd, PINSHM_CONSUMER);
	f.dev = fake_open();
	return f;
}

/* A producer's reservation committed after the event of the copy that
 * fills it: never before (the record stays the handle's, and every call
 * that could publish or reuse its room says -EBUSY), then at the next
 * call or poll; a failed command drops it; close waits and commits. */
START_TEST(test_cuda_commit_after)
{
	struct fake_pair f = fake_pair_open();
	pinshm_channel_t *p = f.p, *c = f.c;
	pinshm_device_t *dev = f.dev;
	int ev = FAKE_EVENT_PENDING;
	pinshm_channel_info_t info;
	pinshm_msg_t m;
	void *room, *other;

	TU_RC(pinshm_reserve(p, 100, &room, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_commit_after(p, 100, dev, &ev), -ENOENT);
	TU_RC(pinshm_channel_register(p, dev, 0), 0);
	TU_RC(pinshm_commit_after(c, 100, dev, &ev), -EINVAL); /* a consumer */
	TU_RC(pinshm_commit_after(p, 101, dev, &ev), -EINVAL);
	TU_RC(pinshm_commit_after(p, 100, dev, NULL), -EINVAL);
	TU_RC(pinshm_commit_after(p, 100, dev, &ev), 0);
	TU_RC(pinshm_commit_after(p, 100, dev, &ev), -EBUSY);
	TU_RC(pinshm_channel_info(p, &info), 0);
	ck_assert_uint_eq(info.commit_waits, 1);
	/* The device still writes: nothing published, the room not reusable. */
	memset(room, 0x5a, 100);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_commit_poll(p), 1);
	TU_RC(pinshm_reserve(p, 100, &other, PINSHM_NONBLOCK), -EBUSY);
	TU_RC(send_one(p, 100), -EBUSY);
	TU_RC(pinshm_commit(p, 100, 0), -EBUSY);
	TU_RC(pinshm_abort(p), -EBUSY);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EAGAIN);
	/* Done: the poll commits it, with what the device wrote. */
	ev = FAKE_EVENT_DONE;
	TU_RC(pinshm_commit_poll(p), 0);
	TU_RC(pinshm_commit_poll(p), 0);
	TU_RC(pinshm_channel_info(p, &info), 0);
	ck_assert_uint_eq(info.commit_waits, 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 100);
	ck_assert_uint_eq(((const uint8_t *)m.data)[99], 0x5a);
	TU_RC(pinshm_release(c, &m), 0);

	/* Found by the next reserve: committed, then the new one made. */
	ev = FAKE_EVENT_PENDING;
	TU_RC(pinshm_reserve(p, 64, &room, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_commit_after(p, 64, dev, &ev), 0);
	ev = FAKE_EVENT_DONE;
	TU_RC(pinshm_reserve(p, 64, &room, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 64);
	TU_RC(pinshm_release(c, &m), 0);
	/* A failed command: dropped, never published. */
	ev = FAKE_EVENT_PENDING;
	TU_RC(pinshm_commit_after(p, 64, dev, &ev), 0);
	ev = FAKE_EVENT_FAILED;
	TU_RC(pinshm_commit_poll(p), -EIO);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_abort(p), -EINVAL); /* nothing reserved any more */
	/* An event done already: committed at once. */
	TU_RC(pinshm_reserve(p, 32, &room, PINSHM_NONBLOCK), 0);
	ev = FAKE_EVENT_DONE;
	TU_RC(pinshm_commit_after(p, 32, dev, &ev), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 32);
	TU_RC(pinshm_release(c, &m), 0);
	/* Close waits for the event, then commits. */
	TU_RC(pinshm_reserve(p, 48, &room, PINSHM_NONBLOCK), 0);
	ev = FAKE_EVENT_PENDING;
	TU_RC(pinshm_commit_after(p, 48, dev, &ev), 0);
	int syncs = fake->syncs;
	TU_RC(pinshm_channel_close(p), 0);
	ck_assert_int_eq(fake->syncs, syncs + 1);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 48);
	TU_RC(pinshm_release(c, &m), 0);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(f.fd);
}
END_TEST

/* A forked child's copy of a producer whose commit waits for the
 * parent's device: its close calls no driver and publishes nothing, its
 * reservation is lost to it (the parent's DMA writes there), and its own
 * registration is a fresh one.  The parent's commit goes on. */
START_TEST(test_cuda_commit_fork)
{
	struct fake_pair f = fake_pair_open();
	int ev = FAKE_EVENT_PENDING, status;
	pinshm_msg_t m;
	void *room;

	TU_RC(pinshm_channel_register(f.p, f.dev, 0), 0);
	TU_RC(pinshm_reserve(f.p, 100, &room, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_commit_after(f.p, 100, f.dev, &ev), 0);
	for (int k = 0; k < 2; k++) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0 && k == 0) {
			int rc = pinshm_channel_close(f.p);
			_exit(rc == 0 && fake->unregister_calls == 0 && fake->syncs == 0 ? 0 : 1);
		}
		if (pid == 0) {
			int calls = fake->register_calls;
			bool fresh = pinshm_channel_register(f.p, f.dev, 0) == 0 &&
				     fake->register_calls == calls + 1 &&
				     pinshm_channel_registered(f.p, f.dev) & PINSHM_REGISTERED;
			bool lost = pinshm_reserve(f.p, 16, &room, PINSHM_NONBLOCK) == -EIO &&
				    pinshm_commit(f.p, 100, 0) == -EIO && pinshm_abort(f.p) == -EIO;
			_exit(fresh && lost && fake->syncs == 0 ? 0 : 2);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: status %#x", k, status);
	}
	/* Nothing published, and the producer still the parent's (the child's
	 * close only unmapped its copy). */
	TU_RC(pinshm_recv_inplace(f.c, &m, PINSHM_NONBLOCK), -EAGAIN);
	ev = FAKE_EVENT_DONE;
	TU_RC(pinshm_commit_poll(f.p), 0);
	TU_RC(pinshm_recv_inplace(f.c, &m, PINSHM_NONBLOCK), 0);
	ck_assert_uint_eq(m.len, 100);
	TU_RC(pinshm_release(f.c, &m), 0);
	TU_RC(pinshm_channel_close(f.p), 0);
	TU_RC(pinshm_channel_close(f.c), 0);
	TU_RC(pinshm_device_close(f.dev), 0);
	close(f.fd);
}
END_TEST

/* Commit or abort of a reservation whose event has completed: it is
 * committed, and they say 0.  A wait for the event that fails leaves the
 * reservation lost (-EIO), never aborted: its room is never reused. */
START_TEST(test_cuda_commit_waits)
{
	struct fake_pair f = fake_pair_open();
	int ev = FAKE_EVENT_PENDING;
	pinshm_msg_t m;
	void *room;

	TU_RC(pinshm_channel_register(f.p, f.dev, 0), 0);
	for (int k = 0; k < 2; k++) {
		ev = FAKE_EVENT_PENDING;
		TU_RC(pinshm_reserve(f.p, 40 + k, &room, PINSHM_NONBLOCK), 0);
		TU_RC(pinshm_commit_after(f.p, 40 + k, f.dev, &ev), 0);
		ev = FAKE_EVENT_DONE;
		TU_RC(k ? pinshm_abort(f.p) : pinshm_commit(f.p, 40, 0), 0);
		TU_RC(pinshm_recv_inplace(f.c, &m, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m.len, 40 + k);
		TU_RC(pinshm_release(f.c, &m), 0);
	}
	ev = FAKE_EVENT_PENDING;
	TU_RC(pinshm_reserve(f.p, 64, &room, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_commit_after(f.p, 64, f.dev, &ev), 0);
	fake->sync_fails = 1;
	TU_RC(pinshm_channel_unregister(f.p, f.dev), 0);
	fake->sync_fails = 0;
	TU_RC(pinshm_reserve(f.p, 64, &room, PINSHM_NONBLOCK), -EIO);
	ck_assert_msg(strstr(pinshm_channel_error(f.p), "lost"), "%s", pinshm_channel_error(f.p));
	TU_RC(pinshm_commit(f.p, 64, 0), -EIO);
	TU_RC(pinshm_abort(f.p), -EIO);
	TU_RC(pinshm_recv_inplace(f.c, &m, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_channel_close(f.p), 0);
	TU_RC(pinshm_channel_close(f.c), 0);
	TU_RC(pinshm_device_close(f.dev), 0);
	close(f.fd);
}
END_TEST

/* pinshm_channel_info() lists a handle's devices, read-only or not. */
START_TEST(test_cuda_info)
{
	struct fake_pair f = fake_pair_open();
	pinshm_channel_t *p = f.p, *c = f.c;
	pinshm_device_t *dev = f.dev;
	pinshm_channel_info_t info;

	TU_RC(pinshm_channel_info(c, &info), 0);
	ck_assert_uint_eq(info.ndevices, 0);
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	TU_RC(pinshm_channel_register(p, dev, 0), 0);
	TU_RC(pinshm_channel_info(c, &info), 0);
	ck_assert_uint_eq(info.ndevices, 1);
	ck_assert_ptr_eq(info.devices[0].dev, dev);
	ck_assert_uint_eq(info.devices[0].kind, PINSHM_DEVICE_CUDA);
	ck_assert_uint_eq(info.devices[0].flags, PINSHM_REGISTERED | PINSHM_REGISTERED_READ_ONLY);
	TU_RC(pinshm_channel_info(p, &info), 0);
	ck_assert_uint_eq(info.ndevices, 1);
	ck_assert_uint_eq(info.devices[0].flags, PINSHM_REGISTERED);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) /* a forked child has none */
		_exit(pinshm_channel_info(c, &info) == 0 && info.ndevices == 0 ? 0 : 1);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	TU_RC(pinshm_channel_info(c, &info), 0);
	ck_assert_uint_eq(info.ndevices, 0);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(f.fd);
}
END_TEST

/* A forked child inherits no registration: forgetting its copy of the
 * handle makes no driver call. */
START_TEST(test_cuda_fork)
{
	fake_setup();
	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();
	int status;

	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pinshm_channel_forget(c);
		_exit(fake->unregister_calls == 0 && fake->syncs == 0 ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child called the driver");
	ck_assert_int_eq(fake->nregs, 1);
	TU_RC(pinshm_channel_close(c), 0);
	ck_assert_int_eq(fake->unregister_calls, 1);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);
}
END_TEST

/* A plain release behind a pending one waits with it; overrun topic:
 * records overwritten while the device read them are handed out stale. */
START_TEST(test_cuda_stale)
{
	fake_setup();
	pinshm_channel_attr_t attr;
	tu_attr(&attr, PINSHM_TOPIC, 4096, 1, 1);
	attr.flags = PINSHM_OVERRUN;
	int fd = tu_create(&attr);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	pinshm_device_t *dev = fake_open();
	int ev = FAKE_EVENT_PENDING;
	pinshm_msg_t m[2], stale[4];
	unsigned nstale = 99;

	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	TU_RC(send_one(p, 500), 0);
	TU_RC(send_one(p, 500), 0);
	TU_RC(pinshm_recv_inplace(c, &m[0], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_recv_inplace(c, &m[1], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_release_after(c, &m[0], dev, &ev), 0);
	TU_RC(pinshm_release(c, &m[1]), 0); /* queued behind m[0] */
	TU_RC(pinshm_release_poll(c, stale, 4, &nstale), 2);
	ck_assert_uint_eq(nstale, 0);
	for (int i = 0; i < 20; i++) /* laps the ring: both are overwritten */
		TU_RC(send_one(p, 500), 0);
	ev = FAKE_EVENT_DONE;
	TU_RC(pinshm_release_poll(c, stale, 4, &nstale), 0);
	ck_assert_uint_eq(nstale, 2);
	ck_assert_ptr_eq(stale[0].data, m[0].data);
	ck_assert_ptr_eq(stale[1].data, m[1].data);
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	close(fd);
}
END_TEST

/* ======================================================================== */
/* The OpenCL backend, for real. */

#ifdef HAVE_OPENCL_TEST
struct cl {
	cl_context ctx;
	cl_device_id device;
	cl_command_queue queue;
};

/* The first OpenCL device of the first platform; false (the test says
 * why and skips) where there is none. */
static bool cl_setup(struct cl *cl)
{
	cl_platform_id platform;
	cl_uint n = 0;
	cl_int err;

	if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0 ||
	    clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &cl->device, &n) != CL_SUCCESS || n == 0) {
		printf("SKIP: no OpenCL platform or device (Debian: pocl-opencl-icd)\n");
		return false;
	}
	cl->ctx = clCreateContext(NULL, 1, &cl->device, NULL, NULL, &err);
	ck_assert_int_eq(err, CL_SUCCESS);
	cl->queue = clCreateCommandQueue(cl->ctx, cl->device, 0, &err);
	ck_assert_int_eq(err, CL_SUCCESS);
	return true;
}

static void cl_teardown(struct cl *cl)
{
	clReleaseCommandQueue(cl->queue);
	clReleaseContext(cl->ctx);
}

START_TEST(test_opencl_register)
{
	struct cl cl;
	pinshm_device_t *dev = NULL;

	TU_RC(pinshm_device_open_opencl(NULL, &dev), -EINVAL);
	if (!cl_setup(&cl))
		return;
	setenv("PINSHM_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
	TU_RC(pinshm_device_open_opencl(cl.ctx, &dev), -ENODEV);
	ck_assert_msg(strstr(pinshm_device_error(), "cannot load"), "%s", pinshm_device_error());
	unsetenv("PINSHM_OPENCL_LIBRARY");
	TU_RC(pinshm_device_open_opencl(cl.ctx, &dev), 0);
	ck_assert_int_eq(pinshm_device_kind(dev), PINSHM_DEVICE_OPENCL);

	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_register(c, dev, 0x80), -EINVAL);
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	TU_RC(pinshm_channel_register(c, dev, 0), 0);
	ck_assert_uint_eq(pinshm_channel_registered(c, dev), PINSHM_REGISTERED | PINSHM_REGISTERED_READ_ONLY);
	TU_RC(pinshm_channel_register(p, dev, 0), 0);
	ck_assert_uint_eq(pinshm_channel_registered(p, dev), PINSHM_REGISTERED);

	/* The buffer lies over the mapping: a record is the buffer at an offset. */
	pinshm_msg_t m;
	pinshm_device_addr_t a;
	TU_RC(send_one(p, 64), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_device_addr(c, dev, m.data, m.len, &a), 0);
	ck_assert_ptr_nonnull(a.buffer);
	void *host = NULL;
	size_t size = 0;
	TU_RC(clGetMemObjectInfo(a.buffer, CL_MEM_HOST_PTR, sizeof(host), &host, NULL), CL_SUCCESS);
	TU_RC(clGetMemObjectInfo(a.buffer, CL_MEM_SIZE, sizeof(size), &size, NULL), CL_SUCCESS);
	ck_assert_ptr_eq((const char *)host + a.offset, m.data);
	ck_assert_uint_le(a.offset + m.len, size);
	cl_mem_flags flags = 0;
	TU_RC(clGetMemObjectInfo(a.buffer, CL_MEM_FLAGS, sizeof(flags), &flags, NULL), CL_SUCCESS);
	ck_assert(flags & CL_MEM_READ_ONLY && flags & CL_MEM_USE_HOST_PTR);
	TU_RC(pinshm_release(c, &m), 0);

	TU_RC(pinshm_device_close(dev), -EBUSY);
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	TU_RC(pinshm_channel_close(c), 0);
	close(fd);
	cl_teardown(&cl);
}
END_TEST

/* Each input record holds uint32 words; the kernel writes 2x+1 of each
 * into the output record, both addressed as buffer + byte offset. */
static const char *kernel_src =
	"__kernel void twice(__global const uchar *in, ulong in_off, __global uchar *out, ulong out_off)\n"
	"{\n"
	"	size_t i = get_global_id(0);\n"
	"	__global const uint *src = (__global const uint *)(in + in_off);\n"
	"	__global uint *dst = (__global uint *)(out + out_off);\n"
	"	dst[i] = src[i] * 2u + 1u;\n"
	"}\n";

#define WORDS 256u
#define RECORDS 40u

/* cl_setup(), the device over its context, and the kernel "twice" built
 * there (its program in *@p prog).  false: no OpenCL (skipped). */
static bool twice_setup(struct cl *cl, pinshm_device_t **dev, cl_program *prog, cl_kernel *kernel)
{
	cl_int err;

	if (!cl_setup(cl))
		return false;
	TU_RC(pinshm_device_open_opencl(cl->ctx, dev), 0);
	*prog = clCreateProgramWithSource(cl->ctx, 1, &kernel_src, NULL, &err);
	ck_assert_int_eq(err, CL_SUCCESS);
	TU_RC(clBuildProgram(*prog, 1, &cl->device, NULL, NULL, NULL), CL_SUCCESS);
	*kernel = clCreateKernel(*prog, "twice", &err);
	ck_assert_int_eq(err, CL_SUCCESS);
	return true;
}

START_TEST(test_opencl_kernel)
{
	struct cl cl;
	pinshm_device_t *dev;
	cl_program prog;
	cl_kernel k;

	if (!twice_setup(&cl, &dev, &prog, &k))
		return;

	/* in: records from a producer; out: records the device fills. */
	int in_fd = tu_channel(PINSHM_QUEUE, 64 * 1024, 1, 1), out_fd = tu_channel(PINSHM_QUEUE, 64 * 1024, 1, 1);
	pinshm_channel_t *in_p = tu_attach(in_fd, PINSHM_PRODUCER), *in_c = tu_attach(in_fd, PINSHM_CONSUMER);
	pinshm_channel_t *out_p = tu_attach(out_fd, PINSHM_PRODUCER), *out_c = tu_attach(out_fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_register(in_c, dev, 0), 0);
	TU_RC(pinshm_channel_register(out_p, dev, 0), 0);

	for (uint32_t r = 0; r < RECORDS; r++) {
		uint32_t words[WORDS];
		for (uint32_t i = 0; i < WORDS; i++)
			words[i] = r * 1000003u + i;
		TU_RC(pinshm_send(in_p, words, sizeof(words), PINSHM_FOREVER), 0);

		pinshm_msg_t m;
		void *room;
		pinshm_device_addr_t ia, oa;
		TU_RC(pinshm_recv_inplace(in_c, &m, PINSHM_FOREVER), 0);
		TU_RC(pinshm_reserve(out_p, sizeof(words), &room, PINSHM_FOREVER), 0);
		TU_RC(pinshm_device_addr(in_c, dev, m.data, m.len, &ia), 0);
		TU_RC(pinshm_device_addr(out_p, dev, room, sizeof(words), &oa), 0);
		cl_ulong io = ia.offset, oo = oa.offset;
		clSetKernelArg(k, 0, sizeof(cl_mem), &ia.buffer);
		clSetKernelArg(k, 1, sizeof(io), &io);
		clSetKernelArg(k, 2, sizeof(cl_mem), &oa.buffer);
		clSetKernelArg(k, 3, sizeof(oo), &oo);
		size_t global = WORDS;
		cl_event done;
		TU_RC(clEnqueueNDRangeKernel(cl.queue, k, 1, NULL, &global, NULL, 0, NULL, &done), CL_SUCCESS);
		clFlush(cl.queue);
		TU_RC(pinshm_release_after(in_c, &m, dev, done), 0);
		clReleaseEvent(done); /* the handle retained it */
		/* The output record is committed once the kernel finished. */
		TU_RC(clWaitForEvents(1, &done), CL_SUCCESS);
		TU_RC(pinshm_commit(out_p, sizeof(words), 0), 0);
	}
	TU_RC(pinshm_release_poll(in_c, NULL, 0, NULL), 0);
	for (uint32_t r = 0; r < RECORDS; r++) {
		pinshm_msg_t m;
		TU_RC(pinshm_recv_inplace(out_c, &m, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m.len, WORDS * 4);
		const uint32_t *w = m.data;
		for (uint32_t i = 0; i < WORDS; i++)
			ck_assert_uint_eq(w[i], (r * 1000003u + i) * 2u + 1u);
		TU_RC(pinshm_release(out_c, &m), 0);
	}
	TU_RC(pinshm_channel_close(in_c), 0);
	TU_RC(pinshm_channel_close(out_p), 0);
	TU_RC(pinshm_channel_close(in_p), 0);
	TU_RC(pinshm_channel_close(out_c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	clReleaseKernel(k);
	clReleaseProgram(prog);
	cl_teardown(&cl);
	close(in_fd);
	close(out_fd);
}
END_TEST

/* Release only after completion, in order: user events, which the test
 * completes when it likes.  While a record's event is pending its room is
 * not given back: the producer cannot reuse it. */
START_TEST(test_opencl_release_order)
{
	struct cl cl;
	pinshm_device_t *dev;
	cl_int err;

	if (!cl_setup(&cl))
		return;
	TU_RC(pinshm_device_open_opencl(cl.ctx, &dev), 0);
	int fd = tu_channel(PINSHM_QUEUE, 4096, 1, 1);
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER), *c = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_register(c, dev, 0), 0);

	unsigned n = fill(p, 900);
	ck_assert_uint_ge(n, 3);
	pinshm_msg_t m[3], extra;
	cl_event ev[3];
	for (int i = 0; i < 3; i++) {
		TU_RC(pinshm_recv_inplace(c, &m[i], PINSHM_NONBLOCK), 0);
		ev[i] = clCreateUserEvent(cl.ctx, &err);
		ck_assert_int_eq(err, CL_SUCCESS);
		TU_RC(pinshm_release_after(c, &m[i], dev, ev[i]), 0);
		clReleaseEvent(ev[i]); /* retained by the handle */
	}
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 3);
	TU_RC(send_one(p, 900), -EAGAIN);

	/* The last two complete first: nothing is released. */
	TU_RC(clSetUserEventStatus(ev[2], CL_COMPLETE), CL_SUCCESS);
	TU_RC(clSetUserEventStatus(ev[1], CL_COMPLETE), CL_SUCCESS);
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 3);
	TU_RC(send_one(p, 900), -EAGAIN);
	/* The first: all three go, at the next receive. */
	TU_RC(clSetUserEventStatus(ev[0], CL_COMPLETE), CL_SUCCESS);
	int rc = pinshm_recv_inplace(c, &extra, PINSHM_NONBLOCK);
	ck_assert(rc == 0 || rc == -EAGAIN);
	TU_RC(send_one(p, 900), 0);
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 0);
	if (rc == 0)
		TU_RC(pinshm_release(c, &extra), 0);

	/* First completes alone: only it goes; a plain release behind a
	 * pending one waits with it. */
	while (pinshm_recv_inplace(c, &extra, PINSHM_NONBLOCK) == 0)
		TU_RC(pinshm_release(c, &extra), 0);
	fill(p, 900);
	for (int i = 0; i < 3; i++) {
		TU_RC(pinshm_recv_inplace(c, &m[i], PINSHM_NONBLOCK), 0);
		ev[i] = clCreateUserEvent(cl.ctx, &err);
	}
	TU_RC(pinshm_release_after(c, &m[0], dev, ev[0]), 0);
	TU_RC(pinshm_release_after(c, &m[1], dev, ev[1]), 0);
	TU_RC(pinshm_release(c, &m[2]), 0);
	TU_RC(clSetUserEventStatus(ev[0], CL_COMPLETE), CL_SUCCESS);
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 2);
	TU_RC(clSetUserEventStatus(ev[1], CL_COMPLETE), CL_SUCCESS);
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 0);
	/* Completed already: released at once. */
	TU_RC(send_one(p, 900), 0);
	TU_RC(pinshm_recv_inplace(c, &m[0], PINSHM_NONBLOCK), 0);
	TU_RC(pinshm_release_after(c, &m[0], dev, ev[0]), 0);
	TU_RC(pinshm_release_poll(c, NULL, 0, NULL), 0);
	for (int i = 0; i < 2; i++)
		clReleaseEvent(ev[i]);
	clReleaseEvent(ev[2]);

	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_channel_close(p), 0);
	TU_RC(pinshm_device_close(dev), 0);
	cl_teardown(&cl);
	close(fd);
}
END_TEST

/* Device to host: a kernel writes each record in place in a reservation,
 * committed after the kernel's event; a pipeline of depth 2 takes two
 * producer handles.  A user event holds a commit back until it is set. */
START_TEST(test_opencl_commit_after)
{
	struct cl cl;
	pinshm_device_t *dev;
	cl_int err;
	cl_program prog;
	cl_kernel k;

	if (!twice_setup(&cl, &dev, &prog, &k))
		return;
	uint32_t words[RECORDS][WORDS];
	for (uint32_t r = 0; r < RECORDS; r++)
		for (uint32_t i = 0; i < WORDS; i++)
			words[r][i] = r * 1000003u + i;
	cl_mem in = clCreateBuffer(cl.ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(words), words, &err);
	ck_assert_int_eq(err, CL_SUCCESS);

	int fd = tu_channel(PINSHM_QUEUE, 64 * 1024, 2, 1);
	pinshm_channel_t *out[2] = { tu_attach(fd, PINSHM_PRODUCER), tu_attach(fd, PINSHM_PRODUCER) };
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	for (int h = 0; h < 2; h++)
		TU_RC(pinshm_channel_register(out[h], dev, 0), 0);

	/* Not committed while its event is pending. */
	cl_event user = clCreateUserEvent(cl.ctx, &err);
	ck_assert_int_eq(err, CL_SUCCESS);
	void *room;
	pinshm_msg_t m;
	TU_RC(pinshm_reserve(out[0], 16, &room, PINSHM_NONBLOCK), 0);
	memcpy(room, "held by an event", 16);
	TU_RC(pinshm_commit_after(out[0], 16, dev, user), 0);
	clReleaseEvent(user); /* the handle retained it */
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(pinshm_commit_poll(out[0]), 1);
	TU_RC(pinshm_reserve(out[0], 16, &room, PINSHM_NONBLOCK), -EBUSY);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EAGAIN);
	TU_RC(clSetUserEventStatus(user, CL_COMPLETE), CL_SUCCESS);
	TU_RC(pinshm_commit_poll(out[0]), 0);
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
	ck_assert(m.len == 16 && memcmp(m.data, "held by an event", 16) == 0);
	TU_RC(pinshm_release(c, &m), 0);

	cl_event last[2] = { NULL, NULL };
	for (uint32_t r = 0; r < RECORDS; r++) {
		int h = (int)(r % 2);
		if (last[h]) { /* depth 2: this handle's previous record is committed first */
			TU_RC(clWaitForEvents(1, &last[h]), CL_SUCCESS);
			TU_RC(pinshm_commit_poll(out[h]), 0);
			clReleaseEvent(last[h]);
		}
		pinshm_device_addr_t oa;
		TU_RC(pinshm_reserve(out[h], sizeof(words[0]), &room, PINSHM_FOREVER), 0);
		TU_RC(pinshm_device_addr(out[h], dev, room, sizeof(words[0]), &oa), 0);
		cl_ulong io = r * sizeof(words[0]), oo = oa.offset;
		clSetKernelArg(k, 0, sizeof(cl_mem), &in);
		clSetKernelArg(k, 1, sizeof(io), &io);
		clSetKernelArg(k, 2, sizeof(cl_mem), &oa.buffer);
		clSetKernelArg(k, 3, sizeof(oo), &oo);
		size_t global = WORDS;
		TU_RC(clEnqueueNDRangeKernel(cl.queue, k, 1, NULL, &global, NULL, 0, NULL, &last[h]), CL_SUCCESS);
		clFlush(cl.queue);
		TU_RC(pinshm_commit_after(out[h], sizeof(words[0]), dev, last[h]), 0);
	}
	/* Close waits for the last events and commits. */
	for (int h = 0; h < 2; h++) {
		TU_RC(pinshm_channel_close(out[h]), 0);
		clReleaseEvent(last[h]);
	}
	bool seen[RECORDS] = { false };
	for (uint32_t n = 0; n < RECORDS; n++) {
		TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), 0);
		ck_assert_uint_eq(m.len, WORDS * 4);
		const uint32_t *w = m.data;
		uint32_t r = (w[0] - 1u) / 2u / 1000003u;
		ck_assert(r < RECORDS && !seen[r]);
		seen[r] = true;
		for (uint32_t i = 0; i < WORDS; i++)
			ck_assert_uint_eq(w[i], (r * 1000003u + i) * 2u + 1u);
		TU_RC(pinshm_release(c, &m), 0);
	}
	TU_RC(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK), -EPIPE); /* every record seen; the producers left */
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	clReleaseMemObject(in);
	clReleaseKernel(k);
	clReleaseProgram(prog);
	cl_teardown(&cl);
	close(fd);
}
END_TEST

/* No leak: 10000 registrations and unregistrations of a 4 MiB channel
 * leave the process's locked and resident memory where they were. */
START_TEST(test_opencl_register_loop)
{
	struct cl cl;
	pinshm_device_t *dev;

	if (!cl_setup(&cl))
		return;
	TU_RC(pinshm_device_open_opencl(cl.ctx, &dev), 0);
	int fd = tu_channel(PINSHM_QUEUE, 4u << 20, 1, 1);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	TU_RC(pinshm_channel_register(c, dev, 0), 0); /* the runtime's first-use allocations, before counting */
	TU_RC(pinshm_channel_unregister(c, dev), 0);
	long locked = proc_status_value_kb(getpid(), "VmLck:"), rss = proc_status_value_kb(getpid(), "VmRSS:");
	for (int i = 0; i < 10000; i++) {
		TU_RC(pinshm_channel_register(c, dev, 0), 0);
		TU_RC(pinshm_channel_unregister(c, dev), 0);
	}
	long locked_after = proc_status_value_kb(getpid(), "VmLck:"), rss_after = proc_status_value_kb(getpid(), "VmRSS:");
	printf("opencl register loop: VmLck %ld -> %ld kB, VmRSS %ld -> %ld kB\n", locked, locked_after, rss, rss_after);
	ck_assert_int_eq(locked_after, locked);
#if ADDRESS_SANITIZER
	/* Its quarantine keeps what is freed resident: RSS says nothing here. */
	(void)rss_after;
#else
	ck_assert_msg(rss_after - rss < 1024, "VmRSS grew by %ld kB over 10000 registrations", rss_after - rss);
#endif
	TU_RC(pinshm_channel_close(c), 0);
	TU_RC(pinshm_device_close(dev), 0);
	cl_teardown(&cl);
	close(fd);
}
END_TEST
#endif /* HAVE_OPENCL_TEST */

/* ======================================================================== */
/* pinshmd: registrations it is told of, and channels next to a device. */

/* pinshm_stat() of @p name through @p c. */
static pinshm_list_entry_t stat_of(pinshm_client_t *c, const char *name)
{
	pinshm_list_entry_t e;

	CLIENT_RC(c, pinshm_stat(c, name, &e), 0);
	return e;
}

/* Return once the daemon's idle scan has run at least a pin_idle after
 * this call: a channel made now (@p attr) is unlocked by it, so any other
 * channel unused since before the call was looked at by then too. */
static void idle_scan_passed(pinshm_client_t *c, const pinshm_channel_attr_t *attr)
{
	CLIENT_RC(c, pinshm_create_full(c, "dev-witness", attr, 0600, PINSHM_PERSISTENT, PINSHM_NODE_ANY, 1), 0);
	wait_channel_state(c, "dev-witness", PINSHM_LIST_UNLOCKED, true, 10000);
	CLIENT_RC(c, pinshm_unlink(c, "dev-witness"), 0);
}

/* A channel with a short pin_idle is not unlocked while a handle of it is
 * registered with a device, is locked again by a registration, and is
 * unlocked once the last registration goes; STAT counts them; a client
 * that goes takes its counts with it. */
START_TEST(test_daemon_pin_idle)
{
	struct daemon d;
	struct daemon_opts o = {.log = true, .verbose = true};
	pinshm_channel_attr_t attr;
	pinshm_channel_t *rx, *tx;
	pinshm_client_t *other;

	fake_setup();
	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 256 * 1024, 1, 1);
	CLIENT_RC(c, pinshm_create_full(c, "dev-idle", &attr, 0600, PINSHM_PERSISTENT, PINSHM_NODE_ANY, 1), 0);
	pinshm_list_entry_t e = stat_of(c, "dev-idle");
	if (!(e.state & PINSHM_LIST_PINNED)) {
		printf("SKIP: channels not pinned here (RLIMIT_MEMLOCK): no working-set pinning to test\n");
		pinshm_disconnect(c);
		daemon_stop_ok(&d);
		return;
	}
	ck_assert_uint_eq(e.device_regs, 0);
	ck_assert_uint_eq(e.device_kinds, 0);
	CLIENT_RC(c, pinshm_open(c, "dev-idle", PINSHM_CONSUMER, &rx), 0);
	CLIENT_RC(c, pinshm_open(c, "dev-idle", PINSHM_PRODUCER, &tx), 0);
	pinshm_device_t *dev = fake_open();

	/* Unlocked after a second unused; a registration locks it again. */
	wait_channel_state(c, "dev-idle", PINSHM_LIST_UNLOCKED, true, 10000);
	TU_RC(pinshm_channel_register(rx, dev, 0), 0);
	e = stat_of(c, "dev-idle");
	ck_assert(!(e.state & PINSHM_LIST_UNLOCKED));
	ck_assert_uint_eq(e.device_regs, 1);
	ck_assert_uint_eq(e.device_kinds, 1u << PINSHM_DEVICE_CUDA);
	TU_RC(pinshm_channel_register(tx, dev, 0), 0);
	ck_assert_uint_eq(stat_of(c, "dev-idle").device_regs, 2);
	/* Registered and unused past its pin_idle (a channel made later was
	 * unlocked meanwhile): still locked. */
	idle_scan_passed(c, &attr);
	ck_assert_msg(!(stat_of(c, "dev-idle").state & PINSHM_LIST_UNLOCKED), "unlocked while registered");
	TU_RC(pinshm_channel_unregister(tx, dev), 0);
	ck_assert_uint_eq(stat_of(c, "dev-idle").device_regs, 1);
	idle_scan_passed(c, &attr);
	ck_assert_msg(!(stat_of(c, "dev-idle").state & PINSHM_LIST_UNLOCKED), "unlocked with one registration left");
	/* The last one goes: unlocked a pin_idle later. */
	uint64_t t0 = tu_now_ms();
	TU_RC(pinshm_channel_unregister(rx, dev), 0);
	e = stat_of(c, "dev-idle");
	ck_assert_uint_eq(e.device_regs, 0);
	ck_assert_uint_eq(e.device_kinds, 0);
	wait_channel_state(c, "dev-idle", PINSHM_LIST_UNLOCKED, true, 10000);
	ck_assert_uint_ge(tu_now_ms() - t0, 900);

	/* A connection that goes takes its counts: the channel idles again. */
	TU_RC(pinshm_channel_register(rx, dev, 0), 0);
	other = connect_ok(&d);
	ck_assert_uint_eq(stat_of(other, "dev-idle").device_regs, 1);
	CLIENT_RC(c, pinshm_create_full(c, "dev-keep", &attr, 0600, PINSHM_PERSISTENT, PINSHM_NODE_ANY, 1), 0);
	pinshm_disconnect(c); /* its handles stay registered in this process; the daemon forgets them */
	ck_assert_uint_eq(stat_of(other, "dev-idle").device_regs, 0);
	TU_RC(pinshm_channel_close(rx), 0); /* no connection: nothing to tell */
	TU_RC(pinshm_channel_close(tx), 0);

	/* Registering and unregistering many times leaves no count behind. */
	pinshm_channel_t *h;
	CLIENT_RC(other, pinshm_open(other, "dev-keep", PINSHM_CONSUMER, &h), 0);
	for (int i = 0; i < 1000; i++) {
		TU_RC(pinshm_channel_register(h, dev, 0), 0);
		TU_RC(pinshm_channel_unregister(h, dev), 0);
	}
	ck_assert_uint_eq(stat_of(other, "dev-keep").device_regs, 0);
	ck_assert_int_eq(fake->nregs, 0);
	TU_RC(pinshm_channel_register(h, dev, 0), 0);
	ck_assert_uint_eq(stat_of(other, "dev-keep").device_regs, 1);
	TU_RC(pinshm_channel_close(h), 0); /* closing unregisters, and says so */
	ck_assert_uint_eq(stat_of(other, "dev-keep").device_regs, 0);
	TU_RC(pinshm_device_close(dev), 0);
	pinshm_disconnect(other);
	daemon_stop_ok(&d);
}
END_TEST

/* A client that hands its channel back to a new daemon (a restart) tells
 * it of the channel's registrations again. */
START_TEST(test_daemon_restart)
{
	struct daemon d;
	struct daemon_opts o = {.log = true};
	pinshm_channel_attr_t attr;
	pinshm_channel_t *rx;

	fake_setup();
	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * 1024, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "dev-back", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_open(c, "dev-back", PINSHM_CONSUMER, &rx), 0);
	pinshm_device_t *dev = fake_open();
	TU_RC(pinshm_channel_register(rx, dev, 0), 0);
	ck_assert_uint_eq(stat_of(c, "dev-back").device_regs, 1);
	daemon_term_ok(&d);
	daemon_spawn(&d, &o);
	daemon_wait_ready(&d);
	CLIENT_RC(c, pinshm_reconnect(c), 0);
	pinshm_list_entry_t e = stat_of(c, "dev-back");
	ck_assert_uint_eq(e.device_regs, 1);
	ck_assert_uint_eq(e.device_kinds, 1u << PINSHM_DEVICE_CUDA);
	ck_assert(daemon_log_has(&d, "'dev-back' handed back"));
	TU_RC(pinshm_channel_unregister(rx, dev), 0);
	ck_assert_uint_eq(stat_of(c, "dev-back").device_regs, 0);
	TU_RC(pinshm_channel_close(rx), 0); /* adopted: not persistent, gone with it */
	TU_RC(pinshm_device_close(dev), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
}
END_TEST

/* Write @p value into DIR/bus/pci/devices/BUS/numa_node of a fake sysfs. */
static void fake_pci(const char *dir, const char *bus, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/bus", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/bus/pci", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/bus/pci/devices", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", dir, bus);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", dir, bus);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(value, f);
	fclose(f);
}

/* A channel made next to a PCI device lands on the device's node (a fake
 * sysfs, two test nodes); a device of node -1 places nothing; an unknown
 * or malformed bus id is refused. */
START_TEST(test_daemon_pci)
{
	struct daemon d;
	struct daemon_opts o = {.log = true, .verbose = true, .numa_env = true, .numa_nodes = "2"};
	pinshm_channel_attr_t attr;
	char sysfs[] = "/tmp/pinshm-sysfs-XXXXXX";

	ck_assert_ptr_nonnull(mkdtemp(sysfs));
	fake_pci(sysfs, "0000:3b:00.0", "1\n");
	fake_pci(sysfs, "0000:5e:00.0", "-1\n");
	fake_pci(sysfs, "0000:af:00.0", "7\n");
	fake_pci(sysfs, "0000:b0:00.0", "x\n");
	setenv("PINSHMD_TEST_SYSFS", sysfs, 1);
	daemon_start_opts(&d, &o);
	unsetenv("PINSHMD_TEST_SYSFS");
	pinshm_client_t *c = connect_ok(&d);
	tu_attr(&attr, PINSHM_QUEUE, 64 * 1024, 1, 1);

	CLIENT_RC(c, pinshm_create_near_pci(c, "near-gpu", &attr, 0600, 0, "0000:3b:00.0", PINSHM_PIN_DEFAULT), 0);
	ck_assert_int_eq(stat_of(c, "near-gpu").node, 1);
	ck_assert(daemon_log_has(&d, "'near-gpu' next to PCI device 0000:3b:00.0: node 1"));
	/* A domain of 8 digits is the same device: sysfs writes it in 4. */
	CLIENT_RC(c, pinshm_create_near_pci(c, "near-gpu8", &attr, 0600, 0, "00000000:3b:00.0", PINSHM_PIN_DEFAULT), 0);
	ck_assert_int_eq(stat_of(c, "near-gpu8").node, 1);
	CLIENT_RC(c, pinshm_create_near_pci(c, "no-node", &attr, 0600, 0, "0000:5e:00.0", PINSHM_PIN_DEFAULT), 0);
	ck_assert_int_eq(stat_of(c, "no-node").node, PINSHM_NODE_ANY);
	ck_assert(daemon_log_has(&d, "PCI device 0000:5e:00.0 has no NUMA node: no placement"));
	CLIENT_RC(c, pinshm_create_near_pci(c, "far-node", &attr, 0600, 0, "0000:af:00.0", PINSHM_PIN_DEFAULT), 0);
	ck_assert_int_eq(stat_of(c, "far-node").node, PINSHM_NODE_ANY);
	CLIENT_RC(c, pinshm_create_near_pci(c, "bad-node", &attr, 0600, 0, "0000:b0:00.0", PINSHM_PIN_DEFAULT), -EIO);
	CLIENT_RC(c, pinshm_create_near_pci(c, "absent", &attr, 0600, 0, "0000:3c:00.0", PINSHM_PIN_DEFAULT), -ENODEV);
	ck_assert_msg(strstr(pinshm_client_error(c), "no PCI device 0000:3c:00.0"), "%s", pinshm_client_error(c));
	static const char *const bad[] = { "0000:3B:00.0", "3b:00.0", "0000:3b:00.0/..", "../../../../etc/passwd",
					   "", "0000:3b:00.0\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CLIENT_RC(c, pinshm_create_near_pci(c, "bad", &attr, 0600, 0, bad[i], PINSHM_PIN_DEFAULT), -EINVAL);
	CLIENT_RC(c, pinshm_create_near_pci(c, "bad", &attr, 0600, 0, NULL, PINSHM_PIN_DEFAULT), -EINVAL);
	pinshm_list_entry_t e;
	CLIENT_RC(c, pinshm_stat(c, "bad", &e), -ENOENT);
	pinshm_disconnect(c);
	daemon_stop_ok(&d);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -r %s", sysfs);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *device_suite(void)
{
	Suite *s = suite_create("device");
	TCase *tc = tcase_create("cuda-double");

	tcase_add_test(tc, test_cuda_no_driver);
	tcase_add_test(tc, test_cuda_loader);
	tcase_add_test(tc, test_cuda_register);
	tcase_add_test(tc, test_cuda_register_loop);
	tcase_add_test(tc, test_cuda_pieces);
	tcase_add_test(tc, test_cuda_fallback_errors);
	tcase_add_test(tc, test_cuda_release_after);
	tcase_add_test(tc, test_cuda_fork);
	tcase_add_test(tc, test_cuda_commit_after);
	tcase_add_test(tc, test_cuda_commit_fork);
	tcase_add_test(tc, test_cuda_commit_waits);
	tcase_add_test(tc, test_cuda_info);
	tcase_add_test(tc, test_cuda_stale);
	suite_add_tcase(s, tc);
#ifdef HAVE_OPENCL_TEST
	tc = tcase_create("opencl");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_opencl_register);
	tcase_add_test(tc, test_opencl_kernel);
	tcase_add_test(tc, test_opencl_release_order);
	tcase_add_test(tc, test_opencl_commit_after);
	tcase_add_test(tc, test_opencl_register_loop);
	suite_add_tcase(s, tc);
#else
	printf("SKIP: OpenCL tests (built without CL/cl.h and the ICD loader)\n");
#endif
	tc = tcase_create("daemon");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_daemon_pin_idle);
	tcase_add_test(tc, test_daemon_pci);
	tcase_add_test(tc, test_daemon_restart);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Forked: each test loads the double afresh. */
	return tu_run_suite(device_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
