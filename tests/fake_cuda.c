/*
 * fake_cuda.c - a test double of libcuda.so.1: the entry points that
 * libpinshm's CUDA backend calls, recording the calls and failing on
 * demand (fake_cuda.h), so that the backend's logic is tested where
 * there is no GPU.  It proves the wrapper's logic only.
 */
#include <stdint.h>
#include <string.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

enum {
	SUCCESS = 0,
	INVALID_VALUE = 1,
	NOT_INITIALIZED = 3,
	NO_DEVICE = 100,
	INVALID_DEVICE = 101,
	NOT_FOUND = 500,
	NOT_READY = 600,
	ALREADY_REGISTERED = 712,
	NOT_REGISTERED = 713,
	LAUNCH_FAILED = 719,
	NOT_SUPPORTED = 801,
};

EXPORT struct fake_cuda fake_cuda = { .devices = 1, .can_map = 1, .read_only = 1 };
static int initialised;

EXPORT int cuInit(unsigned flags)
{
	(void)flags;
	if (fake_cuda.devices == 0)
		return NO_DEVICE;
	initialised = 1;
	return SUCCESS;
}

EXPORT int cuDeviceGet(int *dev, int ordinal)
{
	if (!initialised)
		return NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= fake_cuda.devices)
		return INVALID_DEVICE;
	*dev = ordinal;
	return SUCCESS;
}

EXPORT int cuDeviceGetAttribute(int *v, int attr, int dev)
{
	(void)dev;
	*v = attr == 19 ? fake_cuda.can_map : attr == 113 ? fake_cuda.read_only : 0;
	return SUCCESS;
}

EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	*ctx = (void *)(uintptr_t)(0x1000 + dev);
	fake_cuda.ctx_retained++;
	return SUCCESS;
}

EXPORT int cuDevicePrimaryCtxRelease_v2(int dev)
{
	(void)dev;
	fake_cuda.ctx_retained--;
	return SUCCESS;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx)
{
	(void)ctx;
	fake_cuda.ctx_depth++;
	return SUCCESS;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx)
{
	*ctx = NULL;
	fake_cuda.ctx_depth--;
	return SUCCESS;
}

static int find_reg(const void *p)
{
	for (int i = 0; i < fake_cuda.nregs; i++)
		if ((const char *)p >= (char *)fake_cuda.regs[i].base &&
		    (const char *)p < (char *)fake_cuda.regs[i].base + fake_cuda.regs[i].size)
			return i;
	return -1;
}

EXPORT int cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
	fake_cuda.register_calls++;
	fake_cuda.last_flags = flags;
	if (fake_cuda.fail_register) {
		int r = fake_cuda.fail_register;
		fake_cuda.fail_register = 0;
		return r;
	}
	if (fake_cuda.ctx_depth <= 0)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT: no context current */
	if (flags & 0x08 && (fake_cuda.refuse_read_only || !fake_cuda.read_only))
		return NOT_SUPPORTED;
	if (fake_cuda.max_register && size > fake_cuda.max_register)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	if (find_reg(p) >= 0)
		return ALREADY_REGISTERED;
	if (fake_cuda.nregs == FAKE_MAX_REGS)
		return 2;
	fake_cuda.regs[fake_cuda.nregs].base = p;
	fake_cuda.regs[fake_cuda.nregs++].size = size;
	return SUCCESS;
}

EXPORT int cuMemHostUnregister(void *p)
{
	fake_cuda.unregister_calls++;
	for (int i = 0; i < fake_cuda.nregs; i++)
		if (fake_cuda.regs[i].base == p) {
			fake_cuda.regs[i] = fake_cuda.regs[--fake_cuda.nregs];
			return SUCCESS;
		}
	return NOT_REGISTERED;
}

EXPORT int cuMemHostGetDevicePointer_v2(unsigned long long *dptr, void *p, unsigned flags)
{
	int i = find_reg(p);

	if (flags != 0 || i < 0 || !fake_cuda.can_map)
		return INVALID_VALUE;
	if (fake_cuda.uva) {
		*dptr = (unsigned long long)(uintptr_t)p;
		return SUCCESS;
	}
	*dptr = FAKE_DPTR_BASE + (unsigned long long)i * 0x100000000ull +
		(unsigned long long)((char *)p - (char *)fake_cuda.regs[i].base);
	return SUCCESS;
}

EXPORT int cuEventQuery(void *ev)
{
	int *e = ev;

	return *e == FAKE_EVENT_DONE ? SUCCESS : *e == FAKE_EVENT_PENDING ? NOT_READY : LAUNCH_FAILED;
}

/* Waiting: the double completes the event (a device would, later). */
EXPORT int cuEventSynchronize(void *ev)
{
	int *e = ev;

	fake_cuda.syncs++;
	if (*e == FAKE_EVENT_PENDING && fake_cuda.sync_fails)
		return LAUNCH_FAILED;
	if (*e == FAKE_EVENT_PENDING && fake_cuda.on_sync)
		fake_cuda.on_sync();
	if (*e == FAKE_EVENT_PENDING)
		*e = FAKE_EVENT_DONE;
	return *e == FAKE_EVENT_DONE ? SUCCESS : LAUNCH_FAILED;
}

EXPORT int cuGetErrorName(int r, const char **name)
{
	*name = r == NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED" : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_OTHER";
	return SUCCESS;
}

static const struct {
	const char *name;
	void *fn;
} table[] = {
	{ "cuInit", (void *)cuInit },
	{ "cuDeviceGet", (void *)cuDeviceGet },
	{ "cuDeviceGetAttribute", (void *)cuDeviceGetAttribute },
	{ "cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain },
	{ "cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2 },
	{ "cuCtxPushCurrent", (void *)cuCtxPushCurrent_v2 },
	{ "cuCtxPopCurrent", (void *)cuCtxPopCurrent_v2 },
	{ "cuMemHostRegister", (void *)cuMemHostRegister_v2 },
	{ "cuMemHostUnregister", (void *)cuMemHostUnregister },
	{ "cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2 },
	{ "cuEventQuery", (void *)cuEventQuery },
	{ "cuEventSynchronize", (void *)cuEventSynchronize },
	{ "cuGetErrorName", (void *)cuGetErrorName },
};

EXPORT int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags, int *status)
{
	(void)flags;
	fake_cuda.get_proc_calls++;
	*fn = NULL;
	*status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
	if (fake_cuda.no_get_proc || version < 12000)
		return NOT_FOUND;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, symbol) == 0) {
			*fn = table[i].fn;
			*status = 0;
			return SUCCESS;
		}
	return NOT_FOUND;
}
