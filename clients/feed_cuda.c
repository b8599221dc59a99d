/*
 * feed_cuda.c - pinshm-feed's CUDA backend, through its own table of
 * driver entry points (libcuda.so.1 loaded at run time, resolved with
 * cuGetProcAddress, else dlsym of the versioned names; nothing links
 * CUDA).  Device 0's primary context (the one pinshm registers in), a copy
 * stream and a compute stream, a device buffer per slot.  The kernels are
 * PTX text, loaded with cuModuleLoadData (the driver compiles it for the
 * device): feed_spin waits on %globaltimer for a given number of
 * nanoseconds (so --kernel-us needs no calibration beyond a check);
 * feed_sum computes the batch checksum over the device's copy (or, with
 * pfill, generates the payload and its checksum), each thread over a
 * grid-strided share of the words, reduced by warp shuffles and one
 * 64-bit atomic add per warp into the slot's accumulator.
 * PINSHM_CUDA_LIBRARY names another library to load, as for libpinshm.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_MEMHOSTALLOC_PORTABLE 0x1u
#define CUDA_API_ASKED 12000
#define SUM_BLOCKS 256u
#define SUM_THREADS 256u

static const char ptx[] =
	".version 7.0\n"
	".target sm_70\n"
	".address_size 64\n"
	"\n"
	".visible .entry feed_spin(.param .u64 ns)\n"
	"{\n"
	"\t.reg .pred %p;\n"
	"\t.reg .b64 %t<4>;\n"
	"\tld.param.u64 %t3, [ns];\n"
	"\tmov.u64 %t0, %globaltimer;\n"
	"SPIN:\n"
	"\tmov.u64 %t1, %globaltimer;\n"
	"\tsub.u64 %t2, %t1, %t0;\n"
	"\tsetp.lt.u64 %p, %t2, %t3;\n"
	"\t@%p bra SPIN;\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry feed_sum(.param .u64 pw, .param .u64 pn, .param .u64 pseed, .param .u64 pacc, .param .u32 pfill)\n"
	"{\n"
	"\t.reg .pred %p, %q, %f;\n"
	"\t.reg .b32 %r<12>;\n"
	"\t.reg .b64 %d<20>;\n"
	"\tld.param.u64 %d1, [pw];\n"
	"\tcvta.to.global.u64 %d1, %d1;\n"
	"\tld.param.u64 %d2, [pn];\n"
	"\tld.param.u64 %d3, [pacc];\n"
	"\tcvta.to.global.u64 %d3, %d3;\n"
	"\tld.param.u64 %d12, [pseed];\n"
	"\tld.param.u32 %r9, [pfill];\n"
	"\tsetp.ne.u32 %f, %r9, 0;\n"
	"\tmov.u32 %r1, %ctaid.x;\n"
	"\tmov.u32 %r2, %ntid.x;\n"
	"\tmov.u32 %r3, %tid.x;\n"
	"\tmov.u32 %r4, %nctaid.x;\n"
	"\tmul.wide.u32 %d4, %r1, %r2;\n"
	"\tcvt.u64.u32 %d5, %r3;\n"
	"\tadd.u64 %d4, %d4, %d5;\n"
	"\tmul.wide.u32 %d6, %r4, %r2;\n"
	"\tmov.u64 %d7, 0;\n"
	"LOOP:\n"
	"\tsetp.ge.u64 %p, %d4, %d2;\n"
	"\t@%p bra DONE;\n"
	"\tshl.b64 %d8, %d4, 3;\n"
	"\tadd.u64 %d8, %d1, %d8;\n"
	"\t@%f bra FILL;\n"
	"\tld.global.u64 %d9, [%d8];\n"
	"\tbra TERM;\n"
	"FILL:\n"
	"\tmad.lo.u64 %d9, %d4, 0x2545F4914F6CDD1D, %d12;\n"
	"\tst.global.u64 [%d8], %d9;\n"
	"TERM:\n"
	"\tmul.lo.u64 %d10, %d4, 0x9E3779B97F4A7C15;\n"
	"\txor.b64 %d10, %d10, %d9;\n"
	"\tshr.u64 %d11, %d10, 30;\n"
	"\txor.b64 %d10, %d10, %d11;\n"
	"\tmul.lo.u64 %d10, %d10, 0xBF58476D1CE4E5B9;\n"
	"\tshr.u64 %d11, %d10, 27;\n"
	"\txor.b64 %d10, %d10, %d11;\n"
	"\tmul.lo.u64 %d10, %d10, 0x94D049BB133111EB;\n"
	"\tshr.u64 %d11, %d10, 31;\n"
	"\txor.b64 %d10, %d10, %d11;\n"
	"\tadd.u64 %d7, %d7, %d10;\n"
	"\tadd.u64 %d4, %d4, %d6;\n"
	"\tbra LOOP;\n"
	"DONE:\n"
	"\tmov.b64 {%r5, %r6}, %d7;\n"
	"\tshfl.sync.down.b32 %r7, %r5, 16, 31, -1;\n"
	"\tshfl.sync.down.b32 %r8, %r6, 16, 31, -1;\n"
	"\tmov.b64 %d13, {%r7, %r8};\n"
	"\tadd.u64 %d7, %d7, %d13;\n"
	"\tmov.b64 {%r5, %r6}, %d7;\n"
	"\tshfl.sync.down.b32 %r7, %r5, 8, 31, -1;\n"
	"\tshfl.sync.down.b32 %r8, %r6, 8, 31, -1;\n"
	"\tmov.b64 %d13, {%r7, %r8};\n"
	"\tadd.u64 %d7, %d7, %d13;\n"
	"\tmov.b64 {%r5, %r6}, %d7;\n"
	"\tshfl.sync.down.b32 %r7, %r5, 4, 31, -1;\n"
	"\tshfl.sync.down.b32 %r8, %r6, 4, 31, -1;\n"
	"\tmov.b64 %d13, {%r7, %r8};\n"
	"\tadd.u64 %d7, %d7, %d13;\n"
	"\tmov.b64 {%r5, %r6}, %d7;\n"
	"\tshfl.sync.down.b32 %r7, %r5, 2, 31, -1;\n"
	"\tshfl.sync.down.b32 %r8, %r6, 2, 31, -1;\n"
	"\tmov.b64 %d13, {%r7, %r8};\n"
	"\tadd.u64 %d7, %d7, %d13;\n"
	"\tmov.b64 {%r5, %r6}, %d7;\n"
	"\tshfl.sync.down.b32 %r7, %r5, 1, 31, -1;\n"
	"\tshfl.sync.down.b32 %r8, %r6, 1, 31, -1;\n"
	"\tmov.b64 %d13, {%r7, %r8};\n"
	"\tadd.u64 %d7, %d7, %d13;\n"
	"\tand.b32 %r10, %r3, 31;\n"
	"\tsetp.ne.u32 %q, %r10, 0;\n"
	"\t@%q bra END;\n"
	"\tatom.global.add.u64 %d14, [%d3], %d7;\n"
	"END:\n"
	"\tret;\n"
	"}\n"
;

struct cu_api {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*ctx_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_release)(CUdevice);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*module_load)(CUmodule *, const void *);
	CUresult (*module_function)(CUfunction *, CUmodule, const char *);
	CUresult (*module_unload)(CUmodule);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*host_alloc)(void **, size_t, unsigned);
	CUresult (*host_free)(void *);
	CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*stream_create)(CUstream *, unsigned);
	CUresult (*stream_destroy)(CUstream);
	CUresult (*stream_wait)(CUstream, CUevent, unsigned);
	CUresult (*stream_sync)(CUstream);
	CUresult (*event_create)(CUevent *, unsigned);
	CUresult (*event_destroy)(CUevent);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*event_sync)(CUevent);
	CUresult (*event_elapsed)(float *, CUevent, CUevent);
	CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
			   void **, void **);
	CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*error_name)(CUresult, const char **);
};

/* By plain name (cuGetProcAddress) and by versioned symbol (dlsym). */
static const struct {
	const char *name, *symbol;
	size_t at;
} cu_entries[] = {
#define E(n, s, f) { n, s, offsetof(struct cu_api, f) }
	E("cuInit", "cuInit", init),
	E("cuDeviceGet", "cuDeviceGet", device_get),
	E("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", ctx_retain),
	E("cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", ctx_release),
	E("cuCtxSetCurrent", "cuCtxSetCurrent", ctx_set),
	E("cuModuleLoadData", "cuModuleLoadData", module_load),
	E("cuModuleGetFunction", "cuModuleGetFunction", module_function),
	E("cuModuleUnload", "cuModuleUnload", module_unload),
	E("cuMemAlloc", "cuMemAlloc_v2", mem_alloc),
	E("cuMemFree", "cuMemFree_v2", mem_free),
	E("cuMemHostAlloc", "cuMemHostAlloc", host_alloc),
	E("cuMemFreeHost", "cuMemFreeHost", host_free),
	E("cuMemsetD8Async", "cuMemsetD8Async", memset_async),
	E("cuStreamCreate", "cuStreamCreate", stream_create),
	E("cuStreamDestroy", "cuStreamDestroy_v2", stream_destroy),
	E("cuStreamWaitEvent", "cuStreamWaitEvent", stream_wait),
	E("cuStreamSynchronize", "cuStreamSynchronize", stream_sync),
	E("cuEventCreate", "cuEventCreate", event_create),
	E("cuEventDestroy", "cuEventDestroy_v2", event_destroy),
	E("cuEventRecord", "cuEventRecord", event_record),
	E("cuEventSynchronize", "cuEventSynchronize", event_sync),
	E("cuEventElapsedTime", "cuEventElapsedTime", event_elapsed),
	E("cuLaunchKernel", "cuLaunchKernel", launch),
	E("cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", htod_async),
	E("cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", dtoh_async),
	E("cuGetErrorName", "cuGetErrorName", error_name),
#undef E
};

