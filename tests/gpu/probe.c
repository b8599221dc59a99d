/*
 * probe.c - what this machine allows, for tests/gpu/run: memfd seals,
 * mlock, and registering a MAP_SHARED memfd mapping with the CUDA driver
 * (loaded at run time).  Prints one line each; exit 77 where there is no
 * CUDA driver or device, 1 where the registration fails, else 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (4u << 20)

int main(void)
{
	int fd = memfd_create("pinshm-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, SIZE) != 0) {
		printf("memfd: no (%s)\n", strerror(errno));
		return 1;
	}
	printf("memfd seals: %s\n", fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0 ? "yes" : strerror(errno));
	void *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		printf("mmap: no (%s)\n", strerror(errno));
		return 1;
	}
	printf("mlock 4 MiB: %s\n", mlock(p, SIZE) == 0 ? "yes" : strerror(errno));
	munlock(p, SIZE);

	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		printf("CUDA driver: no (%s)\n", dlerror());
		return 77;
	}
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
	int (*retain)(void **, int) = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
	int (*set)(void *) = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
	int (*reg)(void *, size_t, unsigned) = (int (*)(void *, size_t, unsigned))dlsym(lib, "cuMemHostRegister_v2");
	int (*unreg)(void *) = (int (*)(void *))dlsym(lib, "cuMemHostUnregister");
	void *ctx;
	int r;
	if (!init || !retain || !set || !reg || !unreg || (r = init(0)) != 0) {
		printf("CUDA driver: loaded, no device (cuInit)\n");
		return 77;
	}
	if (retain(&ctx, 0) != 0 || set(ctx) != 0) {
		printf("CUDA device 0: no primary context\n");
		return 77;
	}
	r = reg(p, SIZE, 0x01 | 0x02);
	printf("cuMemHostRegister of a MAP_SHARED memfd mapping: %s (%d)\n", r == 0 ? "yes" : "no", r);
	if (r != 0)
		return 1;
	unreg(p);
	int ro = reg(p, SIZE, 0x01 | 0x02 | 0x08);
	printf("... read-only (CU_MEMHOSTREGISTER_READ_ONLY): %s (%d)\n", ro == 0 ? "yes" : "no", ro);
	if (ro == 0)
		unreg(p);
	return 0;
}
