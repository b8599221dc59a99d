/*
 * pool.c - the classes of ready segments, filled from idle time.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "pool.h"

void pool_init(struct pool *p, struct account *acct)
{
	*p = (struct pool){.acct = acct, .fill = {.fd = -1, .base = NULL}};
}

/* Destroy @p s, a segment of the pool: at once, or a slice a turn in
 * @p later (its charge is gone already; unmapping unlocks).  Its pages
 * are punched out with each slice (never handed out: none is kept), so
 * that the close at the end has nothing left to free in one turn. */
static void pool_destroy(struct segment *s, struct dying **later)
{
	if (!later) {
		segment_destroy(s);
		return;
	}
	s->release = true;
	s->keep = 0;
	dying_add(later, s);
}

/* Give up the segment being filled: unmapping it unlocks what was locked,
 * and its whole charge goes.  @return its bytes (0: none was). */
static uint64_t fill_abandon(struct pool *p, const char *why, struct dying **later)
{
	uint64_t bytes = p->fill.size;

	if (!p->fill_class)
		return 0;
	log_info("pool: the segment of %zu bytes being filled (%zu locked) destroyed: %s", p->fill.size,
		 p->fill_locked, why);
	p->acct->pinned -= bytes;
	pool_destroy(&p->fill, later);
	p->fill = (struct segment){.fd = -1, .base = NULL};
	p->fill_class = NULL;
	p->fill_locked = 0;
	return bytes;
}

static void class_drain(struct pool *p, struct pool_class *c, struct dying **later)
{
	while (c->n > 0) {
		struct segment *s = &c->segs[--c->n];
		p->acct->pinned -= s->size;
		pool_destroy(s, later);
	}
}

uint64_t pool_drain(struct pool *p, struct dying **later)
{
	uint64_t bytes = pool_bytes(p) - pool_filling_bytes(p, NULL);

	for (unsigned i = 0; i < p->nclasses; i++)
		class_drain(p, &p->classes[i], later);
	if (bytes)
		log_info("pool: %llu bytes of ready segments destroyed%s", (unsigned long long)bytes,
			 later ? " (unmapped in slices)" : "");
	return bytes + fill_abandon(p, "the pool is emptied", later);
}

/* Forget the classes (drained). */
static void classes_free(struct pool *p)
{
	for (unsigned i = 0; i < p->nclasses; i++)
		free(p->classes[i].segs);
	free(p->classes);
	p->classes = NULL;
	p->nclasses = 0;
}

void pool_fini(struct pool *p)
{
	pool_drain(p, NULL);
	classes_free(p);
}

static int by_size(const void *a, const void *b)
{
	size_t x = ((const struct pool_class *)a)->size, y = ((const struct pool_class *)b)->size;

	return (x > y) - (x < y);
}

int pool_configure(struct pool *p, const uint64_t *sizes, unsigned nsizes, unsigned per_size, struct dying **later)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	pool_drain(p, later); /* the ready segments unmapped in slices, off this turn, where @p later */
	classes_free(p);
	p->stopped = false;
	p->target = per_size;
	if (per_size == 0 || nsizes == 0)
		return 0;
	p->classes = calloc(nsizes, sizeof(*p->classes));
	if (!p->classes)
		return -ENOMEM;
	for (unsigned i = 0; i < nsizes; i++) {
		struct pool_class *c = &p->classes[p->nclasses];
		c->size = (size_t)(sizes[i] + page - 1) / page * page;
		c->segs = calloc(per_size, sizeof(*c->segs));
		if (!c->segs) {
			pool_fini(p);
			return -ENOMEM;
		}
		p->nclasses++;
	}
	qsort(p->classes, p->nclasses, sizeof(*p->classes), by_size);
	return 0;
}

bool pool_wants(const struct pool *p)
{
	if (p->stopped)
		return false;
	if (p->fill_class)
		return true; /* charged already */
	for (unsigned i = 0; i < p->nclasses; i++) {
		const struct pool_class *c = &p->classes[i];
		if (c->n < p->target && p->acct->pinned + c->size <= p->acct->cfg->budget)
			return true;
	}
	return false;
}

