/*
 * fuzz.h - what the fuzz targets share.
 *
 * Each target defines LLVMFuzzerTestOneInput().  Built with
 * --enable-fuzzing it is linked with libFuzzer (-fsanitize=fuzzer); in
 * every build it is also linked with replay.c, a Check program that feeds
 * it each file of its corpus (tests/fuzz/corpus/TARGET), so that the seeds
 * and the inputs of past crashes are regression tests of `make check`.
 */
#ifndef PINSHM_FUZZ_H
#define PINSHM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* An invariant of the target: on failure, say which and abort (a crash
 * for libFuzzer, which then saves the input; a failed test for Check). */
#define FUZZ_CHECK(cond)                                                                          \
	do {                                                                                      \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                  \
		}                                                                                 \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PINSHM_FUZZ_H */
