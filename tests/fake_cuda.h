/*
 * fake_cuda.h - the state of the test double of libcuda.so.1
 * (tests/fake_cuda.c), which a test reaches with dlopen() of the same
 * library the one under test loads (PINSHM_CUDA_LIBRARY), then dlsym()
 * of "fake_cuda".  An event of the double is a pointer to an int:
 * FAKE_EVENT_DONE, FAKE_EVENT_PENDING or FAKE_EVENT_FAILED.
 */
#ifndef PINSHM_FAKE_CUDA_H
#define PINSHM_FAKE_CUDA_H

#include <stddef.h>

#define FAKE_EVENT_PENDING 0
#define FAKE_EVENT_DONE 1
#define FAKE_EVENT_FAILED 2
#define FAKE_MAX_REGS 16
#define FAKE_DPTR_BASE 0x7f0000000000ull

struct fake_cuda {
	/* Set by the test. */
	int devices;              /* 0: cuInit says CUDA_ERROR_NO_DEVICE */
	int can_map, read_only;   /* the device attributes */
	int refuse_read_only;     /* cuMemHostRegister says NOT_SUPPORTED to the read-only flag */
	int fail_register;        /* a CUresult for the next cuMemHostRegister, 0: none */
	int no_get_proc;          /* cuGetProcAddress_v2 finds nothing: the library falls back to dlsym */
	void (*on_sync)(void);    /* called by cuEventSynchronize on a pending event, before it completes */
	int sync_fails;           /* cuEventSynchronize leaves a pending event pending, says LAUNCH_FAILED */
	size_t max_register;      /* cuMemHostRegister refuses larger ranges (OUT_OF_MEMORY); 0: no limit */
	int uva;                  /* unified addressing: a registered byte's device address is its host address */
	/* Kept by the double. */
	int get_proc_calls, register_calls, unregister_calls, syncs;
	int ctx_retained, ctx_depth;
	unsigned last_flags;
	int nregs;
	struct {
		void *base;
		size_t size;
	} regs[FAKE_MAX_REGS];
};

#endif /* PINSHM_FAKE_CUDA_H */
