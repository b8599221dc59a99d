/*
 * pinshm-feed - a double-buffered feed of batches from producer processes
 * to a device, with no host copy: the example to copy, and the benchmark.
 *
 * h2d (default): producer processes reserve a batch in a queue, write it
 * in place (a header with its checksum, then payload words) and commit.
 * The consumer (this process) registers its handle with the device,
 * receives batch k in place, starts its copy to device slot k % depth on
 * the copy stream while the device computes (a spin kernel of --kernel-us,
 * then the checksum) on the batches before it on the compute stream, and
 * releases each record with pinshm_release_after() and the copy's event:
 * a record goes back to its producer only when the copy that read it
 * completed.  The checksum computed by the device is compared with the
 * producer's.
 *
 * d2h: the device fills batches (spin, generate, checksum) and copies them
 * into records reserved on a topic, one producer handle per slot (a handle
 * holds one reservation at a time); each is committed once its copy
 * completed, and subscriber processes check every batch.
 *
 * host_copies counts every memcpy of batch bytes between producer and
 * device that the feed makes: 0 on the in-place path; --staged takes the
 * usual path instead (the record copied into the runtime's pinned memory,
 * then to the device) to compare.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feed.h"

#define MAX_PROCS 64
#define POLL_MS 50
#define EXIT_SKIP 77 /* no such device or runtime: the tests' "skipped" */

struct options {
	const char *device; /* "cuda" or "opencl" */
	bool d2h, overrun, staged, daemon;
	const char *socket;
	unsigned producers, subscribers, depth;
	size_t batch;
	uint64_t batches;  /* in all; 0: --seconds */
	double seconds;
	double kernel_us;
	enum feed_format format;
	const char *bench; /* "copy", or NULL */
	size_t min_size, max_size;
	uint64_t kill_after; /* producer 0 dies mid-batch after this many (0: never) */
	char name[PINSHM_NAME_MAX + 1];
};

/* Shared by the feed's processes. */
struct tally {
	_Atomic unsigned ready, go, stop;
	_Atomic uint64_t committed[MAX_PROCS]; /* h2d: by each producer */
	_Atomic uint64_t received[MAX_PROCS], bad[MAX_PROCS]; /* d2h: by each subscriber */
};

/* What the consumer or the filler counts. */
struct figures {
	uint64_t done, ok, bad, dropped, lost, host_copies, killed;
	double copy, compute, wall, kernel_us;
	double wait; /* h2d: in receives (no batch ready: the producers are slower) */
};

static const char *prog = "pinshm-feed";

static uint64_t seed_of(uint64_t who, uint64_t seq)
{
	return feed_term(who, seq) | 1;
}

/* ---- channels ---------------------------------------------------------- */

static void channel_attr(const struct options *o, pinshm_channel_attr_t *attr)
{
	uint64_t cap = feed_capacity(o->batch);

	if (o->batch <= (16u << 20))
		cap *= 2; /* room for the next batch while one is held */
	pinshm_channel_attr_init(attr);
	attr->capacity = cap;
	attr->kind = o->d2h || o->overrun ? PINSHM_TOPIC : PINSHM_QUEUE;
	attr->flags = o->overrun ? PINSHM_OVERRUN : 0;
	attr->max_producers = o->d2h ? o->depth : o->producers;
	attr->max_consumers = o->d2h ? o->subscribers : 1;
}

/* Attach as @p role: to segment @p fd, or by name through the daemon. */
static int open_channel(int fd, const struct options *o, pinshm_role_t role, pinshm_client_t *client,
			pinshm_channel_t **ch)
{
	if (!o->daemon)
		return pinshm_channel_attach(fd, role, ch);
	int rc = pinshm_open(client, o->name, role, ch);
	if (rc != 0)
		fprintf(stderr, "%s: open %s: %s\n", prog, o->name, pinshm_client_error(client));
	return rc;
}

/* ---- producers (h2d) and subscribers (d2h): child processes ----------- */

/*
 * A producer's payloads: generated once (FEED_PAYLOADS of them, each with
 * its own seed and checksum), then written into each batch in turn, as a
 * data loader writes what it decoded, so that producers keep up with a
 * GPU's copy engine (generating words and their checksum runs at a few
 * GB/s per core).
 */
#define FEED_PAYLOADS 2

struct payloads {
	size_t words;
	uint64_t *w[FEED_PAYLOADS];
	uint64_t sum[FEED_PAYLOADS];
};

static int payloads_make(struct payloads *pl, const struct options *o, unsigned id)
{
	pl->words = (o->batch - FEED_HEAD) / 8;
	for (unsigned k = 0; k < FEED_PAYLOADS; k++) {
		uint64_t seed = seed_of(id, k);
		pl->w[k] = malloc(pl->words * 8);
		if (!pl->w[k])
			return -ENOMEM;
		for (size_t i = 0; i < pl->words; i++)
			pl->w[k][i] = feed_word(seed, i);
		pl->sum[k] = feed_sum(pl->w[k], pl->words);
	}
	return 0;
}

