/*
 * load.c - a driver loaded at run time (cuda.c, opencl.c), and why the last
 * open of a device failed (pinshm_device_error()).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "device/device.h"

/* Why the last open of this thread failed. */
static _Thread_local char open_error[DEVICE_WHY];

void device_open_begin(void)
{
	open_error[0] = '\0';
}

int device_open_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(open_error, sizeof(open_error), fmt, ap);
	va_end(ap);
	return err;
}

const char *pinshm_device_error(void)
{
	return open_error;
}

/* The library named by environment variable @p env (tests load a double of
 * the driver this way), else @p soname. */
void *device_dlopen(const char *env, const char *soname)
{
	const char *name = getenv(env);

	if (!name || !*name)
		name = soname;
	void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		device_open_fail(-ENODEV, "cannot load %s: %s", name, dlerror());
	return lib;
}
