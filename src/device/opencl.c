/*
 * opencl.c - the OpenCL backend, through the ICD loader (libOpenCL.so.1),
 * loaded at run time; built where OpenCL's headers are found (configure:
 * HAVE_CL_H), else every open says -ENOTSUP.  A handle's mapping becomes
 * one buffer made with CL_MEM_USE_HOST_PTR in the caller's context; a
 * record is addressed by its offset in it (pinshm_device_addr()), since a
 * sub-buffer's origin must be aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN,
 * which most records are not.  PINSHM_OPENCL_LIBRARY names another
 * library to load.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <dlfcn.h>

#include "device/device.h"

#ifndef HAVE_CL_H
int opencl_open(void *context, struct pinshm_device **out)
{
	(void)context;
	(void)out;
	return device_open_fail(-ENOTSUP, "libpinshm was built without OpenCL's headers");
}
#else
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

struct opencl_api {
	cl_int (*retain_context)(cl_context);
	cl_int (*release_context)(cl_context);
	cl_int (*context_info)(cl_context, cl_context_info, size_t, void *, size_t *);
	cl_mem (*create_buffer)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
	cl_int (*release_mem)(cl_mem);
	cl_int (*event_info)(cl_event, cl_event_info, size_t, void *, size_t *);
	cl_int (*wait)(cl_uint, const cl_event *);
	cl_int (*retain_event)(cl_event);
	cl_int (*release_event)(cl_event);
};

static const struct {
	const char *symbol;
	size_t at;
} opencl_entries[] = {
	{ "clRetainContext", offsetof(struct opencl_api, retain_context) },
	{ "clReleaseContext", offsetof(struct opencl_api, release_context) },
	{ "clGetContextInfo", offsetof(struct opencl_api, context_info) },
	{ "clCreateBuffer", offsetof(struct opencl_api, create_buffer) },
	{ "clReleaseMemObject", offsetof(struct opencl_api, release_mem) },
	{ "clGetEventInfo", offsetof(struct opencl_api, event_info) },
	{ "clWaitForEvents", offsetof(struct opencl_api, wait) },
	{ "clRetainEvent", offsetof(struct opencl_api, retain_event) },
	{ "clReleaseEvent", offsetof(struct opencl_api, release_event) },
};

struct opencl_device {
	struct pinshm_device base;
	struct opencl_api api;
	cl_context ctx; /* retained */
};

static struct opencl_device *opencl_of(struct pinshm_device *dev) { return (struct opencl_device *)dev; }

/* OpenCL errors, translated here and nowhere else. */
static int opencl_errno(cl_int err)
{
	switch (err) {
	case CL_OUT_OF_HOST_MEMORY:
	case CL_OUT_OF_RESOURCES:
	case CL_MEM_OBJECT_ALLOCATION_FAILURE:
		return -ENOMEM;
	case CL_INVALID_VALUE:
	case CL_INVALID_BUFFER_SIZE:
	case CL_INVALID_HOST_PTR:
	case CL_INVALID_CONTEXT:
	case CL_INVALID_EVENT:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static int opencl_fail(cl_int err, const char *call, char *why)
{
	snprintf(why, DEVICE_WHY, "%s: OpenCL error %d", call, err);
	return opencl_errno(err);
}

static const struct device_ops opencl_ops;

static int opencl_resolve(void *lib, struct opencl_api *api)
{
	for (size_t i = 0; i < sizeof(opencl_entries) / sizeof(opencl_entries[0]); i++) {
		void *fn = dlsym(lib, opencl_entries[i].symbol);
		if (!fn)
			return device_open_fail(-ENOTSUP, "the OpenCL loader has no %s", opencl_entries[i].symbol);
		memcpy((char *)api + opencl_entries[i].at, &fn, sizeof(fn));
	}
	return 0;
}

int opencl_open(void *context, struct pinshm_device **out)
{
	char why[DEVICE_WHY];
	cl_uint ndev = 0;
	void *lib = device_dlopen("PINSHM_OPENCL_LIBRARY", "libOpenCL.so.1");

	if (!lib)
		return -ENODEV;
	struct opencl_device *od = calloc(1, sizeof(*od));
	int rc = od ? opencl_resolve(lib, &od->api) : device_open_fail(-ENOMEM, "no memory for a device");
	if (rc == 0) {
		cl_int err = od->api.context_info(context, CL_CONTEXT_NUM_DEVICES, sizeof(ndev), &ndev, NULL);
		if (err != CL_SUCCESS)
			rc = device_open_fail(-EINVAL, "not an OpenCL context (%s)",
					      (opencl_fail(err, "clGetContextInfo", why), why));
	}
	if (rc != 0) {
		free(od);
		dlclose(lib);
		return rc;
	}
	od->api.retain_context(context);
	od->ctx = context;
	od->base = (struct pinshm_device){ .ops = &opencl_ops, .kind = PINSHM_DEVICE_OPENCL, .lib = lib };
	*out = &od->base;
	return 0;
}

static int opencl_reg(struct pinshm_device *dev, void *base, size_t size, struct device_reg *r, char *why)
{
	struct opencl_device *od = opencl_of(dev);
	cl_mem_flags flags = CL_MEM_USE_HOST_PTR | (r->read_only ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE);
	cl_int err = CL_SUCCESS;
	cl_mem buf = od->api.create_buffer(od->ctx, flags, size, base, &err);

	if (!buf || err != CL_SUCCESS)
		return opencl_fail(err, "clCreateBuffer", why);
	r->host = base;
	r->buffer = buf;
	return 0;
}

static void opencl_unreg(struct pinshm_device *dev, struct device_reg *r)
{
	opencl_of(dev)->api.release_mem(r->buffer);
}

static int opencl_query(struct pinshm_device *dev, void *event, char *why)
{
	cl_int status = CL_QUEUED;
	cl_int err = opencl_of(dev)->api.event_info(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status,
						    NULL);

	if (err != CL_SUCCESS)
		return opencl_fail(err, "clGetEventInfo", why);
	if (status < 0) /* the command failed: it is over */
		return opencl_fail(status, "the event's command", why);
	return status == CL_COMPLETE;
}

static void opencl_wait(struct pinshm_device *dev, void *event)
{
	cl_event ev = event;

	opencl_of(dev)->api.wait(1, &ev);
}

static int opencl_retain(struct pinshm_device *dev, void *event, char *why)
{
	cl_int err = opencl_of(dev)->api.retain_event(event);

	return err == CL_SUCCESS ? 0 : opencl_fail(err, "clRetainEvent", why);
}

static void opencl_drop(struct pinshm_device *dev, void *event)
{
	opencl_of(dev)->api.release_event(event);
}

static void opencl_close(struct pinshm_device *dev)
{
	struct opencl_device *od = opencl_of(dev);

	od->api.release_context(od->ctx);
	free(od);
}

static const struct device_ops opencl_ops = {
	.name = "OpenCL",
	.reg = opencl_reg,
	.unreg = opencl_unreg,
	.query = opencl_query,
	.wait = opencl_wait,
	.retain = opencl_retain,
	.drop = opencl_drop,
	.close = opencl_close,
};
#endif /* HAVE_CL_H */