static void write_batch(void *buf, const struct options *o, const struct payloads *pl, unsigned id, uint64_t seq,
			bool die_midway)
{
	struct feed_head *h = buf;
	unsigned k = (unsigned)(seq % FEED_PAYLOADS);
	char *payload = (char *)buf + FEED_HEAD;
	size_t bytes = pl->words * 8;

	*h = (struct feed_head){ .magic = FEED_MAGIC, .producer = id, .len = (uint32_t)o->batch, .seq = seq,
				 .sum = pl->sum[k] };
	if (die_midway) { /* --kill-producer-after: killed mid-batch */
		memcpy(payload, pl->w[k], bytes / 2);
		raise(SIGKILL);
	}
	memcpy(payload, pl->w[k], bytes);
}

static int run_producer(int fd, const struct options *o, unsigned id, struct tally *t, pinshm_client_t *client)
{
	struct payloads pl = { 0 };
	pinshm_channel_t *ch;
	int rc = payloads_make(&pl, o, id);

	if (rc != 0 || (rc = open_channel(fd, o, PINSHM_PRODUCER, client, &ch)) != 0)
		return 1;
	atomic_fetch_add(&t->ready, 1);
	while (!atomic_load(&t->go))
		usleep(100);
	uint64_t quota = o->batches ? o->batches / o->producers + (id < o->batches % o->producers) : UINT64_MAX;
	for (uint64_t seq = 0; seq < quota && !atomic_load(&t->stop); seq++) {
		void *buf;
		rc = pinshm_reserve(ch, o->batch, &buf, POLL_MS);
		if (rc == -ETIMEDOUT) {
			seq--;
			continue;
		}
		if (rc != 0) {
			fprintf(stderr, "%s: producer %u: reserve: %s (%s)\n", prog, id, pinshm_strerror(rc),
				pinshm_channel_error(ch));
			break;
		}
		write_batch(buf, o, &pl, id, seq, id == 0 && o->kill_after && seq == o->kill_after);
		pinshm_commit(ch, o->batch, 0);
		atomic_fetch_add(&t->committed[id], 1);
	}
	pinshm_channel_close(ch);
	for (unsigned k = 0; k < FEED_PAYLOADS; k++)
		free(pl.w[k]);
	return rc == 0 ? 0 : 1;
}

/* d2h: check each batch (on the host: the subscriber is the reader). */
static int run_subscriber(int fd, const struct options *o, unsigned id, struct tally *t, pinshm_client_t *client)
{
	pinshm_channel_t *ch;
	pinshm_msg_t m;
	int rc = open_channel(fd, o, PINSHM_CONSUMER, client, &ch);

	if (rc != 0)
		return 1;
	atomic_fetch_add(&t->ready, 1);
	while ((rc = pinshm_recv_inplace(ch, &m, PINSHM_FOREVER)) == 0) {
		const struct feed_head *h = m.data;
		bool good = m.len == o->batch && h->magic == FEED_MAGIC && h->len == m.len &&
			    h->sum == feed_sum((const uint64_t *)((const char *)m.data + FEED_HEAD),
					       (m.len - FEED_HEAD) / 8);
		atomic_fetch_add(good ? &t->received[id] : &t->bad[id], 1);
		pinshm_release(ch, &m);
	}
	pinshm_channel_close(ch);
	return rc == -EPIPE ? 0 : 1;
}

typedef int (*child_fn)(int, const struct options *, unsigned, struct tally *, pinshm_client_t *);

static pid_t spawn(child_fn body, int fd, const struct options *o, unsigned id, struct tally *t)
{
	fflush(stdout);
	pid_t pid = fork();

	if (pid == 0) {
		pinshm_client_t *client = NULL;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (o->daemon && pinshm_connect(o->socket, &client) != 0)
			_exit(1);
		int rc = body(fd, o, id, t, client);
		pinshm_disconnect(client);
		_exit(rc);
	}
	return pid;
}

/* Reap the children that ended; @return how many still run. */
static unsigned reap(pid_t *pids, unsigned n, struct figures *f, bool block)
{
	unsigned running = 0;

	for (unsigned i = 0; i < n; i++) {
		int st;
		if (pids[i] <= 0)
			continue;
		if (waitpid(pids[i], &st, block ? 0 : WNOHANG) != pids[i]) {
			running++;
			continue;
		}
		if (WIFSIGNALED(st)) {
			fprintf(stderr, "%s: process %u was killed (signal %d)\n", prog, i, WTERMSIG(st));
			f->killed++;
		} else if (WEXITSTATUS(st) != 0) {
			fprintf(stderr, "%s: process %u failed (exit %d)\n", prog, i, WEXITSTATUS(st));
			f->bad++;
		}
		pids[i] = 0;
	}
	return running;
}

