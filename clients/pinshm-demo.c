/*
 * pinshm-demo - producers and consumers exchanging checked messages through
 * one channel, each in its own process.
 *
 * Every message carries its producer, a sequence number and a checksum; each
 * consumer checks them and the order per producer, and the demo fails if a
 * message is lost, duplicated, reordered or corrupt.  It is also a short
 * example of the API: create a segment, attach, send, receive in place.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pinshm.h>

#define MAX_PRODUCERS 16
#define MAX_CONSUMERS 16
#define MAX_MESSAGES 1000000000000ull /* per producer: a day at 10 M/s */
#define MAX_SIZE 65536

struct message {
	uint32_t producer;
	uint32_t len;
	uint64_t seq;
	uint64_t checksum; /* of the fields above and the filler */
	unsigned char filler[];
};

struct options {
	bool daemon;        /* through pinshmd, or a segment of our own */
	const char *socket; /* pinshmd's socket, or NULL: the default one */
	char name[PINSHM_NAME_MAX + 1];
	unsigned producers, consumers;
	uint64_t messages; /* per producer */
	size_t size;       /* bytes per message */
	pinshm_kind_t kind;
};

/* Shared by the processes of the demo: what each consumer saw. */
struct tally {
	_Atomic unsigned subscribed;
	_Atomic unsigned producing; /* producers attached */
	_Atomic uint64_t received[MAX_CONSUMERS];
	_Atomic uint64_t bytes[MAX_CONSUMERS];
	_Atomic uint64_t bad[MAX_CONSUMERS];
	_Atomic uint64_t per_producer[MAX_PRODUCERS];
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

static uint64_t checksum(const struct message *m)
{
	uint64_t h = mix(mix(mix(0, m->producer), m->len), m->seq);

	for (size_t i = 0; i + sizeof(*m) < m->len; i++)
		h = mix(h, m->filler[i]);
	return h;
}

static void fill(struct message *m, uint32_t producer, uint64_t seq, size_t len)
{
	m->producer = producer;
	m->len = (uint32_t)len;
	m->seq = seq;
	for (size_t i = 0; i + sizeof(*m) < len; i++)
		m->filler[i] = (unsigned char)(seq * 31 + i);
	m->checksum = checksum(m);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Attach to the channel as @p role: to the segment @p fd that the parent
 * created, or through the daemon, which hands this process the segment of
 * the channel it created by name (*client is then this process's
 * connection, to close after the channel).
 */
static int open_channel(int fd, const struct options *o, pinshm_role_t role, pinshm_channel_t **ch,
			pinshm_client_t **client)
{
	*client = NULL;
	if (!o->daemon)
		return pinshm_channel_attach(fd, role, ch);
	int rc = pinshm_connect(o->socket, client);
	if (rc == 0)
		rc = pinshm_open(*client, o->name, role, ch);
	if (rc != 0 && *client) {
		fprintf(stderr, "pinshm-demo: %s\n", pinshm_client_error(*client));
		pinshm_disconnect(*client);
		*client = NULL;
	}
	return rc;
}

static int run_producer(int fd, const struct options *o, unsigned id, struct tally *tally)
{
	pinshm_client_t *client;
	pinshm_channel_t *ch;
	int rc = open_channel(fd, o, PINSHM_PRODUCER, &ch, &client);

	if (rc != 0) {
		fprintf(stderr, "producer %u: attach: %s\n", id, pinshm_strerror(rc));
		return 1;
	}
	/* Start once every producer is attached: consumers take "every
	 * producer has left" (-EPIPE) for the end, which a fast producer
	 * closing before a slow one attaches would otherwise say too soon. */
	atomic_fetch_add(&tally->producing, 1);
	while (atomic_load(&tally->producing) < o->producers)
		usleep(100);
	for (uint64_t seq = 0; seq < o->messages; seq++) {
		void *buf;
		/* Zero-copy: build the message where the consumer will read it. */
		rc = pinshm_reserve(ch, o->size, &buf, PINSHM_FOREVER);
		if (rc != 0) {
			fprintf(stderr, "producer %u: reserve: %s (%s)\n", id, pinshm_strerror(rc),
				pinshm_channel_error(ch));
			break;
		}
		fill(buf, id, seq, o->size);
		pinshm_commit(ch, o->size, 0);
	}
	pinshm_channel_close(ch);
	pinshm_disconnect(client);
	return rc == 0 ? 0 : 1;
}

static int run_consumer(int fd, const struct options *o, unsigned id, struct tally *tally)
{
	uint64_t next[MAX_PRODUCERS] = { 0 };
	uint64_t expected = o->kind == PINSHM_TOPIC ? o->messages * o->producers : UINT64_MAX;
	pinshm_client_t *client;
	pinshm_channel_t *ch;
	pinshm_msg_t msg;
	int rc = open_channel(fd, o, PINSHM_CONSUMER, &ch, &client);

	if (rc != 0) {
		fprintf(stderr, "consumer %u: attach: %s\n", id, pinshm_strerror(rc));
		return 1;
	}
	/* Tell the parent we are subscribed before any producer starts. */
	atomic_fetch_add(&tally->subscribed, 1);

	for (uint64_t got = 0; got < expected; got++) {
		/* A queue ends with -EPIPE once every producer left and it is empty. */
		rc = pinshm_recv_inplace(ch, &msg, PINSHM_FOREVER);
		if (rc != 0)
			break;
		const struct message *m = msg.data;
		if (msg.len != o->size || m->producer >= o->producers || m->len != msg.len ||
		    m->checksum != checksum(m) || m->seq < next[m->producer]) {
			atomic_fetch_add(&tally->bad[id], 1);
		} else {
			next[m->producer] = m->seq + 1;
			atomic_fetch_add(&tally->per_producer[m->producer], 1);
		}
		atomic_fetch_add(&tally->received[id], 1);
		atomic_fetch_add(&tally->bytes[id], msg.len);
		pinshm_release(ch, &msg);
	}
	if (rc != 0 && rc != -EPIPE)
		fprintf(stderr, "consumer %u: receive: %s (%s)\n", id, pinshm_strerror(rc), pinshm_channel_error(ch));
	pinshm_channel_close(ch);
	pinshm_disconnect(client);
	return rc == 0 || rc == -EPIPE ? 0 : 1;
}

/* The demo's processes, as the parent started them. */
struct procs {
	pid_t pid[MAX_PRODUCERS + MAX_CONSUMERS]; /* 0 once reaped */
	unsigned n, running, failed;
};

/* One process failed: the run has.  The first failure kills the others,
 * since they may wait for it for ever (producers for each other, a consumer
 * for a producer that never came). */
static void fail(struct procs *p)
{
	if (p->failed++ == 0)
		for (unsigned i = 0; i < p->n; i++)
			if (p->pid[i] > 0)
				kill(p->pid[i], SIGKILL);
}

static void spawn(struct procs *p, int (*body)(int, const struct options *, unsigned, struct tally *), int fd,
		  const struct options *o, unsigned id, struct tally *tally)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(body(fd, o, id, tally));
	}
	if (pid < 0) {
		perror("pinshm-demo: fork");
		fail(p);
		return;
	}
	p->pid[p->n++] = pid;
	p->running++;
}

