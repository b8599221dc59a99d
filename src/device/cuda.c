/*
 * cuda.c - the CUDA backend, through the driver API of libcuda.so.1,
 * loaded at run time (nothing of CUDA is linked into libpinshm).
 *
 * The few types and values used are declared here, as the driver's ABI
 * defines them, unless cuda.h is found at build time (configure), which
 * is then used and checked against those values.  Entry points are resolved with cuGetProcAddress_v2 (cuda.h
 * maps several names to _v2 entry points; asked by their plain names with
 * a CUDA version it gives those), or with dlsym() of the versioned names
 * where the driver predates it.  PINSHM_CUDA_LIBRARY names another library
 * to load (the test double of tests/).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <dlfcn.h>

#include "device/device.h"

#ifdef HAVE_CUDA_H
#include <cuda.h>
/* The values of the #else branch, checked where cuda.h is at hand. */
_Static_assert(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED == 712 && CUDA_ERROR_NOT_READY == 600 &&
		       CUDA_ERROR_NOT_SUPPORTED == 801 && CUDA_ERROR_NO_DEVICE == 100 &&
		       CUDA_ERROR_INVALID_DEVICE == 101 && CUDA_ERROR_NOT_PERMITTED == 800 &&
		       CUDA_ERROR_OUT_OF_MEMORY == 2 && CUDA_ERROR_INVALID_VALUE == 1 &&
		       CUDA_ERROR_NOT_INITIALIZED == 3 && CUDA_ERROR_DEINITIALIZED == 4,
	       "CUDA error codes");
_Static_assert(CU_MEMHOSTREGISTER_PORTABLE == 0x01 && CU_MEMHOSTREGISTER_DEVICEMAP == 0x02 &&
		       CU_MEMHOSTREGISTER_READ_ONLY == 0x08 && CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY == 19 &&
		       CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED == 113,
	       "CUDA flags and attributes");
_Static_assert(sizeof(CUdeviceptr) == sizeof(unsigned long long) && sizeof(CUdevice) == sizeof(int),
	       "CUDA types");
#else
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};
#define CU_MEMHOSTREGISTER_PORTABLE 0x01u
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02u
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08u
#define CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY 19
#define CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED 113
#endif
/* The API version whose entry points are asked for (12.0). */
#define CUDA_API_ASKED 12000

/* The driver's entry points, by plain name and by versioned symbol. */
struct cuda_api {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_attribute)(int *, int, CUdevice);
	CUresult (*ctx_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_release)(CUdevice);
	CUresult (*ctx_push)(CUcontext);
	CUresult (*ctx_pop)(CUcontext *);
	CUresult (*host_register)(void *, size_t, unsigned);
	CUresult (*host_unregister)(void *);
	CUresult (*host_device_ptr)(CUdeviceptr *, void *, unsigned);
	CUresult (*event_query)(CUevent);
	CUresult (*event_sync)(CUevent);
	CUresult (*error_name)(CUresult, const char **);
};

static const struct {
	const char *name, *symbol;
	size_t at;
} cuda_entries[] = {
	{ "cuInit", "cuInit", offsetof(struct cuda_api, init) },
	{ "cuDeviceGet", "cuDeviceGet", offsetof(struct cuda_api, device_get) },
	{ "cuDeviceGetAttribute", "cuDeviceGetAttribute", offsetof(struct cuda_api, device_attribute) },
	{ "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", offsetof(struct cuda_api, ctx_retain) },
	{ "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", offsetof(struct cuda_api, ctx_release) },
	{ "cuCtxPushCurrent", "cuCtxPushCurrent_v2", offsetof(struct cuda_api, ctx_push) },
	{ "cuCtxPopCurrent", "cuCtxPopCurrent_v2", offsetof(struct cuda_api, ctx_pop) },
	{ "cuMemHostRegister", "cuMemHostRegister_v2", offsetof(struct cuda_api, host_register) },
	{ "cuMemHostUnregister", "cuMemHostUnregister", offsetof(struct cuda_api, host_unregister) },
	{ "cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2", offsetof(struct cuda_api, host_device_ptr) },
	{ "cuEventQuery", "cuEventQuery", offsetof(struct cuda_api, event_query) },
	{ "cuEventSynchronize", "cuEventSynchronize", offsetof(struct cuda_api, event_sync) },
	{ "cuGetErrorName", "cuGetErrorName", offsetof(struct cuda_api, error_name) },
};

struct cuda_device {
	struct pinshm_device base;
	struct cuda_api api;
	CUdevice device;
	CUcontext ctx;   /* the device's primary context, retained */
	bool can_map;    /* cuMemHostGetDevicePointer works */
	bool read_only;  /* CU_MEMHOSTREGISTER_READ_ONLY is supported */
};

static struct cuda_device *cuda_of(struct pinshm_device *dev) { return (struct cuda_device *)dev; }

