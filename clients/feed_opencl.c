/*
 * feed_opencl.c - pinshm-feed's OpenCL backend: the first device of the
 * first platform, a copy queue and a compute queue (both with profiling,
 * whose times are the copy and compute times), a device buffer per slot.
 * A registered record is copied with clEnqueueCopyBuffer from the buffer
 * that pinshm made over the handle's mapping, at the record's offset;
 * other host memory with clEnqueueWrite/ReadBuffer.  The spin kernel does
 * a fixed number of dependent multiply-adds, calibrated against the
 * profiling clock (OpenCL C has no clock to read).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed.h"

#if !defined(HAVE_CL_H) || !defined(HAVE_OPENCL_LIB)
int feed_opencl_open(unsigned depth, size_t batch, struct feed_dev **out, char *why)
{
	(void)depth, (void)batch, (void)out;
	snprintf(why, FEED_WHY, "pinshm-feed was built without OpenCL (headers and libOpenCL)");
	return -ENOTSUP;
}
#else
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

static const char *cl_source =
	"ulong term(ulong i, ulong w)\n"
	"{\n"
	"	ulong x = w ^ (i * 0x9e3779b97f4a7c15UL);\n"
	"	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9UL;\n"
	"	x = (x ^ (x >> 27)) * 0x94d049bb133111ebUL;\n"
	"	return x ^ (x >> 31);\n"
	"}\n"
	"__kernel void spin(ulong iters, __global ulong *sink)\n"
	"{\n"
	"	ulong x = iters;\n"
	"	for (ulong i = 0; i < iters; i++)\n"
	"		x = x * 6364136223846793005UL + 1442695040888963407UL;\n"
	"	sink[0] = x;\n"
	"}\n"
	/* Each work item sums a contiguous chunk (a CPU device's cache likes it). */
	"__kernel void csum(__global const ulong *w, ulong head, ulong n, __global ulong *part)\n"
	"{\n"
	"	w += head;\n"
	"	ulong t = get_global_id(0), p = get_global_size(0), chunk = (n + p - 1) / p;\n"
	"	ulong s = 0, end = min(n, (t + 1) * chunk);\n"
	"	for (ulong i = t * chunk; i < end; i++)\n"
	"		s += term(i, w[i]);\n"
	"	part[t] = s;\n"
	"}\n"
	"__kernel void fill(__global ulong *w, ulong head, ulong n, ulong seed, __global ulong *part)\n"
	"{\n"
	"	w += head;\n"
	"	ulong t = get_global_id(0), p = get_global_size(0), chunk = (n + p - 1) / p;\n"
	"	ulong s = 0, end = min(n, (t + 1) * chunk);\n"
	"	for (ulong i = t * chunk; i < end; i++) {\n"
	"		ulong v = seed + i * 0x2545f4914f6cdd1dUL;\n"
	"		w[i] = v;\n"
	"		s += term(i, v);\n"
	"	}\n"
	"	part[t] = s;\n"
	"}\n";

struct cl_slot {
	cl_mem buf, part; /* the batch, FEED_PARTIALS sums */
	cl_event copy, spin, work, read; /* of the last round; NULL: none */
	uint64_t sums[FEED_PARTIALS];
};

struct cl_dev {
	struct feed_dev base;
	cl_device_id device;
	cl_context ctx;
	cl_command_queue qcopy, qcomp;
	cl_program prog;
	cl_kernel spin, csum, fill;
	cl_mem sink;
	cl_ulong iters; /* of the spin kernel */
	pinshm_device_t *dev;
	struct cl_slot slot[FEED_MAX_DEPTH];
};

static struct cl_dev *cl_of(struct feed_dev *d) { return (struct cl_dev *)d; }

static int cl_fail(cl_int err, const char *call, char *why)
{
	snprintf(why, FEED_WHY, "%s: OpenCL error %d", call, err);
	return err == CL_OUT_OF_HOST_MEMORY || err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE
		       ? -ENOMEM
		       : -EIO;
}

static void drop_event(cl_event *e)
{
	if (*e)
		clReleaseEvent(*e);
	*e = NULL;
}

static pinshm_device_t *cl_device(struct feed_dev *d) { return cl_of(d)->dev; }

static double ev_seconds(cl_event e)
{
	cl_ulong a = 0, b = 0;

	if (!e || clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof(a), &a, NULL) != CL_SUCCESS ||
	    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof(b), &b, NULL) != CL_SUCCESS)
		return 0;
	return b > a ? (double)(b - a) / 1e9 : 0;
}