/* Wait until @p want children are ready.  @return 0, or -ECHILD (said)
 * where one ended first (it failed to connect, attach or allocate): the
 * others are killed, since they would wait for it forever. */
static int wait_ready(struct tally *t, unsigned want, pid_t *pids, unsigned n, struct figures *f)
{
	while (atomic_load(&t->ready) < want) {
		if (reap(pids, n, f, false) < n && atomic_load(&t->ready) < want) {
			fprintf(stderr, "%s: a child process ended before it was ready\n", prog);
			for (unsigned i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			return -ECHILD;
		}
		usleep(1000);
	}
	return 0;
}

/* ---- the consumer's pipeline (h2d) ------------------------------------ */

struct inflight {
	bool used, stale;
	pinshm_msg_t msg;
	uint64_t sum; /* the producer's, from the header */
};

struct pipe_state {
	const struct options *o;
	struct feed_dev *d;
	pinshm_channel_t *ch;
	struct inflight slot[FEED_MAX_DEPTH];
	struct feed_host stage[FEED_MAX_DEPTH]; /* --staged */
	struct figures *f;
	char why[FEED_WHY];
};

/* Where the device finds @p len bytes at @p ptr of registered handle @p ch
 * (OpenCL: pinshm's buffer and an offset; CUDA: the host pointer, which
 * the driver knows as registered, mapped or not). */
static int host_of(pinshm_channel_t *ch, pinshm_device_t *dev, void *ptr, size_t len, struct feed_host *h)
{
	pinshm_device_addr_t a = { 0 };
	int rc = pinshm_device_addr(ch, dev, ptr, len, &a);

	if (rc != 0 && rc != -ENOTSUP)
		return rc;
	*h = (struct feed_host){ .ptr = ptr, .buffer = a.buffer, .offset = a.offset };
	return 0;
}

/* Mark the in-flight batches that were overwritten while held. */
static int collect_stale(struct pipe_state *p)
{
	pinshm_msg_t stale[64];
	unsigned n = 0;
	int left = pinshm_release_poll(p->ch, stale, 64, &n);

	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < p->o->depth; k++)
			if (p->slot[k].used && memcmp(&p->slot[k].msg, &stale[i], sizeof(stale[i])) == 0)
				p->slot[k].stale = true;
	return left;
}

static int finish_h2d(struct pipe_state *p, unsigned k)
{
	struct inflight *s = &p->slot[k];
	struct feed_times t;
	uint64_t sum;
	int rc = p->d->ops->finish(p->d, k, &sum, &t, p->why);

	if (rc != 0)
		return rc;
	int left = collect_stale(p);
	if (left < 0)
		return left;
	p->f->done++;
	p->f->copy += t.copy;
	p->f->compute += t.compute;
	if (s->stale)
		p->f->dropped++;
	else if (sum != s->sum)
		p->f->bad++;
	else
		p->f->ok++;
	s->used = false;
	return 0;
}

/* Start batch @p m on slot @p k: copy in place (or staged), release after
 * the copy, compute. */
static int start_h2d(struct pipe_state *p, unsigned k, const pinshm_msg_t *m)
{
	const struct feed_head *h = m->data;
	struct inflight *s = &p->slot[k];
	struct feed_host src = { .ptr = (void *)m->data };
	pinshm_device_t *dev = p->d->ops->device(p->d);
	void *ev;
	int rc;

	*s = (struct inflight){ .used = true, .msg = *m, .sum = h->sum };
	if (p->o->staged) {
		memcpy(p->stage[k].ptr, m->data, m->len);
		p->f->host_copies++;
		src = p->stage[k];
		pinshm_release(p->ch, m);
	} else if ((rc = host_of(p->ch, dev, (void *)m->data, m->len, &src)) != 0) {
		return rc;
	}
	rc = p->d->ops->copy_in(p->d, k, &src, m->len, &ev, p->why);
	if (rc != 0)
		return rc;
	if (!p->o->staged) {
		rc = pinshm_release_after(p->ch, m, dev, ev);
		if (rc == -ESTALE)
			s->stale = true;
		else if (rc != 0)
			return rc;
	}
	return p->d->ops->compute(p->d, k, m->len, p->why);
}

/* A record that is no batch of ours: counted bad, released. */
static bool foreign(const struct options *o, const pinshm_msg_t *m)
{
	const struct feed_head *h = m->data;

	return m->len != o->batch || h->magic != FEED_MAGIC || h->len != m->len;
}