struct cu_slot {
	CUdeviceptr buf, acc;  /* the batch; its checksum accumulator */
	CUevent c0, c1, k0, k1, done; /* copy start/end, compute start/end, accumulator read */
	bool copied, computed; /* this round */
};

struct cu_dev {
	struct feed_dev base;
	struct cu_api api;
	void *lib;
	CUdevice device;
	CUcontext ctx;
	CUstream scopy, scomp;
	CUmodule mod;
	CUfunction spin, sum;
	unsigned long long spin_ns;
	uint64_t *acc_host; /* pinned: each slot's checksum, read back */
	pinshm_device_t *dev;
	struct cu_slot slot[FEED_MAX_DEPTH];
};

static struct cu_dev *cu_of(struct feed_dev *d) { return (struct cu_dev *)d; }

static int cu_fail(struct cu_dev *c, CUresult r, const char *call, char *why)
{
	const char *name = NULL;

	if (!c->api.error_name || c->api.error_name(r, &name) != CUDA_SUCCESS || !name)
		name = "unknown error";
	snprintf(why, FEED_WHY, "%s: %s (%d)", call, name, r);
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM
	       : r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_INVALID_DEVICE ? -ENODEV
									   : -EIO;
}

#define CU(call, what)                                                                                        \
	do {                                                                                                  \
		CUresult cu_r_ = (call);                                                                      \
		if (cu_r_ != CUDA_SUCCESS)                                                                    \
			return cu_fail(c, cu_r_, what, why);                                                  \
	} while (0)