/* Reap the children that have ended, waiting for every one if @p block. */
static void reap(struct procs *p, bool block)
{
	int status;
	pid_t pid;

	while (p->running > 0 && (pid = waitpid(-1, &status, block ? 0 : WNOHANG)) > 0) {
		for (unsigned i = 0; i < p->n; i++)
			if (p->pid[i] == pid)
				p->pid[i] = 0, p->running--;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail(p);
	}
}

static void usage(FILE *to)
{
	fprintf(to, "usage: pinshm-demo [-p PRODUCERS] [-c CONSUMERS] [-n MESSAGES] [-s SIZE] [-t queue|topic]\n"
		    "                   [-S SOCKET] [-V] [-h]\n"
		    "  -S  create the channel through the pinshmd listening at SOCKET (\"\": the\n"
		    "      default socket); each process opens it there\n"
		    "  -p  producer processes (1..%d, default 2)\n"
		    "  -c  consumer processes (1..%d, default 2)\n"
		    "  -n  messages per producer (1..%llu, default 1000000)\n"
		    "  -s  bytes per message (%zu..%d, default 64)\n"
		    "  -t  channel kind (default queue; a topic delivers each message to every consumer)\n"
		    "  -V, --version  print the version and exit\n"
		    "  -h, --help     print this help and exit\n"
		    "Numbers are decimal, hexadecimal (0x...) or octal (0...).\n",
		MAX_PRODUCERS, MAX_CONSUMERS, MAX_MESSAGES, sizeof(struct message), MAX_SIZE);
}

/*
 * The value of option -@p opt: a whole number (decimal, 0x hex or 0 octal)
 * from @p min to @p max and nothing else.  @return false, said on stderr.
 */
static bool parse_number(int opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long v = isdigit((unsigned char)arg[0]) ? strtoull(arg, &end, 0) : 0;
	if (!isdigit((unsigned char)arg[0]) || *end != '\0' || errno != 0 || v < min || v > max) {
		fprintf(stderr, "pinshm-demo: -%c: '%s' is not a number from %" PRIu64 " to %" PRIu64 "\n", opt, arg,
			min, max);
		return false;
	}
	*out = v;
	return true;
}