static int pipeline_h2d(struct pipe_state *p, pid_t *pids, struct tally *t)
{
	const struct options *o = p->o;
	double start = feed_now();
	uint64_t k = 0;
	int rc = 0;

	atomic_store(&t->go, 1);
	for (;;) {
		unsigned slot = (unsigned)(k % o->depth);
		if (p->slot[slot].used && (rc = finish_h2d(p, slot)) != 0)
			break;
		pinshm_msg_t m;
		double t0 = feed_now();
		rc = pinshm_recv_inplace(p->ch, &m, POLL_MS);
		p->f->wait += feed_now() - t0;
		if (o->seconds > 0 && feed_now() - start >= o->seconds)
			atomic_store(&t->stop, 1);
		if (rc == -ETIMEDOUT || rc == -EAGAIN) {
			if (reap(pids, o->producers, p->f, false) == 0 &&
			    (rc = pinshm_recv_inplace(p->ch, &m, PINSHM_NONBLOCK)) == -EAGAIN)
				break;
			if (rc != 0)
				continue;
		}
		if (rc != 0)
			break;
		p->f->lost += m.lost;
		if (foreign(o, &m)) {
			p->f->bad++;
			pinshm_release(p->ch, &m);
			continue;
		}
		if ((rc = start_h2d(p, slot, &m)) != 0)
			break;
		k++;
	}
	if (rc == -EPIPE || rc == -EAGAIN)
		rc = 0;
	for (unsigned i = 0; i < o->depth; i++, k++) {
		unsigned slot = (unsigned)(k % o->depth);
		if (p->slot[slot].used) {
			int r = finish_h2d(p, slot);
			rc = rc ? rc : r;
		}
	}
	p->f->wall = feed_now() - start;
	return rc;
}

/* ---- the filler's pipeline (d2h) --------------------------------------- */

struct fill_state {
	const struct options *o;
	struct feed_dev *d;
	pinshm_channel_t *ch[FEED_MAX_DEPTH];
	struct feed_host stage[FEED_MAX_DEPTH];
	void *room[FEED_MAX_DEPTH];
	uint64_t seq[FEED_MAX_DEPTH];
	struct figures *f;
	char why[FEED_WHY];
};

static int finish_d2h(struct fill_state *p, unsigned k)
{
	struct feed_times t;
	uint64_t sum;
	int rc = p->d->ops->finish(p->d, k, &sum, &t, p->why);

	if (rc != 0)
		return rc;
	if (p->o->staged) {
		memcpy(p->room[k], p->stage[k].ptr, p->o->batch);
		p->f->host_copies++;
	}
	/* The device wrote the payload; the header is ours. */
	*(struct feed_head *)p->room[k] = (struct feed_head){ .magic = FEED_MAGIC, .producer = k,
		.len = (uint32_t)p->o->batch, .seq = p->seq[k], .sum = sum };
	rc = pinshm_commit(p->ch[k], p->o->batch, 0);
	p->room[k] = NULL;
	p->f->done++;
	p->f->ok++;
	p->f->copy += t.copy;
	p->f->compute += t.compute;
	return rc;
}

static int start_d2h(struct fill_state *p, unsigned k, uint64_t seq)
{
	pinshm_device_t *dev = p->d->ops->device(p->d);
	struct feed_host dst;
	void *ev;
	int rc = p->d->ops->fill(p->d, k, p->o->batch, seed_of(k, seq), p->why);

	if (rc == 0)
		rc = pinshm_reserve(p->ch[k], p->o->batch, &p->room[k], PINSHM_FOREVER);
	if (rc != 0)
		return rc;
	p->seq[k] = seq;
	if (p->o->staged) {
		dst = p->stage[k];
	} else if ((rc = host_of(p->ch[k], dev, p->room[k], p->o->batch, &dst)) != 0) {
		return rc;
	}
	return p->d->ops->copy_out(p->d, k, &dst, p->o->batch, &ev, p->why);
}

static int pipeline_d2h(struct fill_state *p, struct tally *t)
{
	const struct options *o = p->o;
	double start = feed_now();
	uint64_t k = 0;
	int rc = 0;

	for (; o->batches ? k < o->batches : feed_now() - start < o->seconds; k++) {
		unsigned slot = (unsigned)(k % o->depth);
		if (p->room[slot] && (rc = finish_d2h(p, slot)) != 0)
			break;
		if ((rc = start_d2h(p, slot, k)) != 0)
			break;
	}
	for (unsigned i = 0; i < o->depth; i++, k++) {
		unsigned slot = (unsigned)(k % o->depth);
		if (p->room[slot]) {
			int r = finish_d2h(p, slot);
			rc = rc ? rc : r;
		}
	}
	p->f->wall = feed_now() - start;
	(void)t;
	return rc;
}

