/*
 * perf_options.h - pinshm-perf's options (perf_options.c reads them).
 */
#ifndef PERF_OPTIONS_H
#define PERF_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "perf_stats.h"
#include "perf_transports.h"

#define PERF_PROG "pinshm-perf"
#define DEFAULT_ITERATIONS 100000ull
#define MAX_ITERATIONS 10000000ull /* 80 MB of samples */
#define MAX_SIZES 64
#define MAX_TRANSPORTS 16
#define DEFAULT_CREATE_ITERATIONS 200ull

struct opts {
	const perf_transport_t *tr[MAX_TRANSPORTS];
	size_t ntr;
	unsigned patterns;
	size_t sizes[MAX_SIZES];
	size_t nsizes;
	uint64_t iterations;
	perf_format_t fmt;
	int cpu[2];
	int daemon;          /* --socket given */
	const char *socket;  /* its path; NULL: pinshm_connect()'s default */
	int iterations_set;  /* --iterations given */
	uint64_t create_iterations;
	const char *plot;    /* --plot FILE, or NULL */
	unsigned rounds;     /* --rounds R, or 0 */
};

/** Read the command line into @p o.  @return -1: go on and measure; else
 *  the exit status (0 after --help or --version, 2 after a bad option, the
 *  reason printed). */
int perf_parse_options(int argc, char **argv, struct opts *o);

#endif /* PERF_OPTIONS_H */