/* Parse the command line into @p o.  @return -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	uint64_t v = 0;
	bool good = true;
	int opt;

	while (good && (opt = getopt_long(argc, argv, "p:c:n:s:t:S:hV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'S': o->daemon = true, o->socket = *optarg ? optarg : NULL; break;
		case 'p':
			good = parse_number(opt, optarg, 1, MAX_PRODUCERS, &v);
			o->producers = (unsigned)v;
			break;
		case 'c':
			good = parse_number(opt, optarg, 1, MAX_CONSUMERS, &v);
			o->consumers = (unsigned)v;
			break;
		case 'n': good = parse_number(opt, optarg, 1, MAX_MESSAGES, &o->messages); break;
		case 's':
			good = parse_number(opt, optarg, sizeof(struct message), MAX_SIZE, &v);
			o->size = (size_t)v;
			break;
		case 't':
			good = strcmp(optarg, "queue") == 0 || strcmp(optarg, "topic") == 0;
			if (!good)
				fprintf(stderr, "pinshm-demo: -t: '%s' is neither queue nor topic\n", optarg);
			o->kind = strcmp(optarg, "topic") == 0 ? PINSHM_TOPIC : PINSHM_QUEUE;
			break;
		case 'V': printf("pinshm-demo %s\n", pinshm_version()); return 0;
		case 'h': usage(stdout); return 0;
		default: good = false; break;
		}
	}
	if (!good || optind != argc) {
		if (good)
			fprintf(stderr, "pinshm-demo: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	return -1;
}

/*
 * Create the channel: through the daemon (*client, which creates and pins
 * the segment; a name finds it), or a segment of our own (*fd).  @return 0,
 * or -errno, said on stderr.
 */
static int create_channel(struct options *o, int *fd, pinshm_client_t **client)
{
	pinshm_channel_attr_t attr;
	int rc;

	pinshm_channel_attr_init(&attr);
	attr.kind = o->kind;
	attr.capacity = 1u << 18;
	attr.max_producers = o->producers;
	attr.max_consumers = o->consumers;
	*fd = -1;
	*client = NULL;
	if (o->daemon) {
		snprintf(o->name, sizeof(o->name), "pinshm-demo.%d", (int)getpid());
		rc = pinshm_connect(o->socket, client);
		if (rc == 0)
			rc = pinshm_create(*client, o->name, &attr, 0600, 0);
		if (rc == 0 && *pinshm_client_error(*client))
			printf("pinshmd: %s\n", pinshm_client_error(*client));
	} else {
		rc = pinshm_segment_create(&attr, fd);
	}
	if (rc != 0)
		fprintf(stderr, "pinshm-demo: cannot create the channel: %s (%s)\n", pinshm_strerror(rc),
			*client ? pinshm_client_error(*client) : pinshm_client_error(NULL));
	return rc;
}

/* Print what the consumers saw.  @return whether every message arrived intact. */
static bool report(const struct options *o, const struct tally *tally, unsigned failed, double elapsed)
{
	uint64_t received = 0, bytes = 0, bad = 0, missing = 0;
	uint64_t copies = o->kind == PINSHM_TOPIC ? o->consumers : 1;

	for (unsigned c = 0; c < o->consumers; c++) {
		received += tally->received[c];
		bytes += tally->bytes[c];
		bad += tally->bad[c];
	}
	for (unsigned p = 0; p < o->producers; p++) {
		uint64_t got = tally->per_producer[p], want = o->messages * copies;
		missing += got > want ? got - want : want - got;
	}
	printf("pinshm-demo: %s %s, %u producer(s), %u consumer(s), %" PRIu64 " messages of %zu bytes each\n",
	       o->kind == PINSHM_TOPIC ? "topic" : "queue", o->daemon ? o->name : "(own segment)", o->producers,
	       o->consumers, o->messages * o->producers, o->size);
	printf("received %" PRIu64 " messages (%.1f MB) in %.3f s: %.2f M messages/s, %.2f GB/s\n", received,
	       (double)bytes / 1e6, elapsed, (double)received / elapsed / 1e6, (double)bytes / elapsed / 1e9);
	printf("lost or duplicated %" PRIu64 ", corrupt or reordered %" PRIu64 ", failed processes %u\n", missing, bad,
	       failed);
	bool ok = missing == 0 && bad == 0 && failed == 0 && received == o->messages * o->producers * copies;
	printf("%s\n", ok ? "OK" : "FAILED");
	return ok;
}

int main(int argc, char **argv)
{
	struct options o = { .producers = 2, .consumers = 2, .messages = 1000000, .size = 64, .kind = PINSHM_QUEUE };
	pinshm_client_t *client;
	struct procs procs = { .n = 0 };
	int fd, rc = parse_options(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (create_channel(&o, &fd, &client) != 0)
		return 1;
	struct tally *tally = mmap(NULL, sizeof(*tally), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (tally == MAP_FAILED) {
		perror("pinshm-demo: mmap");
		return 1;
	}

	/* Consumers first, so that a topic's subscribers see every message. */
	for (unsigned c = 0; c < o.consumers; c++)
		spawn(&procs, run_consumer, fd, &o, c, tally);
	while (atomic_load(&tally->subscribed) < o.consumers && procs.failed == 0) {
		reap(&procs, false);
		usleep(1000);
	}
	double start = now_s();
	for (unsigned p = 0; p < o.producers && procs.failed == 0; p++)
		spawn(&procs, run_producer, fd, &o, p, tally);
	reap(&procs, true);
	double elapsed = now_s() - start;
	if (fd >= 0)
		close(fd);
	if (client) {
		pinshm_unlink(client, o.name);
		pinshm_disconnect(client);
	}
	return report(&o, tally, procs.failed, elapsed) ? 0 : 1;
}
