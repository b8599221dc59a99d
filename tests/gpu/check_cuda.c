/*
 * check_cuda.c - the CUDA backend against the real driver: exit 77
 * (skipped, saying why) where libcuda.so.1 or a GPU is missing.  The test
 * drives the device itself through the driver API, loaded at run time as
 * the library does (nothing of CUDA is linked).
 *
 * Cases: a record copied to the device in place (cuMemcpyHtoDAsync from
 * the channel) and released after the copy's event; the device address of
 * a record read back through the device; register and unregister of a
 * 4 MiB channel PINSHM_GPU_REGS times (default 1000) with the process's
 * locked memory flat.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pinshm.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*ctx_retain)(void **, int);
	CUresult (*ctx_set)(void *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*stream_create)(void **, unsigned);
	CUresult (*event_create)(void **, unsigned);
	CUresult (*event_record)(void *, void *);
	CUresult (*event_sync)(void *);
	CUresult (*htod_async)(CUdeviceptr, const void *, size_t, void *);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
} cu;

static int failures;

#define CHECK(cond, ...)                                                                        \
	do {                                                                                    \
		if (!(cond)) {                                                                  \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);                             \
			printf(__VA_ARGS__);                                                    \
			printf("\n");                                                           \
			failures++;                                                             \
			return;                                                                 \
		}                                                                               \
	} while (0)

static void *sym(void *lib, const char *name)
{
	void *fn = dlsym(lib, name);

	if (!fn) {
		printf("SKIP: the driver has no %s\n", name);
		exit(77);
	}
	return fn;
}

static void load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);

	if (!lib) {
		printf("SKIP: no CUDA driver (libcuda.so.1: %s)\n", dlerror());
		exit(77);
	}
	cu.ctx_retain = sym(lib, "cuDevicePrimaryCtxRetain");
	cu.ctx_set = sym(lib, "cuCtxSetCurrent");
	cu.mem_alloc = sym(lib, "cuMemAlloc_v2");
	cu.mem_free = sym(lib, "cuMemFree_v2");
	cu.stream_create = sym(lib, "cuStreamCreate");
	cu.event_create = sym(lib, "cuEventCreate");
	cu.event_record = sym(lib, "cuEventRecord");
	cu.event_sync = sym(lib, "cuEventSynchronize");
	cu.htod_async = sym(lib, "cuMemcpyHtoDAsync_v2");
	cu.dtoh = sym(lib, "cuMemcpyDtoH_v2");
}

static int channel(uint64_t capacity)
{
	pinshm_channel_attr_t attr;
	int fd = -1;

	pinshm_channel_attr_init(&attr);
	attr.capacity = capacity;
	attr.max_producers = 1;
	if (pinshm_segment_create(&attr, &fd) != 0) {
		printf("SKIP: pinshm_segment_create failed (memfd?)\n");
		exit(77);
	}
	return fd;
}

static void test_copy_in_place(pinshm_device_t *dev)
{
	int fd = channel(1 << 22);
	pinshm_channel_t *p, *c;
	pinshm_msg_t m;
	size_t len = 1 << 20;
	uint8_t *back = malloc(len), *src = malloc(len);
	CUdeviceptr d;
	void *stream, *ev;

	CHECK(pinshm_channel_attach(fd, PINSHM_PRODUCER, &p) == 0 && pinshm_channel_attach(fd, PINSHM_CONSUMER, &c) == 0,
	      "attach");
	int rc = pinshm_channel_register(c, dev, 0);
	CHECK(rc == 0, "register: %s: %s", pinshm_strerror(rc), pinshm_channel_error(c));
	printf("consumer registered %s\n",
	       pinshm_channel_registered(c, dev) & PINSHM_REGISTERED_READ_ONLY ? "read-only" : "writable (fallback)");
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	CHECK(pinshm_send(p, src, len, PINSHM_NONBLOCK) == 0, "send");
	CHECK(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK) == 0, "recv");
	CHECK(cu.mem_alloc(&d, len) == 0 && cu.stream_create(&stream, 1) == 0 && cu.event_create(&ev, 2) == 0,
	      "device memory, stream, event");
	CHECK(cu.htod_async(d, m.data, len, stream) == 0, "cuMemcpyHtoDAsync");
	CHECK(cu.event_record(ev, stream) == 0, "cuEventRecord");
	rc = pinshm_release_after(c, &m, dev, ev);
	CHECK(rc == 0, "release_after: %s", pinshm_strerror(rc));
	CHECK(cu.event_sync(ev) == 0, "cuEventSynchronize");
	CHECK(pinshm_release_poll(c, NULL, 0, NULL) == 0, "still pending after the copy");
	CHECK(cu.dtoh(back, d, len) == 0, "cuMemcpyDtoH");
	CHECK(memcmp(back, src, len) == 0, "the device's copy differs");

	/* The record's device address, read through the device. */
	CHECK(pinshm_send(p, src, 4096, PINSHM_NONBLOCK) == 0, "send");
	CHECK(pinshm_recv_inplace(c, &m, PINSHM_NONBLOCK) == 0, "recv");
	pinshm_device_addr_t a;
	rc = pinshm_device_addr(c, dev, m.data, m.len, &a);
	if (rc == -ENOTSUP) {
		printf("the device cannot map host memory: %s\n", pinshm_channel_error(c));
	} else {
		CHECK(rc == 0 && a.ptr != 0, "device address: %s", pinshm_strerror(rc));
		memset(back, 0, 4096);
		CHECK(cu.dtoh(back, a.ptr, 4096) == 0, "cuMemcpyDtoH from the mapped record");
		CHECK(memcmp(back, src, 4096) == 0, "the mapped record differs");
	}
	CHECK(pinshm_release(c, &m) == 0, "release");
	cu.mem_free(d);
	CHECK(pinshm_channel_close(c) == 0 && pinshm_channel_close(p) == 0, "close");
	close(fd);
	free(back);
	free(src);
	printf("ok: copy in place, release after the event, device address\n");
}