/* ---- setup and report --------------------------------------------------- */

static int open_device(const struct options *o, struct feed_dev **d, char *why)
{
	unsigned slots = o->bench ? 1 : o->depth;
	size_t size = o->bench ? o->max_size : o->batch;

	if (strcmp(o->device, "cuda") == 0)
		return feed_cuda_open(slots, size, d, why);
	return feed_opencl_open(slots, size, d, why);
}

static void report(const struct options *o, const struct figures *f)
{
	static const char *const cols[] = { "device", "direction", "procs", "depth", "batch", "batches",
					     "dropped", "lost", "bad", "wall_s", "batches_s", "GB_s",
					     "copy_us", "compute_us", "kernel_us", "wait_us", "overlap", "host_copies" };
	static const bool text[] = { true, true };
	char v[18][32];
	struct feed_report r;
	double n = f->done ? (double)f->done : 1, busy = f->copy + f->compute;
	int i = 0;

	snprintf(v[i++], 32, "%s", o->device);
	snprintf(v[i++], 32, "%s%s", o->d2h ? "d2h" : "h2d", o->staged ? "-staged" : "");
	snprintf(v[i++], 32, "%u", o->d2h ? o->subscribers : o->producers);
	snprintf(v[i++], 32, "%u", o->depth);
	snprintf(v[i++], 32, "%zu", o->batch);
	snprintf(v[i++], 32, "%" PRIu64, f->done);
	snprintf(v[i++], 32, "%" PRIu64, f->dropped);
	snprintf(v[i++], 32, "%" PRIu64, f->lost);
	snprintf(v[i++], 32, "%" PRIu64, f->bad);
	snprintf(v[i++], 32, "%.3f", f->wall);
	snprintf(v[i++], 32, "%.1f", f->wall > 0 ? (double)f->done / f->wall : 0);
	snprintf(v[i++], 32, "%.3f", f->wall > 0 ? (double)f->done * (double)o->batch / f->wall / 1e9 : 0);
	snprintf(v[i++], 32, "%.1f", f->copy / n * 1e6);
	snprintf(v[i++], 32, "%.1f", f->compute / n * 1e6);
	snprintf(v[i++], 32, "%.1f", f->kernel_us);
	snprintf(v[i++], 32, "%.1f", f->wait / n * 1e6);
	snprintf(v[i++], 32, "%.3f", busy > 0 ? f->wall / busy : 0);
	snprintf(v[i++], 32, "%" PRIu64, f->host_copies);
	bool t[18] = { 0 };
	memcpy(t, text, sizeof(text));
	feed_report_begin(&r, o->format, cols, 18);
	feed_report_row(&r, v, t);
	feed_report_end(&r);
}

/* The consumer: its handle registered, staging where asked, the pipeline. */
static int consume(const struct options *o, struct feed_dev *d, int fd, pinshm_client_t *client, pid_t *pids,
		   struct tally *t, struct figures *f)
{
	struct pipe_state p = { .o = o, .d = d, .f = f };
	int rc = open_channel(fd, o, PINSHM_CONSUMER, client, &p.ch);

	if (rc != 0)
		return rc;
	rc = pinshm_channel_register(p.ch, d->ops->device(d), 0);
	if (rc != 0)
		snprintf(p.why, FEED_WHY, "register: %s", pinshm_channel_error(p.ch));
	for (unsigned k = 0; rc == 0 && o->staged && k < o->depth; k++)
		rc = d->ops->host_alloc(d, o->batch, &p.stage[k], p.why);
	if (rc == 0)
		rc = wait_ready(t, o->producers, pids, o->producers, f);
	if (rc == 0)
		rc = pipeline_h2d(&p, pids, t);
	if (rc != 0)
		fprintf(stderr, "%s: %s (%s%s%s)\n", prog, pinshm_strerror(rc), p.why, *p.why ? "; " : "",
			pinshm_channel_error(p.ch));
	atomic_store(&t->stop, 1);
	pinshm_channel_close(p.ch); /* waits for pending copies, unregisters */
	for (unsigned k = 0; o->staged && k < o->depth; k++)
		if (p.stage[k].ptr)
			d->ops->host_free(d, &p.stage[k]);
	return rc;
}

/* The filler: a producer handle per slot, each registered. */
static int produce(const struct options *o, struct feed_dev *d, int fd, pinshm_client_t *client, pid_t *pids,
		   struct tally *t, struct figures *f)
{
	struct fill_state p = { .o = o, .d = d, .f = f };
	int rc = wait_ready(t, o->subscribers, pids, o->subscribers, f);