static cl_int run_spin(struct cl_dev *c, cl_ulong iters, cl_uint nwait, const cl_event *wait, cl_event *ev)
{
	size_t one = 1;

	clSetKernelArg(c->spin, 0, sizeof(iters), &iters);
	clSetKernelArg(c->spin, 1, sizeof(cl_mem), &c->sink);
	return clEnqueueNDRangeKernel(c->qcomp, c->spin, 1, NULL, &one, NULL, nwait, wait, ev);
}

/* The shortest of @p runs runs of the spin kernel (a loaded machine
 * only ever lengthens one), seconds; < 0: -errno. */
static double spin_min(struct cl_dev *c, cl_ulong iters, int runs, char *why)
{
	double best = 1e9;

	for (int i = 0; i < runs; i++) {
		cl_event ev;
		cl_int err = run_spin(c, iters, 0, NULL, &ev);
		if (err != CL_SUCCESS)
			return cl_fail(err, "clEnqueueNDRangeKernel(spin)", why);
		clWaitForEvents(1, &ev);
		double s = ev_seconds(ev);
		clReleaseEvent(ev);
		if (s > 0 && s < best)
			best = s;
	}
	return best;
}

static int cl_calibrate(struct feed_dev *d, double us, double *got, char *why)
{
	struct cl_dev *c = cl_of(d);
	cl_ulong iters = 1u << 20;

	c->iters = 0;
	*got = 0;
	if (us <= 0)
		return 0;
	double s = spin_min(c, iters, 6, why); /* the first run compiles and warms */
	if (s < 0)
		return (int)s;
	c->iters = (cl_ulong)((double)iters * us / (s * 1e6)) + 1;
	s = spin_min(c, c->iters, 3, why);
	if (s < 0)
		return (int)s;
	*got = s * 1e6;
	return 0;
}

static int cl_copy_in(struct feed_dev *d, unsigned k, const struct feed_host *src, size_t len, void **event,
		      char *why)
{
	struct cl_dev *c = cl_of(d);
	struct cl_slot *s = &c->slot[k];
	cl_int err;

	drop_event(&s->copy);
	if (src->buffer)
		err = clEnqueueCopyBuffer(c->qcopy, src->buffer, s->buf, src->offset, 0, len, 0, NULL, &s->copy);
	else
		err = clEnqueueWriteBuffer(c->qcopy, s->buf, CL_FALSE, 0, len, src->ptr, 0, NULL, &s->copy);
	if (err != CL_SUCCESS)
		return cl_fail(err, "clEnqueueCopyBuffer (h2d)", why);
	clFlush(c->qcopy);
	*event = s->copy;
	return 0;
}

/* The spin (where calibrated), then @p k, then the read of the partial
 * sums, on the compute queue after @p nwait events. */
static int cl_work(struct cl_dev *c, struct cl_slot *s, cl_kernel k, cl_uint nwait, const cl_event *wait,
		   char *why)
{
	size_t global = FEED_PARTIALS;
	cl_int err = CL_SUCCESS;

	drop_event(&s->spin);
	drop_event(&s->work);
	drop_event(&s->read);
	if (c->iters > 0) {
		err = run_spin(c, c->iters, nwait, wait, &s->spin);
		nwait = 0;
	}
	if (err == CL_SUCCESS)
		err = clEnqueueNDRangeKernel(c->qcomp, k, 1, NULL, &global, NULL, nwait, wait, &s->work);
	if (err == CL_SUCCESS)
		err = clEnqueueReadBuffer(c->qcomp, s->part, CL_FALSE, 0, sizeof(s->sums), s->sums, 0, NULL, &s->read);
	if (err != CL_SUCCESS)
		return cl_fail(err, "clEnqueueNDRangeKernel", why);
	clFlush(c->qcomp);
	return 0;
}

static int cl_compute(struct feed_dev *d, unsigned k, size_t len, char *why)
{
	struct cl_dev *c = cl_of(d);
	struct cl_slot *s = &c->slot[k];
	cl_ulong head = FEED_HEAD / 8, n = (len - FEED_HEAD) / 8;

	/* The payload by its offset: a sub-buffer's origin must be aligned
	 * to CL_DEVICE_MEM_BASE_ADDR_ALIGN (128 bytes on pocl). */
	clSetKernelArg(c->csum, 0, sizeof(cl_mem), &s->buf);
	clSetKernelArg(c->csum, 1, sizeof(head), &head);
	clSetKernelArg(c->csum, 2, sizeof(n), &n);
	clSetKernelArg(c->csum, 3, sizeof(cl_mem), &s->part);
	return cl_work(c, s, c->csum, 1, &s->copy, why);
}