static long locked_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static void test_register_loop(pinshm_device_t *dev)
{
	const char *env = getenv("PINSHM_GPU_REGS");
	long n = env ? atol(env) : 1000;
	int fd = channel(1 << 22);
	pinshm_channel_t *c;

	CHECK(pinshm_channel_attach(fd, PINSHM_CONSUMER, &c) == 0, "attach");
	long before = locked_kib();
	for (long i = 0; i < n; i++) {
		int rc = pinshm_channel_register(c, dev, 0);
		CHECK(rc == 0, "register %ld: %s: %s", i, pinshm_strerror(rc), pinshm_channel_error(c));
		CHECK(pinshm_channel_unregister(c, dev) == 0, "unregister %ld", i);
	}
	long after = locked_kib();
	CHECK(after == before, "locked memory %ld kB before, %ld kB after", before, after);
	pinshm_channel_close(c);
	close(fd);
	printf("ok: %ld registrations of a 4 MiB channel, locked memory flat (%ld kB)\n", n, after);
}

int main(void)
{
	pinshm_device_t *dev;
	void *ctx;

	load_driver();
	int rc = pinshm_device_open_cuda(0, &dev);
	if (rc == -ENODEV) {
		printf("SKIP: no CUDA device: %s\n", pinshm_device_error());
		return 77;
	}
	if (rc != 0) {
		printf("FAIL: pinshm_device_open_cuda: %s: %s\n", pinshm_strerror(rc), pinshm_device_error());
		return 1;
	}
	if (cu.ctx_retain(&ctx, 0) != 0 || cu.ctx_set(ctx) != 0) {
		printf("FAIL: cannot make the primary context current\n");
		return 1;
	}
	test_copy_in_place(dev);
	test_register_loop(dev);
	pinshm_device_close(dev);
	return failures ? 1 : 0;
}