static pinshm_device_t *cu_device(struct feed_dev *d) { return cu_of(d)->dev; }

static int cu_launch_spin(struct cu_dev *c, char *why)
{
	void *args[] = { &c->spin_ns };

	CU(c->api.launch(c->spin, 1, 1, 1, 1, 1, 1, 0, c->scomp, args, NULL), "cuLaunchKernel(feed_spin)");
	return 0;
}

static double elapsed(struct cu_dev *c, CUevent a, CUevent b)
{
	float ms = 0;

	return c->api.event_elapsed(&ms, a, b) == CUDA_SUCCESS ? ms / 1e3 : 0;
}

static int cu_calibrate(struct feed_dev *d, double us, double *got, char *why)
{
	struct cu_dev *c = cu_of(d);
	struct cu_slot *s = &c->slot[0];

	c->spin_ns = (unsigned long long)(us * 1e3);
	*got = 0;
	if (c->spin_ns == 0)
		return 0;
	for (int i = 0; i < 2; i++) { /* the first loads the module's code */
		CU(c->api.event_record(s->k0, c->scomp), "cuEventRecord");
		int rc = cu_launch_spin(c, why);
		if (rc != 0)
			return rc;
		CU(c->api.event_record(s->k1, c->scomp), "cuEventRecord");
		CU(c->api.event_sync(s->k1), "cuEventSynchronize");
	}
	*got = elapsed(c, s->k0, s->k1) * 1e6;
	return 0;
}