static int cl_fill(struct feed_dev *d, unsigned k, size_t len, uint64_t seed, char *why)
{
	struct cl_dev *c = cl_of(d);
	struct cl_slot *s = &c->slot[k];
	cl_ulong head = FEED_HEAD / 8, n = (len - FEED_HEAD) / 8, sd = seed;

	drop_event(&s->copy);
	clSetKernelArg(c->fill, 0, sizeof(cl_mem), &s->buf);
	clSetKernelArg(c->fill, 1, sizeof(head), &head);
	clSetKernelArg(c->fill, 2, sizeof(n), &n);
	clSetKernelArg(c->fill, 3, sizeof(sd), &sd);
	clSetKernelArg(c->fill, 4, sizeof(cl_mem), &s->part);
	return cl_work(c, s, c->fill, 0, NULL, why);
}

static int cl_copy_out(struct feed_dev *d, unsigned k, const struct feed_host *dst, size_t len, void **event,
		       char *why)
{
	struct cl_dev *c = cl_of(d);
	struct cl_slot *s = &c->slot[k];
	cl_int err;

	drop_event(&s->copy);
	if (dst->buffer)
		err = clEnqueueCopyBuffer(c->qcopy, s->buf, dst->buffer, 0, dst->offset, len, 1, &s->work, &s->copy);
	else
		err = clEnqueueReadBuffer(c->qcopy, s->buf, CL_FALSE, 0, len, dst->ptr, 1, &s->work, &s->copy);
	if (err != CL_SUCCESS)
		return cl_fail(err, "clEnqueueCopyBuffer (d2h)", why);
	clFlush(c->qcopy);
	*event = s->copy;
	return 0;
}

static int cl_finish(struct feed_dev *d, unsigned k, uint64_t *sum, struct feed_times *t, char *why)
{
	struct cl_slot *s = &cl_of(d)->slot[k];
	cl_event wait[2];
	cl_uint n = 0;

	if (s->read)
		wait[n++] = s->read;
	if (s->copy)
		wait[n++] = s->copy;
	cl_int err = n ? clWaitForEvents(n, wait) : CL_SUCCESS;
	if (err != CL_SUCCESS)
		return cl_fail(err, "clWaitForEvents", why);
	*sum = 0;
	for (unsigned i = 0; i < FEED_PARTIALS; i++)
		*sum += s->sums[i];
	t->copy = ev_seconds(s->copy);
	t->compute = ev_seconds(s->spin) + ev_seconds(s->work);
	return 0;
}

static int cl_host_alloc(struct feed_dev *d, size_t len, struct feed_host *h, char *why)
{
	struct cl_dev *c = cl_of(d);
	cl_int err;
	cl_mem b = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, len, NULL, &err);

	if (!b)
		return cl_fail(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", why);
	void *p = clEnqueueMapBuffer(c->qcopy, b, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, len, 0, NULL, NULL, &err);
	if (!p) {
		clReleaseMemObject(b);
		return cl_fail(err, "clEnqueueMapBuffer", why);
	}
	*h = (struct feed_host){ .ptr = p, .buffer = b };
	return 0;
}

static void cl_host_free(struct feed_dev *d, struct feed_host *h)
{
	struct cl_dev *c = cl_of(d);

	clEnqueueUnmapMemObject(c->qcopy, h->buffer, h->ptr, 0, NULL, NULL);
	clFinish(c->qcopy);
	clReleaseMemObject(h->buffer);
}

static int cl_copy_sync(struct feed_dev *d, bool to_device, const struct feed_host *h, size_t len, char *why)
{
	struct cl_dev *c = cl_of(d);
	cl_mem slot = c->slot[0].buf;
	cl_int err;

	if (h->buffer)
		err = to_device ? clEnqueueCopyBuffer(c->qcopy, h->buffer, slot, h->offset, 0, len, 0, NULL, NULL)
				: clEnqueueCopyBuffer(c->qcopy, slot, h->buffer, 0, h->offset, len, 0, NULL, NULL);
	else
		err = to_device ? clEnqueueWriteBuffer(c->qcopy, slot, CL_TRUE, 0, len, h->ptr, 0, NULL, NULL)
				: clEnqueueReadBuffer(c->qcopy, slot, CL_TRUE, 0, len, h->ptr, 0, NULL, NULL);
	if (err == CL_SUCCESS)
		err = clFinish(c->qcopy);
	return err == CL_SUCCESS ? 0 : cl_fail(err, "copy", why);
}