	for (unsigned k = 0; rc == 0 && k < o->depth; k++) {
		rc = open_channel(fd, o, PINSHM_PRODUCER, client, &p.ch[k]);
		if (rc == 0 && (rc = pinshm_channel_register(p.ch[k], d->ops->device(d), 0)) != 0)
			snprintf(p.why, FEED_WHY, "register: %s", pinshm_channel_error(p.ch[k]));
		if (rc == 0 && o->staged)
			rc = d->ops->host_alloc(d, o->batch, &p.stage[k], p.why);
	}
	if (rc == 0)
		rc = pipeline_d2h(&p, t);
	if (rc != 0)
		fprintf(stderr, "%s: %s (%s)\n", prog, pinshm_strerror(rc), p.why);
	for (unsigned k = 0; k < o->depth; k++) {
		if (p.ch[k])
			pinshm_channel_close(p.ch[k]);
		if (p.stage[k].ptr)
			d->ops->host_free(d, &p.stage[k]);
	}
	return rc;
}

static int make_channel(struct options *o, int *fd, pinshm_client_t **client)
{
	pinshm_channel_attr_t attr;
	int rc;

	channel_attr(o, &attr);
	*fd = -1;
	*client = NULL;
	if (!o->daemon)
		return pinshm_segment_create(&attr, fd);
	snprintf(o->name, sizeof(o->name), "pinshm-feed.%d", (int)getpid());
	rc = pinshm_connect(o->socket, client);
	if (rc == 0 && (rc = pinshm_create(*client, o->name, &attr, 0600, 0)) != 0)
		fprintf(stderr, "%s: create: %s\n", prog, pinshm_client_error(*client));
	return rc;
}

/* The children stopped and reaped, their counts checked against the
 * parent's: @return @p rc, or -EPROTO where batches are missing. */
static int settle(const struct options *o, struct tally *t, pid_t *pids, unsigned nproc, struct figures *f, int rc)
{
	atomic_store(&t->stop, 1);
	atomic_store(&t->go, 1);
	reap(pids, nproc, f, true);
	uint64_t want = 0;
	for (unsigned i = 0; i < nproc; i++) {
		if (o->d2h) {
			f->bad += t->bad[i];
			want += f->done;
			f->ok += t->received[i];
		} else {
			want += t->committed[i];
		}
	}
	if (o->d2h)
		f->ok -= f->done; /* the filler's own count, replaced by what subscribers checked */
	if (rc == 0 && f->ok + f->dropped + f->lost != want) {
		fprintf(stderr, "%s: %" PRIu64 " batches checked right, %" PRIu64 " dropped or lost, %" PRIu64
			" expected\n", prog, f->ok, f->dropped + f->lost, want);
		rc = -EPROTO;
	}
	return rc;
}

static int run_feed(struct options *o, struct feed_dev *d, struct figures *f)
{
	pinshm_client_t *client;
	pid_t pids[MAX_PROCS] = { 0 };
	int fd, rc = make_channel(o, &fd, &client);
	unsigned nproc = o->d2h ? o->subscribers : o->producers;

	if (rc != 0) {
		fprintf(stderr, "%s: cannot create the channel: %s\n", prog, pinshm_strerror(rc));
		return rc;
	}
	struct tally *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED) {
		rc = -errno;
		fprintf(stderr, "%s: mmap: %s\n", prog, strerror(errno));
		nproc = 0;
	}
	for (unsigned i = 0; rc == 0 && i < nproc; i++) {
		pids[i] = spawn(o->d2h ? run_subscriber : run_producer, fd, o, i, t);
		if (pids[i] < 0) {
			rc = -errno;
			fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
			for (unsigned j = 0; j < i; j++)
				kill(pids[j], SIGKILL); /* they would wait for the one missing */
		}
	}
	if (rc == 0)
		rc = o->d2h ? produce(o, d, fd, client, pids, t, f) : consume(o, d, fd, client, pids, t, f);
	if (t != MAP_FAILED) {
		rc = settle(o, t, pids, nproc, f, rc);
		munmap(t, sizeof(*t));
	}
	if (fd >= 0)
		close(fd);
	if (client) {
		pinshm_unlink(client, o->name);
		pinshm_disconnect(client);
	}
	return rc;
}

/* ---- the command line -------------------------------------------------- */