/* Start a segment for the class that lacks most, charged whole. */
static void fill_start(struct pool *p)
{
	struct pool_class *best = NULL;

	for (unsigned i = 0; i < p->nclasses; i++) {
		struct pool_class *c = &p->classes[i];
		if (c->n < p->target && p->acct->pinned + c->size <= p->acct->cfg->budget &&
		    (!best || c->n < best->n))
			best = c;
	}
	if (!best)
		return;
	const struct segment_opts o = {.node = PINSHM_NODE_ANY, .lock_later = true};
	int rc = segment_alloc(&p->fill, best->size, &o, "pool");
	if (rc != 0) {
		log_warn("pool: cannot make a segment of %zu bytes: %s; the pool stops filling", best->size,
			 strerror(-rc));
		p->stopped = true;
		return;
	}
	p->acct->pinned += p->fill.size;
	p->fill_class = best;
	p->fill_locked = 0;
	log_debug("pool: filling a segment of %zu bytes, %u bytes a step", p->fill.size, POOL_SLICE_BYTES);
}

/* The refill stops here, until a create takes a segment or frees room:
 * all that was asked for, or what the budget allows. */
static void log_full(const struct pool *p)
{
	for (unsigned i = 0; i < p->nclasses; i++)
		if (p->classes[i].n < p->target) {
			log_debug("pool: filled as far as the budget allows (%llu of %llu bytes pinned)",
				  (unsigned long long)p->acct->pinned, (unsigned long long)p->acct->cfg->budget);
			return;
		}
	log_debug("pool: filled, %u ready segments of each size", p->target);
}

void pool_refill(struct pool *p)
{
	if (p->stopped)
		return;
	if (!p->fill_class)
		fill_start(p);
	if (!p->fill_class)
		return;
	size_t locked = p->fill_locked;
	int rc = segment_lock_step(&p->fill, &p->fill_locked, POOL_SLICE_BYTES);
	if (rc > 0)
		return; /* more slices, from the next idle turns */
	if (rc < 0) {
		log_warn("pool: segments cannot be pinned (%s, %zu of %zu bytes locked); the pool stops filling",
			 p->fill.pin_error, locked, p->fill.size);
		fill_abandon(p, "not pinned", NULL);
		p->stopped = true;
		return;
	}
	struct pool_class *c = p->fill_class;
	if (c->n >= p->target) { /* filled up meanwhile (pool_put_back) */
		fill_abandon(p, "its class is full", NULL);
		return;
	}
	c->segs[c->n++] = p->fill;
	p->fill_class = NULL;
	p->fill_locked = 0;
	p->fill = (struct segment){.fd = -1, .base = NULL};
	log_debug("pool: ready segment of %zu bytes (%u of %u)", c->size, c->n, p->target);
	if (!pool_wants(p))
		log_full(p);
}

bool pool_take(struct pool *p, size_t size, struct segment *out)
{
	for (unsigned i = 0; i < p->nclasses; i++) {
		struct pool_class *c = &p->classes[i];
		if (c->size < size)
			continue;
		if (c->size - size > c->size / 8)
			break; /* the classes that follow are larger still */
		if (c->n == 0)
			continue;
		*out = c->segs[--c->n];
		p->acct->pinned -= out->size;
		p->hits++;
		log_debug("pool hit: %zu bytes for %zu (%llu hits, %llu misses)", c->size, size,
			  (unsigned long long)p->hits, (unsigned long long)p->misses);
		return true;
	}
	p->misses++;
	log_debug("pool miss: %zu bytes (%llu hits, %llu misses)", size, (unsigned long long)p->hits,
		  (unsigned long long)p->misses);
	return false;
}

void pool_put_back(struct pool *p, struct segment *s)
{
	for (unsigned i = 0; i < p->nclasses; i++) {
		struct pool_class *c = &p->classes[i];
		if (c->size == s->size && c->n < p->target) {
			c->segs[c->n++] = *s;
			p->acct->pinned += s->size;
			p->hits--;
			return;
		}
	}
	segment_destroy(s); /* its class went with a reload */
}

uint64_t pool_bytes(const struct pool *p)
{
	uint64_t bytes = pool_filling_bytes(p, NULL);

	for (unsigned i = 0; i < p->nclasses; i++)
		bytes += (uint64_t)p->classes[i].n * p->classes[i].size;
	return bytes;
}

uint64_t pool_filling_bytes(const struct pool *p, uint64_t *locked)
{
	if (locked)
		*locked = p->fill_class ? p->fill_locked : 0;
	return p->fill_class ? p->fill.size : 0;
}

unsigned pool_stat(const struct pool *p, struct pool_class_stat *out, unsigned max)
{
	unsigned n = p->nclasses < max ? p->nclasses : max;

	for (unsigned i = 0; i < n; i++) {
		const struct pool_class *c = &p->classes[i];
		bool filling = p->fill_class == c;
		out[i] = (struct pool_class_stat){
			.size = c->size,
			.wanted = p->target,
			.ready = c->n,
			.filling = filling,
			.locked = filling ? p->fill_locked : 0,
		};
	}
	return n;
}