static int cu_copy_in(struct feed_dev *d, unsigned k, const struct feed_host *src, size_t len, void **event,
		      char *why)
{
	struct cu_dev *c = cu_of(d);
	struct cu_slot *s = &c->slot[k];

	CU(c->api.event_record(s->c0, c->scopy), "cuEventRecord");
	CU(c->api.htod_async(s->buf, src->ptr, len, c->scopy), "cuMemcpyHtoDAsync");
	CU(c->api.event_record(s->c1, c->scopy), "cuEventRecord");
	s->copied = true;
	*event = s->c1;
	return 0;
}

/* On the compute stream: zero the accumulator, spin, sum (or fill), read
 * the accumulator back. */
static int cu_work(struct cu_dev *c, struct cu_slot *s, unsigned k, size_t len, uint64_t seed, unsigned fill,
		   char *why)
{
	CUdeviceptr payload = s->buf + FEED_HEAD;
	unsigned long long n = (len - FEED_HEAD) / 8, sd = seed;
	void *args[] = { &payload, &n, &sd, &s->acc, &fill };

	CU(c->api.event_record(s->k0, c->scomp), "cuEventRecord");
	CU(c->api.memset_async(s->acc, 0, 8, c->scomp), "cuMemsetD8Async");
	if (c->spin_ns) {
		int rc = cu_launch_spin(c, why);
		if (rc != 0)
			return rc;
	}
	CU(c->api.launch(c->sum, SUM_BLOCKS, 1, 1, SUM_THREADS, 1, 1, 0, c->scomp, args, NULL),
	   "cuLaunchKernel(feed_sum)");
	CU(c->api.event_record(s->k1, c->scomp), "cuEventRecord");
	CU(c->api.dtoh_async(&c->acc_host[k], s->acc, 8, c->scomp), "cuMemcpyDtoHAsync");
	CU(c->api.event_record(s->done, c->scomp), "cuEventRecord");
	s->computed = true;
	return 0;
}

static int cu_compute(struct feed_dev *d, unsigned k, size_t len, char *why)
{
	struct cu_dev *c = cu_of(d);
	struct cu_slot *s = &c->slot[k];

	CU(c->api.stream_wait(c->scomp, s->c1, 0), "cuStreamWaitEvent");
	return cu_work(c, s, k, len, 0, 0, why);
}

static int cu_fill(struct feed_dev *d, unsigned k, size_t len, uint64_t seed, char *why)
{
	struct cu_dev *c = cu_of(d);

	return cu_work(c, &c->slot[k], k, len, seed, 1, why);
}