static void usage(FILE *to)
{
	fprintf(to,
		"usage: pinshm-feed [--device cuda|opencl] [--direction h2d|d2h] [--producers N]\n"
		"                   [--subscribers N] [--batch SIZE] [--batches COUNT | --seconds S]\n"
		"                   [--depth D] [--kernel-us T] [--overrun] [--staged] [--socket SOCKET]\n"
		"                   [--format table|csv|json]\n"
		"       pinshm-feed --bench copy [--device cuda|opencl] [--min-size SIZE] [--max-size SIZE]\n"
		"                   [--format table|csv|json]\n"
		"  --device D       cuda (default: device 0) or opencl (first device of the first platform)\n"
		"  --direction      h2d (default: producers -> device) or d2h (device -> subscribers)\n"
		"  --producers N    h2d: producer processes (1..%d, default 2)\n"
		"  --subscribers N  d2h: subscriber processes (1..%d, default 2)\n"
		"  --batch SIZE     bytes per batch, a multiple of 64 from 128 (k, M, G: 2^10..; default 1M)\n"
		"  --batches COUNT  batches in all (default 1000); --seconds S: run S seconds instead\n"
		"  --depth D        batches in flight (1..%u, default 2)\n"
		"  --kernel-us T    the device's compute per batch lasts T microseconds, plus its checksum\n"
		"  --overrun        h2d: through an overrun topic (batches overwritten under a copy: dropped)\n"
		"  --staged         copy each batch through the runtime's pinned memory (the usual path)\n"
		"  --socket SOCKET  make the channel through the pinshmd at SOCKET (\"\": the default one)\n"
		"  --bench copy     the copy benchmark: GB/s from a registered record, the runtime's pinned\n"
		"                   memory, pageable memory and an unregistered record (default 64k..256M)\n"
		"  -V, --version, -h, --help\n"
		"Exit status: 0 every batch checked right, 1 failure, 2 usage, 77 no such device.\n",
		MAX_PROCS, MAX_PROCS, FEED_MAX_DEPTH);
}

/* A number with an optional binary suffix (k, M, G), from @p min to @p max. */
static bool parse_size(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = isdigit((unsigned char)arg[0]) ? strtoull(arg, &end, 0) : 0;
	if (isdigit((unsigned char)arg[0]) && errno == 0 && *end && !end[1]) {
		unsigned shift = *end == 'k' || *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 64;
		if (shift < 64 && v <= (max >> shift))
			v <<= shift, end++;
	}
	if (!isdigit((unsigned char)arg[0]) || *end || errno || v < min || v > max) {
		fprintf(stderr, "%s: %s: '%s' is not a number from %" PRIu64 " to %" PRIu64 "\n", prog, opt, arg, min,
			max);
		return false;
	}
	*out = v;
	return true;
}

static bool parse_word(const char *opt, const char *arg, const char *a, const char *b, const char *c)
{
	if (strcmp(arg, a) == 0 || strcmp(arg, b) == 0 || (c && strcmp(arg, c) == 0))
		return true;
	fprintf(stderr, "%s: %s: '%s' is not %s, %s%s%s\n", prog, opt, arg, a, b, c ? " or " : "", c ? c : "");
	return false;
}

enum { O_DEVICE = 256, O_DIRECTION, O_PRODUCERS, O_SUBSCRIBERS, O_BATCH, O_BATCHES, O_SECONDS, O_DEPTH,
       O_KERNEL, O_OVERRUN, O_STAGED, O_SOCKET, O_FORMAT, O_BENCH, O_MIN, O_MAX, O_KILL };

static bool parse_opt(struct options *o, int opt, const char *arg, const char *name)
{
	uint64_t v = 0;
	bool good = true;

	switch (opt) {
	case O_DEVICE: good = parse_word(name, arg, "cuda", "opencl", NULL); o->device = arg; break;
	case O_DIRECTION: good = parse_word(name, arg, "h2d", "d2h", NULL); o->d2h = !strcmp(arg, "d2h"); break;
	case O_PRODUCERS: good = parse_size(name, arg, 1, MAX_PROCS, &v); o->producers = (unsigned)v; break;
	case O_SUBSCRIBERS: good = parse_size(name, arg, 1, MAX_PROCS, &v); o->subscribers = (unsigned)v; break;
	case O_BATCH:
		good = parse_size(name, arg, 128, 1u << 30, &v) && (v % 64 == 0 || !fprintf(stderr,
				  "%s: --batch: %" PRIu64 " is not a multiple of 64\n", prog, v));
		o->batch = (size_t)v;
		break;
	case O_BATCHES: good = parse_size(name, arg, 1, 1ull << 40, &o->batches); break;
	case O_SECONDS:
		o->seconds = strtod(arg, NULL);
		good = o->seconds > 0 && o->seconds <= 86400;
		if (!good)
			fprintf(stderr, "%s: --seconds: '%s' is not a number of seconds from 0 to 86400\n", prog, arg);
		o->batches = 0;
		break;
	case O_DEPTH: good = parse_size(name, arg, 1, FEED_MAX_DEPTH, &v); o->depth = (unsigned)v; break;
	case O_KERNEL:
		o->kernel_us = strtod(arg, NULL);
		good = o->kernel_us >= 0 && o->kernel_us <= 1e7 && isdigit((unsigned char)arg[0]);
		if (!good)
			fprintf(stderr, "%s: --kernel-us: '%s' is not a number of microseconds\n", prog, arg);
		break;
	case O_OVERRUN: o->overrun = true; break;
	case O_STAGED: o->staged = true; break;
	case O_SOCKET: o->daemon = true, o->socket = *arg ? arg : NULL; break;
	case O_FORMAT:
		good = parse_word(name, arg, "table", "csv", "json");
		o->format = !strcmp(arg, "csv") ? FEED_CSV : !strcmp(arg, "json") ? FEED_JSON : FEED_TABLE;
		break;
	case O_BENCH: good = parse_word(name, arg, "copy", "copy", NULL); o->bench = arg; break;
	case O_MIN: good = parse_size(name, arg, 4096, 1u << 30, &v); o->min_size = (size_t)v; break;
	case O_MAX: good = parse_size(name, arg, 4096, 1u << 30, &v); o->max_size = (size_t)v; break;
	case O_KILL: good = parse_size(name, arg, 1, 1ull << 40, &o->kill_after); break;
	default: good = false;
	}
	return good;
}