static void cl_close(struct feed_dev *d)
{
	struct cl_dev *c = cl_of(d);

	if (c->qcopy)
		clFinish(c->qcopy);
	if (c->qcomp)
		clFinish(c->qcomp);
	for (unsigned i = 0; i < FEED_MAX_DEPTH; i++) {
		struct cl_slot *s = &c->slot[i];
		drop_event(&s->copy), drop_event(&s->spin), drop_event(&s->work), drop_event(&s->read);
		if (s->buf)
			clReleaseMemObject(s->buf);
		if (s->part)
			clReleaseMemObject(s->part);
	}
	pinshm_device_close(c->dev);
	if (c->sink)
		clReleaseMemObject(c->sink);
	if (c->spin)
		clReleaseKernel(c->spin);
	if (c->csum)
		clReleaseKernel(c->csum);
	if (c->fill)
		clReleaseKernel(c->fill);
	if (c->prog)
		clReleaseProgram(c->prog);
	if (c->qcopy)
		clReleaseCommandQueue(c->qcopy);
	if (c->qcomp)
		clReleaseCommandQueue(c->qcomp);
	if (c->ctx)
		clReleaseContext(c->ctx);
	free(c);
}

static const struct feed_ops cl_ops = {
	.name = "opencl",
	.device = cl_device,
	.calibrate = cl_calibrate,
	.copy_in = cl_copy_in,
	.compute = cl_compute,
	.fill = cl_fill,
	.copy_out = cl_copy_out,
	.finish = cl_finish,
	.host_alloc = cl_host_alloc,
	.host_free = cl_host_free,
	.copy_sync = cl_copy_sync,
	.close = cl_close,
};

static int cl_slots(struct cl_dev *c, unsigned depth, size_t batch, char *why)
{
	cl_int err = CL_SUCCESS;

	for (unsigned i = 0; i < depth && err == CL_SUCCESS; i++) {
		struct cl_slot *s = &c->slot[i];
		s->buf = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, batch, NULL, &err);
		if (s->buf)
			s->part = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, sizeof(s->sums), NULL, &err);
	}
	if (err == CL_SUCCESS)
		c->sink = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, sizeof(cl_ulong), NULL, &err);
	return err == CL_SUCCESS ? 0 : cl_fail(err, "clCreateBuffer", why);
}

static int cl_build(struct cl_dev *c, char *why)
{
	cl_int err;

	c->prog = clCreateProgramWithSource(c->ctx, 1, &cl_source, NULL, &err);
	if (!c->prog)
		return cl_fail(err, "clCreateProgramWithSource", why);
	err = clBuildProgram(c->prog, 1, &c->device, "", NULL, NULL);
	if (err != CL_SUCCESS) {
		char log[FEED_WHY - 40] = "";
		clGetProgramBuildInfo(c->prog, c->device, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, NULL);
		snprintf(why, FEED_WHY, "clBuildProgram: %d: %s", err, log);
		return -EIO;
	}
	c->spin = clCreateKernel(c->prog, "spin", &err);
	c->csum = clCreateKernel(c->prog, "csum", &err);
	c->fill = clCreateKernel(c->prog, "fill", &err);
	return c->spin && c->csum && c->fill ? 0 : cl_fail(err, "clCreateKernel", why);
}

static int cl_start(struct cl_dev *c, unsigned depth, size_t batch, char *why)
{
	cl_platform_id platform;
	cl_uint n = 0;
	cl_int err;

	if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0 ||
	    clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &c->device, &n) != CL_SUCCESS || n == 0) {
		snprintf(why, FEED_WHY, "no OpenCL platform or device (Debian: pocl-opencl-icd)");
		return -ENODEV;
	}
	c->ctx = clCreateContext(NULL, 1, &c->device, NULL, NULL, &err);
	if (!c->ctx)
		return cl_fail(err, "clCreateContext", why);
	c->qcopy = clCreateCommandQueue(c->ctx, c->device, CL_QUEUE_PROFILING_ENABLE, &err);
	if (c->qcopy)
		c->qcomp = clCreateCommandQueue(c->ctx, c->device, CL_QUEUE_PROFILING_ENABLE, &err);
	if (!c->qcomp)
		return cl_fail(err, "clCreateCommandQueue", why);
	int rc = cl_build(c, why);
	if (rc == 0)
		rc = cl_slots(c, depth, batch, why);
	if (rc == 0 && (rc = pinshm_device_open_opencl(c->ctx, &c->dev)) != 0)
		snprintf(why, FEED_WHY, "pinshm_device_open_opencl: %s", pinshm_device_error());
	return rc;
}

int feed_opencl_open(unsigned depth, size_t batch, struct feed_dev **out, char *why)
{
	struct cl_dev *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->base = (struct feed_dev){ .ops = &cl_ops, .depth = depth, .batch = batch };
	int rc = cl_start(c, depth, batch, why);
	if (rc != 0) {
		cl_close(&c->base);
		return rc;
	}
	*out = &c->base;
	return 0;
}
#endif
