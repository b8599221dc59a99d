/*
 * fake_cuda_feed.c - a test double of libcuda.so.1 for pinshm-feed's CUDA
 * backend (clients/feed_cuda.c) and the libpinshm calls it makes: device
 * memory is host memory, every stream runs its work at once, in order,
 * and the two PTX kernels run as C (feed_sum: the checksum, or the fill,
 * of clients/feed.h).  It proves the backend's logic (entry points,
 * slots, events, the checksum's path, no host copy) where there is no
 * GPU, not the PTX.  At exit it says on stderr how many host-to-device
 * copies read memory that was registered with cuMemHostRegister, and how
 * many did not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feed.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_REGS 64

enum { OK = 0, INVALID_VALUE = 1, NOT_FOUND = 500, ALREADY_REGISTERED = 712, NOT_REGISTERED = 713 };

struct event {
	double t;
};

static struct {
	void *base[MAX_REGS];
	size_t size[MAX_REGS];
	unsigned n;
} regs;
static unsigned long h2d_registered, h2d_other, launches;

static int registered(const void *p, size_t len)
{
	for (unsigned i = 0; i < regs.n; i++)
		if ((const char *)p >= (char *)regs.base[i] && (const char *)p + len <= (char *)regs.base[i] + regs.size[i])
			return 1;
	return 0;
}

__attribute__((destructor)) static void report(void)
{
	if (launches || h2d_registered || h2d_other)
		fprintf(stderr, "fake-cuda: h2d copies from registered memory %lu, from other memory %lu; %lu launches\n",
			h2d_registered, h2d_other, launches);
}

EXPORT int cuInit(unsigned f) { (void)f; return OK; }
EXPORT int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? OK : 101; }
EXPORT int cuDeviceGetAttribute(int *v, int attr, int d) { (void)d; *v = attr == 19 || attr == 113; return OK; }
EXPORT int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)0x10; return OK; }
EXPORT int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
EXPORT int cuCtxSetCurrent(void *c) { (void)c; return OK; }
EXPORT int cuCtxPushCurrent_v2(void *c) { (void)c; return OK; }
EXPORT int cuCtxPopCurrent_v2(void **c) { *c = NULL; return OK; }

EXPORT int cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
	(void)flags;
	if (registered(p, 1))
		return ALREADY_REGISTERED;
	if (regs.n == MAX_REGS)
		return INVALID_VALUE;
	regs.base[regs.n] = p;
	regs.size[regs.n++] = size;
	return OK;
}

EXPORT int cuMemHostUnregister(void *p)
{
	for (unsigned i = 0; i < regs.n; i++)
		if (regs.base[i] == p) {
			regs.base[i] = regs.base[--regs.n];
			regs.size[i] = regs.size[regs.n];
			return OK;
		}
	return NOT_REGISTERED;
}

EXPORT int cuMemHostGetDevicePointer_v2(unsigned long long *d, void *p, unsigned f)
{
	(void)f;
	*d = (uintptr_t)p;
	return registered(p, 1) ? OK : INVALID_VALUE;
}

EXPORT int cuModuleLoadData(void **m, const void *image)
{
	if (!strstr(image, ".entry feed_spin(") || !strstr(image, ".entry feed_sum("))
		return 218; /* CUDA_ERROR_INVALID_PTX */
	*m = (void *)0x20;
	return OK;
}

EXPORT int cuModuleGetFunction(void **f, void *m, const char *name)
{
	(void)m;
	*f = !strcmp(name, "feed_spin") ? (void *)1 : !strcmp(name, "feed_sum") ? (void *)2 : NULL;
	return *f ? OK : NOT_FOUND;
}

EXPORT int cuModuleUnload(void *m) { (void)m; return OK; }
EXPORT int cuMemAlloc_v2(unsigned long long *d, size_t n) { *d = (uintptr_t)malloc(n); return *d ? OK : 2; }
EXPORT int cuMemFree_v2(unsigned long long d) { free((void *)(uintptr_t)d); return OK; }
EXPORT int cuMemHostAlloc(void **p, size_t n, unsigned f) { (void)f; *p = malloc(n); return *p ? OK : 2; }
EXPORT int cuMemFreeHost(void *p) { free(p); return OK; }

EXPORT int cuMemsetD8Async(unsigned long long d, unsigned char v, size_t n, void *s)
{
	(void)s;
	memset((void *)(uintptr_t)d, v, n);
	return OK;
}

EXPORT int cuStreamCreate(void **s, unsigned f) { (void)f; *s = malloc(1); return OK; }
EXPORT int cuStreamDestroy_v2(void *s) { free(s); return OK; }
EXPORT int cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s, (void)e, (void)f; return OK; }
EXPORT int cuStreamSynchronize(void *s) { (void)s; return OK; }
EXPORT int cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, sizeof(struct event)); return OK; }
EXPORT int cuEventDestroy_v2(void *e) { free(e); return OK; }
EXPORT int cuEventQuery(void *e) { (void)e; return OK; }
EXPORT int cuEventSynchronize(void *e) { (void)e; return OK; }

EXPORT int cuEventRecord(void *e, void *s)
{
	struct timespec ts;

	(void)s;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	((struct event *)e)->t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	return OK;
}

EXPORT int cuEventElapsedTime(float *ms, void *a, void *b)
{
	*ms = (float)((((struct event *)b)->t - ((struct event *)a)->t) * 1e3);
	return OK;
}

EXPORT int cuMemcpyHtoDAsync_v2(unsigned long long d, const void *h, size_t n, void *s)
{
	(void)s;
	if (registered(h, n))
		h2d_registered++;
	else
		h2d_other++;
	memcpy((void *)(uintptr_t)d, h, n);
	return OK;
}

EXPORT int cuMemcpyDtoHAsync_v2(void *h, unsigned long long d, size_t n, void *s)
{
	(void)s;
	memcpy(h, (const void *)(uintptr_t)d, n);
	return OK;
}

/* feed_spin(ns) and feed_sum(payload, n, seed, acc, fill), run as C. */
EXPORT int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			  unsigned shmem, void *s, void **args, void **extra)
{
	(void)gy, (void)gz, (void)by, (void)bz, (void)shmem, (void)s, (void)extra;
	launches++;
	if (f == (void *)1)
		return gx == 1 && bx == 1 ? OK : INVALID_VALUE;
	if (f != (void *)2 || bx % 32 != 0 || gx == 0)
		return INVALID_VALUE;
	uint64_t *w = (uint64_t *)(uintptr_t) * (unsigned long long *)args[0];
	uint64_t n = *(unsigned long long *)args[1], seed = *(unsigned long long *)args[2], sum = 0;
	uint64_t *acc = (uint64_t *)(uintptr_t) * (unsigned long long *)args[3];
	for (uint64_t i = 0; i < n; i++) {
		if (*(unsigned *)args[4])
			w[i] = feed_word(seed, i);
		sum += feed_term(i, w[i]);
	}
	*acc += sum;
	return OK;
}

EXPORT int cuGetErrorName(int r, const char **name)
{
	*name = r == OK ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
	return OK;
}