static bool parse_args(struct options *o, int argc, char **argv, int *status)
{
	static const struct option longopts[] = {
		{ "device", required_argument, NULL, O_DEVICE }, { "direction", required_argument, NULL, O_DIRECTION },
		{ "producers", required_argument, NULL, O_PRODUCERS },
		{ "subscribers", required_argument, NULL, O_SUBSCRIBERS },
		{ "batch", required_argument, NULL, O_BATCH }, { "batches", required_argument, NULL, O_BATCHES },
		{ "seconds", required_argument, NULL, O_SECONDS }, { "depth", required_argument, NULL, O_DEPTH },
		{ "kernel-us", required_argument, NULL, O_KERNEL }, { "overrun", no_argument, NULL, O_OVERRUN },
		{ "staged", no_argument, NULL, O_STAGED }, { "socket", required_argument, NULL, O_SOCKET },
		{ "format", required_argument, NULL, O_FORMAT }, { "bench", required_argument, NULL, O_BENCH },
		{ "min-size", required_argument, NULL, O_MIN }, { "max-size", required_argument, NULL, O_MAX },
		{ "kill-producer-after", required_argument, NULL, O_KILL },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	int opt, idx = 0;

	while ((opt = getopt_long(argc, argv, "hV", longopts, &idx)) != -1) {
		if (opt == 'h' || opt == 'V') {
			if (opt == 'h')
				usage(stdout);
			else
				printf("pinshm-feed %s\n", pinshm_version());
			*status = 0;
			return false;
		}
		char name[40];
		snprintf(name, sizeof(name), "--%s", opt >= O_DEVICE ? longopts[idx].name : "?");
		if (opt == '?' || !parse_opt(o, opt, optarg, name))
			break;
	}
	if (opt != -1 || optind != argc || (o->overrun && o->d2h) || o->min_size > o->max_size) {
		if (opt == -1)
			fprintf(stderr, "%s: %s\n", prog, optind != argc ? "unexpected argument" :
				o->overrun ? "--overrun is for h2d" : "--min-size is above --max-size");
		usage(stderr);
		*status = 2;
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	struct options o = { .device = "cuda", .producers = 2, .subscribers = 2, .depth = 2, .batch = 1u << 20,
			     .batches = 1000, .format = FEED_TABLE, .min_size = 64u << 10, .max_size = 256u << 20 };
	struct figures f = { 0 };
	char why[FEED_WHY] = "";
	struct feed_dev *d;
	int status = 0;

	if (!parse_args(&o, argc, argv, &status))
		return status;
	int rc = open_device(&o, &d, why);
	if (rc == -ENODEV || rc == -ENOTSUP) {
		fprintf(stderr, "%s: no %s device: %s (%s)\n", prog, o.device, pinshm_strerror(rc), why);
		return EXIT_SKIP;
	}
	if (rc != 0) {
		fprintf(stderr, "%s: %s: %s (%s)\n", prog, o.device, pinshm_strerror(rc), why);
		return 1;
	}
	if (o.bench) {
		struct feed_report r;
		r.format = o.format;
		rc = feed_bench_copy(d, o.min_size, o.max_size, &r);
	} else {
		rc = d->ops->calibrate(d, o.kernel_us, &f.kernel_us, why);
		if (rc != 0)
			fprintf(stderr, "%s: calibrate: %s (%s)\n", prog, pinshm_strerror(rc), why);
		else
			rc = run_feed(&o, d, &f);
		report(&o, &f);
	}
	d->ops->close(d);
	return rc == 0 && f.bad == 0 ? 0 : 1;
}
