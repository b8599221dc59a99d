/*
 * feed.h - pinshm-feed's devices: what the feed (feed.c) and the copy
 * benchmark (feed_bench.c) ask of a backend (feed_cuda.c, feed_opencl.c).
 *
 * A backend keeps `depth` slots, each a device buffer of `batch` bytes, a
 * copy stream (queue) and a compute stream.  A slot's operations run in
 * this order, each after the one before it on the same slot (the backend
 * orders them with events across its two streams), and across slots
 * concurrently:
 *   h2d: copy_in (host record -> slot), compute (spin + checksum);
 *   d2h: fill (spin + generate + checksum), copy_out (slot -> reservation);
 * then finish() waits for the slot's last operation and reports its
 * device-side checksum and times.  A slot is used again only after finish.
 *
 * A batch is a header (struct feed_head, FEED_HEAD bytes) then payload
 * words; its checksum is feed_sum() of the payload, which the producer
 * writes in the header and the device computes over its own copy.
 */
#ifndef PINSHM_FEED_H
#define PINSHM_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pinshm.h>

#define FEED_MAGIC 0x646565666d687370ull /* "pshmfeed" */
#define FEED_HEAD 64u                     /* header bytes: the payload starts a cache line on */
#define FEED_WHY 256u
#define FEED_MAX_DEPTH 16u
/* Device-side checksums are summed over this many partial sums. */
#define FEED_PARTIALS 256u

struct feed_head {
	uint64_t magic;
	uint32_t producer;
	uint32_t len;      /* bytes of the batch, header included */
	uint64_t seq;      /* per producer */
	uint64_t sum;      /* feed_sum() of the payload */
};

/* One word of the checksum: position-dependent, summed (so that a device
 * may add partial sums in any order). */
static inline uint64_t feed_term(uint64_t i, uint64_t w)
{
	uint64_t x = w ^ (i * 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Word i of the payload that seed @p seed generates. */
static inline uint64_t feed_word(uint64_t seed, uint64_t i)
{
	return seed + i * 0x2545f4914f6cdd1dull;
}

/* The checksum of @p n payload words. */
static inline uint64_t feed_sum(const uint64_t *w, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += feed_term(i, w[i]);
	return s;
}

/* The ring capacity per producer of a channel whose records may be @p max
 * bytes (a power of two; max_message is capacity / 2 - 32). */
static inline uint64_t feed_capacity(size_t max)
{
	uint64_t cap = PINSHM_MIN_CAPACITY;

	while (cap / 2 < max + 64)
		cap *= 2;
	return cap;
}

/* Host memory a copy reads or writes. */
struct feed_host {
	void *ptr;
	void *buffer;    /* OpenCL: a cl_mem holding it (registered record, pinned allocation); NULL: none */
	uint64_t offset; /* its offset in buffer */
};

/* Times of one slot's last round, seconds (device clocks). */
struct feed_times {
	double copy, compute;
};

struct feed_dev;

struct feed_ops {
	const char *name;
	/* The pinshm device (for pinshm_channel_register() and the rest). */
	pinshm_device_t *(*device)(struct feed_dev *d);
	/* Make the spin part of compute/fill last @p us microseconds (0: none);
	 * set *got to what a measurement gave. */
	int (*calibrate)(struct feed_dev *d, double us, double *got, char *why);
	int (*copy_in)(struct feed_dev *d, unsigned slot, const struct feed_host *src, size_t len, void **event,
		       char *why);
	int (*compute)(struct feed_dev *d, unsigned slot, size_t len, char *why);
	int (*fill)(struct feed_dev *d, unsigned slot, size_t len, uint64_t seed, char *why);
	int (*copy_out)(struct feed_dev *d, unsigned slot, const struct feed_host *dst, size_t len, void **event,
			char *why);
	/* Wait for the slot; its checksum (of the payload: len - FEED_HEAD bytes
	 * from FEED_HEAD on) and times. */
	int (*finish)(struct feed_dev *d, unsigned slot, uint64_t *sum, struct feed_times *t, char *why);
	/* The runtime's own pinned host memory (cuMemHostAlloc,
	 * CL_MEM_ALLOC_HOST_PTR), mapped; free with host_free. */
	int (*host_alloc)(struct feed_dev *d, size_t len, struct feed_host *h, char *why);
	void (*host_free)(struct feed_dev *d, struct feed_host *h);
	/* One synchronous copy between @p h and slot 0 (@p to_device: h2d),
	 * from any host memory (h->buffer NULL: pageable or unregistered). */
	int (*copy_sync)(struct feed_dev *d, bool to_device, const struct feed_host *h, size_t len, char *why);
	void (*close)(struct feed_dev *d);
};

struct feed_dev {
	const struct feed_ops *ops;
	unsigned depth;
	size_t batch;
};

/* Open a backend with @p depth slots of @p batch bytes.  -ENODEV where
 * the runtime or a device is missing, -ENOTSUP where it was not built;
 * why says what. */
int feed_cuda_open(unsigned depth, size_t batch, struct feed_dev **out, char *why);
int feed_opencl_open(unsigned depth, size_t batch, struct feed_dev **out, char *why);

/* feed_bench.c: the copy benchmark (--bench copy). */
struct feed_report;
int feed_bench_copy(struct feed_dev *d, size_t min_size, size_t max_size, struct feed_report *rep);

/* feed_report.c: rows of figures as a table, CSV or JSON. */
enum feed_format { FEED_TABLE, FEED_CSV, FEED_JSON };

#define FEED_MAX_COLS 24

struct feed_report {
	enum feed_format format;
	unsigned ncols, nrows;
	const char *cols[FEED_MAX_COLS];
	bool first;
};

void feed_report_begin(struct feed_report *r, enum feed_format f, const char *const *cols, unsigned ncols);
/* One row: ncols values, printf'ed already (quoted in JSON where
 * @p text[i]; "-": not applicable, JSON's null). */
void feed_report_row(struct feed_report *r, char vals[][32], const bool *text);
void feed_report_end(struct feed_report *r);

double feed_now(void);

#endif /* PINSHM_FEED_H */