/* Driver errors, translated here and nowhere else. */
static int cuda_errno(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
		return -ENODEV;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EPERM;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	case CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Say in @p why that @p call failed with @p r.  @return its errno. */
static int cuda_fail(const struct cuda_api *api, CUresult r, const char *call, char *why)
{
	const char *name = NULL;

	if (!api->error_name || api->error_name(r, &name) != CUDA_SUCCESS || !name)
		name = "unknown error";
	snprintf(why, DEVICE_WHY, "%s: %s (%d)", call, name, r);
	return cuda_errno(r);
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);

static int cuda_resolve(void *lib, struct cuda_api *api)
{
	get_proc_fn get_proc = (get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");

	for (size_t i = 0; i < sizeof(cuda_entries) / sizeof(cuda_entries[0]); i++) {
		void *fn = NULL;
		int status = 0;
		if (get_proc && (get_proc(cuda_entries[i].name, &fn, CUDA_API_ASKED, 0, &status) != CUDA_SUCCESS ||
				 status != 0))
			fn = NULL;
		if (!fn)
			fn = dlsym(lib, cuda_entries[i].symbol);
		if (!fn)
			return device_open_fail(-ENOTSUP, "the CUDA driver has no %s", cuda_entries[i].symbol);
		memcpy((char *)api + cuda_entries[i].at, &fn, sizeof(fn));
	}
	return 0;
}

static int cuda_start(struct cuda_device *cd, int ordinal)
{
	struct cuda_api *api = &cd->api;
	char why[DEVICE_WHY];
	int v = 0;
	CUresult r = api->init(0);

	if (r != CUDA_SUCCESS)
		return device_open_fail(cuda_fail(api, r, "cuInit", why) == -EIO ? -EIO : -ENODEV, "CUDA: %s", why);
	r = api->device_get(&cd->device, ordinal);
	if (r != CUDA_SUCCESS) {
		cuda_fail(api, r, "cuDeviceGet", why);
		return device_open_fail(-ENODEV, "CUDA device %d: %s", ordinal, why);
	}
	r = api->ctx_retain(&cd->ctx, cd->device);
	if (r != CUDA_SUCCESS)
		return device_open_fail(cuda_fail(api, r, "cuDevicePrimaryCtxRetain", why), "%s", why);
	cd->can_map = api->device_attribute(&v, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, cd->device) ==
			      CUDA_SUCCESS && v;
	v = 0;
	cd->read_only = api->device_attribute(&v, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
					      cd->device) == CUDA_SUCCESS && v;
	return 0;
}

static const struct device_ops cuda_ops;

int cuda_open(int ordinal, struct pinshm_device **out)
{
#ifdef PINSHM_NO_CUDA
	(void)out;
	return device_open_fail(-ENOTSUP, "libpinshm was built without CUDA (--without-cuda), device %d", ordinal);
#endif
	if (ordinal < 0)
		return device_open_fail(-ENODEV, "CUDA device %d: no such ordinal", ordinal);
	void *lib = device_dlopen("PINSHM_CUDA_LIBRARY", "libcuda.so.1");
	if (!lib)
		return -ENODEV;
	struct cuda_device *cd = calloc(1, sizeof(*cd));
	if (!cd) {
		dlclose(lib);
		return device_open_fail(-ENOMEM, "no memory for a device");
	}
	int rc = cuda_resolve(lib, &cd->api);
	if (rc == 0)
		rc = cuda_start(cd, ordinal);
	if (rc != 0) {
		free(cd);
		dlclose(lib);
		return rc;
	}
	cd->base = (struct pinshm_device){ .ops = &cuda_ops, .kind = PINSHM_DEVICE_CUDA, .lib = lib };
	*out = &cd->base;
	return 0;
}

/* Register with @p flags in the primary context. */
static CUresult cuda_register_range(struct cuda_device *cd, void *base, size_t size, unsigned flags)
{
	CUcontext old;
	CUresult r = cd->api.ctx_push(cd->ctx);

	if (r != CUDA_SUCCESS)
		return r;
	r = cd->api.host_register(base, size, flags);
	cd->api.ctx_pop(&old);
	return r;
}

/* The smallest piece a mapping is split into where the driver refuses to
 * register it in one range (some drivers refuse very large ranges). */
#define CUDA_MIN_PIECE ((size_t)2 << 20)

/* Register [base, base + size) in pieces of @p piece bytes (the last one
 * shorter); where one fails, unregister those done. */
static CUresult cuda_register_pieces(struct cuda_device *cd, char *base, size_t size, size_t piece, unsigned flags)
{
	size_t done = 0;
	CUresult r = CUDA_SUCCESS;

	for (; done < size && r == CUDA_SUCCESS; done += piece)
		r = cuda_register_range(cd, base + done, size - done < piece ? size - done : piece, flags);
	if (r != CUDA_SUCCESS && done > piece) {
		CUcontext old;
		if (cd->api.ctx_push(cd->ctx) == CUDA_SUCCESS) {
			for (size_t at = 0; at + piece < done; at += piece)
				cd->api.host_unregister(base + at);
			cd->api.ctx_pop(&old);
		}
	}
	return r;
}

/* Register in pieces of @p piece bytes, read-only where *@p ro and the
 * driver takes it (else writable, *@p ro cleared). */
static CUresult cuda_register_as(struct cuda_device *cd, char *base, size_t size, size_t piece, unsigned flags,
				 bool *ro)
{
	CUresult res = cuda_register_pieces(cd, base, size, piece, flags | (*ro ? CU_MEMHOSTREGISTER_READ_ONLY : 0));
	if (res == CUDA_ERROR_NOT_SUPPORTED && *ro) {
		/* The attribute said yes, the call says no: fall back to writable. */
		*ro = false;
		res = cuda_register_pieces(cd, base, size, piece, flags);
	}
	return res;
}

/* The device address of the mapping's start, where every piece's lies at
 * the same distance from its host address (as with unified addressing),
 * so that one address and an offset reach any byte; else 0. */
static uint64_t cuda_mapping_dptr(struct cuda_device *cd, char *base, size_t size, size_t piece)
{
	CUdeviceptr first = 0, d = 0;

	if (!cd->can_map || cd->api.host_device_ptr(&first, base, 0) != CUDA_SUCCESS)
		return 0;
	for (size_t at = piece; at < size; at += piece)
		if (cd->api.host_device_ptr(&d, base + at, 0) != CUDA_SUCCESS || d != first + at)
			return 0;
	return first;
}

static int cuda_reg(struct pinshm_device *dev, void *base, size_t size, struct device_reg *r, char *why)
{
	struct cuda_device *cd = cuda_of(dev);
	unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (cd->can_map ? CU_MEMHOSTREGISTER_DEVICEMAP : 0);
	size_t piece = size;

	r->read_only = r->read_only && cd->read_only;
	CUresult res = cuda_register_as(cd, base, size, piece, flags, &r->read_only);
	while ((res == CUDA_ERROR_OUT_OF_MEMORY || res == CUDA_ERROR_INVALID_VALUE) && piece > CUDA_MIN_PIECE) {
		/* Refused as one range: in halves, rounded up to whole pieces. */
		piece = (piece / 2 + CUDA_MIN_PIECE - 1) / CUDA_MIN_PIECE * CUDA_MIN_PIECE;
		res = cuda_register_as(cd, base, size, piece, flags, &r->read_only);
	}
	if (res == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		/* Registered by the caller itself: used, never unregistered here. */
		r->borrowed = true;
		r->read_only = false;
		piece = size;
	} else if (res != CUDA_SUCCESS) {
		return cuda_fail(&cd->api, res, "cuMemHostRegister", why);
	}
	r->host = base;
	r->size = size;
	r->piece = piece;
	r->dptr = cuda_mapping_dptr(cd, base, size, piece);
	return 0;
}

static void cuda_unreg(struct pinshm_device *dev, struct device_reg *r)
{
	struct cuda_device *cd = cuda_of(dev);
	CUcontext old;

	if (r->borrowed || cd->api.ctx_push(cd->ctx) != CUDA_SUCCESS)
		return;
	for (size_t at = 0; at < r->size; at += r->piece)
		cd->api.host_unregister((char *)r->host + at);
	cd->api.ctx_pop(&old);
}

static int cuda_query(struct pinshm_device *dev, void *event, char *why)
{
	struct cuda_device *cd = cuda_of(dev);
	CUresult r = cd->api.event_query(event);

	if (r == CUDA_SUCCESS)
		return 1;
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	return cuda_fail(&cd->api, r, "cuEventQuery", why);
}

static void cuda_wait(struct pinshm_device *dev, void *event)
{
	cuda_of(dev)->api.event_sync(event);
}

/* The driver API cannot retain an event: the caller keeps it (pinshm-device(3)). */
static int cuda_retain(struct pinshm_device *dev, void *event, char *why)
{
	(void)dev;
	(void)event;
	(void)why;
	return 0;
}

static void cuda_drop(struct pinshm_device *dev, void *event)
{
	(void)dev;
	(void)event;
}

static void cuda_close(struct pinshm_device *dev)
{
	struct cuda_device *cd = cuda_of(dev);

	cd->api.ctx_release(cd->device);
	free(cd);
}

static const struct device_ops cuda_ops = {
	.name = "CUDA",
	.reg = cuda_reg,
	.unreg = cuda_unreg,
	.query = cuda_query,
	.wait = cuda_wait,
	.retain = cuda_retain,
	.drop = cuda_drop,
	.close = cuda_close,
};