static int cu_copy_out(struct feed_dev *d, unsigned k, const struct feed_host *dst, size_t len, void **event,
		       char *why)
{
	struct cu_dev *c = cu_of(d);
	struct cu_slot *s = &c->slot[k];

	CU(c->api.stream_wait(c->scopy, s->k1, 0), "cuStreamWaitEvent");
	CU(c->api.event_record(s->c0, c->scopy), "cuEventRecord");
	CU(c->api.dtoh_async(dst->ptr, s->buf, len, c->scopy), "cuMemcpyDtoHAsync");
	CU(c->api.event_record(s->c1, c->scopy), "cuEventRecord");
	s->copied = true;
	*event = s->c1;
	return 0;
}

static int cu_finish(struct feed_dev *d, unsigned k, uint64_t *sum, struct feed_times *t, char *why)
{
	struct cu_dev *c = cu_of(d);
	struct cu_slot *s = &c->slot[k];

	*t = (struct feed_times){ 0 };
	if (s->computed) {
		CU(c->api.event_sync(s->done), "cuEventSynchronize");
		t->compute = elapsed(c, s->k0, s->k1);
	}
	if (s->copied) {
		CU(c->api.event_sync(s->c1), "cuEventSynchronize");
		t->copy = elapsed(c, s->c0, s->c1);
	}
	*sum = c->acc_host[k];
	s->copied = s->computed = false;
	return 0;
}

static int cu_host_alloc(struct feed_dev *d, size_t len, struct feed_host *h, char *why)
{
	struct cu_dev *c = cu_of(d);
	void *p = NULL;

	CU(c->api.host_alloc(&p, len, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
	*h = (struct feed_host){ .ptr = p };
	return 0;
}

static void cu_host_free(struct feed_dev *d, struct feed_host *h)
{
	cu_of(d)->api.host_free(h->ptr);
}

static int cu_copy_sync(struct feed_dev *d, bool to_device, const struct feed_host *h, size_t len, char *why)
{
	struct cu_dev *c = cu_of(d);
	CUdeviceptr slot = c->slot[0].buf;

	if (to_device)
		CU(c->api.htod_async(slot, h->ptr, len, c->scopy), "cuMemcpyHtoDAsync");
	else
		CU(c->api.dtoh_async(h->ptr, slot, len, c->scopy), "cuMemcpyDtoHAsync");
	CU(c->api.stream_sync(c->scopy), "cuStreamSynchronize");
	return 0;
}

static void cu_close(struct feed_dev *d)
{
	struct cu_dev *c = cu_of(d);
	struct cu_api *a = &c->api;

	if (c->ctx) {
		if (c->scopy)
			a->stream_sync(c->scopy);
		if (c->scomp)
			a->stream_sync(c->scomp);
		for (unsigned i = 0; i < FEED_MAX_DEPTH; i++) {
			struct cu_slot *s = &c->slot[i];
			CUevent *ev[] = { &s->c0, &s->c1, &s->k0, &s->k1, &s->done };
			for (unsigned e = 0; e < 5; e++)
				if (*ev[e])
					a->event_destroy(*ev[e]);
			if (s->buf)
				a->mem_free(s->buf);
			if (s->acc)
				a->mem_free(s->acc);
		}
		if (c->acc_host)
			a->host_free(c->acc_host);
		if (c->mod)
			a->module_unload(c->mod);
		if (c->scopy)
			a->stream_destroy(c->scopy);
		if (c->scomp)
			a->stream_destroy(c->scomp);
		a->ctx_release(c->device);
	}
	pinshm_device_close(c->dev);
	if (c->lib)
		dlclose(c->lib);
	free(c);
}

static const struct feed_ops cu_ops = {
	.name = "cuda",
	.device = cu_device,
	.calibrate = cu_calibrate,
	.copy_in = cu_copy_in,
	.compute = cu_compute,
	.fill = cu_fill,
	.copy_out = cu_copy_out,
	.finish = cu_finish,
	.host_alloc = cu_host_alloc,
	.host_free = cu_host_free,
	.copy_sync = cu_copy_sync,
	.close = cu_close,
};

typedef CUresult (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);

static int cu_resolve(struct cu_dev *c, char *why)
{
	const char *name = getenv("PINSHM_CUDA_LIBRARY");

	if (!name || !*name)
		name = "libcuda.so.1";
	c->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!c->lib) {
		snprintf(why, FEED_WHY, "no CUDA driver: cannot load %s: %s", name, dlerror());
		return -ENODEV;
	}
	get_proc_fn get_proc = (get_proc_fn)dlsym(c->lib, "cuGetProcAddress_v2");
	for (size_t i = 0; i < sizeof(cu_entries) / sizeof(cu_entries[0]); i++) {
		void *fn = NULL;
		int status = 0;
		if (get_proc && (get_proc(cu_entries[i].name, &fn, CUDA_API_ASKED, 0, &status) != CUDA_SUCCESS ||
				 status != 0))
			fn = NULL;
		if (!fn)
			fn = dlsym(c->lib, cu_entries[i].symbol);
		if (!fn) {
			snprintf(why, FEED_WHY, "the CUDA driver has no %s", cu_entries[i].symbol);
			return -ENOTSUP;
		}
		memcpy((char *)&c->api + cu_entries[i].at, &fn, sizeof(fn));
	}
	return 0;
}

static int cu_slots(struct cu_dev *c, unsigned depth, size_t batch, char *why)
{
	CU(c->api.host_alloc((void **)&c->acc_host, depth * sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE),
	   "cuMemHostAlloc");
	for (unsigned i = 0; i < depth; i++) {
		struct cu_slot *s = &c->slot[i];
		CU(c->api.mem_alloc(&s->buf, batch), "cuMemAlloc");
		CU(c->api.mem_alloc(&s->acc, sizeof(uint64_t)), "cuMemAlloc");
		CUevent *ev[] = { &s->c0, &s->c1, &s->k0, &s->k1, &s->done };
		for (unsigned e = 0; e < 5; e++)
			CU(c->api.event_create(ev[e], 0), "cuEventCreate");
	}
	return 0;
}

static int cu_start(struct cu_dev *c, unsigned depth, size_t batch, char *why)
{
	int rc = cu_resolve(c, why);

	if (rc != 0)
		return rc;
	CUresult r = c->api.init(0);
	if (r != CUDA_SUCCESS) {
		cu_fail(c, r, "cuInit", why);
		return -ENODEV;
	}
	r = c->api.device_get(&c->device, 0);
	if (r != CUDA_SUCCESS) {
		cu_fail(c, r, "cuDeviceGet(0)", why);
		return -ENODEV;
	}
	CU(c->api.ctx_retain(&c->ctx, c->device), "cuDevicePrimaryCtxRetain");
	CU(c->api.ctx_set(c->ctx), "cuCtxSetCurrent");
	CU(c->api.stream_create(&c->scopy, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	CU(c->api.stream_create(&c->scomp, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	CU(c->api.module_load(&c->mod, ptx), "cuModuleLoadData");
	CU(c->api.module_function(&c->spin, c->mod, "feed_spin"), "cuModuleGetFunction(feed_spin)");
	CU(c->api.module_function(&c->sum, c->mod, "feed_sum"), "cuModuleGetFunction(feed_sum)");
	rc = cu_slots(c, depth, batch, why);
	if (rc == 0 && (rc = pinshm_device_open_cuda(0, &c->dev)) != 0)
		snprintf(why, FEED_WHY, "pinshm_device_open_cuda: %s", pinshm_device_error());
	return rc;
}

int feed_cuda_open(unsigned depth, size_t batch, struct feed_dev **out, char *why)
{
	struct cu_dev *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->base = (struct feed_dev){ .ops = &cu_ops, .depth = depth, .batch = batch };
	int rc = cu_start(c, depth, batch, why);
	if (rc != 0) {
		cu_close(&c->base);
		return rc;
	}
	*out = &c->base;
	return 0;
}
