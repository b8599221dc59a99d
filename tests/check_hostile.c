/*
 * check_hostile.c - what a hostile user can take from pinshmd, and the
 * safe defaults that bound it.
 *
 * - release: a client creates a channel, opens it (receiving its
 *   segment's descriptor), keeps a copy of the descriptor and a mapping,
 *   and disconnects; HOSTILE_ROUNDS times, HOSTILE_CAPACITY bytes each,
 *   far over its quota.  The daemon destroys each channel and punches its
 *   pages out: the machine's Shmem (/proc/meminfo) stays at its baseline,
 *   within a margin that the leak of every round kept would exceed twice;
 *   the kept descriptor reads zeros from the first lane on (read() and a
 *   mapping), and the library's handles, still open, get -EPIPE: the
 *   header and the endpoints' dead marks stay.  For the sealed memfd, for
 *   shm, and for segments from the pool.
 * - defaults: the default quota and max_segment_size derived from the
 *   budget (config_derived_limits(), fake budgets) cover the channels the
 *   MPI plugin makes for a node by default; a daemon shows them (STATUS),
 *   refuses a create over the max segment size with a message that names
 *   it, and one line of pinshmd.conf lifts it.
 * - stall: one client creates the largest channel it may (the default
 *   max_segment_size) and destroys it (unlink, disconnect), again and
 *   again for STALL_MS; another sends STATUS meanwhile, a round trip every
 *   millisecond or so: the daemon locks and populates, unmaps and punches
 *   in slices, so that no round trip waits for a whole segment:
 *   STALL_P99_MS at the 99th percentile, STALL_MAX_MS at worst (bounds
 *   not asserted where the daemon runs under $PINSHMD_WRAPPER; the rounds
 *   still must all succeed).  And a create given up half-made: by a
 *   creator killed (its charge goes, its name is free again, the daemon
 *   serves on), by a daemon that stops (it exits 0).  And one whose lock
 *   fails half-way (RLIMIT_MEMLOCK of 3 MiB, 8 MiB of channel, 2 MiB a
 *   slice): created unpinned, nothing of it left locked, and it works.
 *   And while a reload empties a pool of 3 GiB of ready segments (less
 *   where half the budget is less): their pages are unmapped in slices
 *   after the reload, and the daemon's VmLck shows requests served
 *   between the first slice and the last.  And while one user's
 *   IDLE_CHANNELS channels of 1 GiB (its quota and max_segment_size
 *   raised to hold them) are unlocked for want of use and locked again, all at once,
 *   round after round: used (the idle scan sees them all in one look) or
 *   asked for (RELOCK, whose reply comes once the channel is locked
 *   whole); they go a slice a turn, and the charge stays the same.
 *   And a RELOCK sent while a channel of up to 2 GiB destroyed just
 *   before is unmapped: the locking has every other turn meanwhile, so
 *   its reply comes while most of that segment is still locked in the
 *   daemon (VmLck), not after.
 * - stall_peers: the same bounds while a client hands back crafted
 *   segments whose endpoints name processes of long maps, again and
 *   again (the daemon reads maps 64 KiB a turn).  And while a client hands
 *   back the largest segments it may have, again and again (the daemon
 *   locks them a slice a turn).
 *   And while a client opens every consumer of a shared queue full of
 *   small records and goes, again and again (each reap scans every lane,
 *   1 MiB a turn).  And from the first accept of a daemon that starts
 *   with a segment of 1 GiB in its descriptor store (a restart): it locks
 *   the segment a slice a turn and serves meanwhile; a client sees the
 *   channel not pinned yet, opens it, and its RELOCK waits until the
 *   channel is pinned; one that is not persistent and loses its grace at
 *   once is destroyed while it is locked: its lock and its charge go.
 *   And while a client that the daemon cannot see
 *   (the daemon in a PID namespace of its own) hands back segments of
 *   512 MiB again and again: locked a slice a turn too.
 *   The restart's segment holds messages that a consumer receives after.
 * - peers: a writer of a channel marks the other producers' endpoints
 *   free after one of them sent, hiding its lane from the consumer's
 *   quick look: the record is received all the same, by a receive that
 *   waits and within 64 non-blocking ones.
 * - stall_huge: the same with channels of huge pages (root: it raises
 *   vm.nr_hugepages to have HUGE_RESERVE free, and puts it back; skipped
 *   where it cannot): a restart that adopts a persistent one of 1 GiB
 *   (locked a slice a turn, listed as huge pages, its messages there
 *   after), hand-backs and creates of 512 MiB again and again; after
 *   these, every huge page is free again (each destroyed a slice a turn,
 *   in whole huge pages).  And a create that needs the huge pages of a
 *   channel destroyed just before (more than half of those free) waits
 *   for them rather than failing with ENOMEM; one that would not have
 *   them even then (another channel holds them) fails so, naming
 *   vm.nr_hugepages, and its charge goes; one that waited and then fails
 *   for another reason (the daemon's RLIMIT_NOFILE lowered meanwhile)
 *   fails with that error (EMFILE), named, in its reply and the log.
 *   A channel whose first huge page a holder punched out, with no free
 *   huge page left, is listed as damaged at the daemon's next look: the
 *   daemon does not die of the fault.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"
#include "config.h"
#include "daemonutil.h"
#include "fdpass.h"
#include "protocol.h"
#include "pinshm.h"
#include "testutil.h"

#define MiB (1024ull * 1024ull)
#define HOSTILE_ROUNDS 40u
#define HOSTILE_CAPACITY (16u * 1024u * 1024u)
/* Shmem may grow by this much, kB: half of what the rounds would leak
 * (640 MiB), room for what other processes of the machine do meanwhile. */
#define HOSTILE_MARGIN_KB (320ull * 1024ull)
#define HOSTILE_SAMPLES 5u    /* looks at Shmem, 500 ms apart, before a growth counts */
#define GONE_MS 10000u        /* for a destroyed channel's name to go */
#define POOL_READY_MS 40000u  /* for a pool to fill: a precondition (3 GiB locked, under load) */
#define PUNCH_MS 30000u       /* for a destroyed channel's pages to be punched out (slices; a wrapper) */
#define FD_SCAN 4096
#define STALL_MS 5000u        /* of creates and destroys */
#define STALL_P99_MS 50.0     /* another client's round trips, 99th percentile */
#define STALL_NICE (-10)      /* the daemon and the measuring client, where allowed */
#define STALL_MAX_MS 500.0    /* and at worst */
#define STALL_SAMPLES (1u << 20)
#define HUGE_PAGE (2ull * MiB)     /* the huge page size the huge-page tests need */
#define HUGE_BYTES (512ull * MiB)  /* a channel of huge pages made or handed back: some 220 slices */
/* Lanes of huge-page channels: few, so that formatting one (a page at
 * each lane's start) leaves most pages for the daemon to populate. */
#define HUGE_LANE (64ull * MiB)
/* Two at a time (one destroyed in slices while the next is made), and room;
 * as many as the restart's segment of 1 GiB (RESTART_BYTES) takes. */
#define HUGE_RESERVE ((long)(2 * HUGE_BYTES / HUGE_PAGE) + 16)

/* Shmem of /proc/meminfo, kB. */
static long long shmem_kb(void)
{
	char line[128];
	long long kb = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	ck_assert_msg(f != NULL, "/proc/meminfo: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Shmem: %lld kB", &kb) == 1)
			break;
	fclose(f);
	ck_assert_msg(kb >= 0, "no Shmem line in /proc/meminfo");
	return kb;
}

/* Mark in @p mark the descriptors of this process that are pinshm
 * segments (a memfd pinshm:NAME, an shm object /dev/shm/pinshm.*). */
static void segment_fds(bool *mark)
{
	char path[64], link[256];

	for (int fd = 0; fd < FD_SCAN; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		link[n > 0 ? n : 0] = '\0';
		mark[fd] = strstr(link, "/memfd:pinshm:") == link || strstr(link, "/dev/shm/pinshm.") == link;
	}
}

/* A channel's segment as a hostile client keeps it after it disconnects. */
struct kept {
	int fd;                /* a copy of the descriptor pinshm_open() received */
	void *map;             /* the client's own mapping of it, read-only */
	size_t size;
	pinshm_channel_t *h;   /* the library's handle of the consumer, left open */
	pinshm_channel_t *p;   /* and of a producer */
};

/* Wait until @p name is gone from the daemon @p obs talks to (the event
 * that proves its channel destroyed). */
static void wait_gone(pinshm_client_t *obs, const char *name)
{
	uint64_t deadline = tu_now_ms() + GONE_MS;
	pinshm_list_entry_t e;
	int rc;

	while ((rc = pinshm_stat(obs, name, &e)) == 0) {
		ck_assert_msg(tu_now_ms() < deadline, "channel '%s' still there %u ms after its client left", name,
			      GONE_MS);
		tu_sleep_ms(2);
	}
	CLIENT_RC(obs, rc, -ENOENT);
}

/* Wait until the pool of the daemon @p obs talks to has its one class full. */
static void wait_pool_ready(pinshm_client_t *obs)
{
	uint64_t deadline = tu_now_ms() + POOL_READY_MS;
	pinshm_status_t st;
	pinshm_pool_t pool;

	for (;;) {
		CLIENT_RC(obs, pinshm_status_pool(obs, &st, &pool, NULL, NULL), 0);
		ck_assert_uint_eq(pool.count, 1);
		ck_assert_msg(!(pool.flags & PINSHM_POOL_STOPPED), "the pool stopped filling");
		if (pool.classes[0].ready == pool.classes[0].wanted)
			return;
		ck_assert_msg(tu_now_ms() < deadline, "the pool not refilled in %u ms", POOL_READY_MS);
		tu_sleep_ms(2);
	}
}

/* Whether @p len bytes read from @p fd at @p off are all zero. */
static bool reads_zeros(int fd, off_t off, size_t len)
{
	static unsigned char buf[1 << 20];

	while (len > 0) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);
		ck_assert_int_eq(pread(fd, buf, n, off), (ssize_t)n);
		for (size_t i = 0; i < n; i++)
			if (buf[i] != 0)
				return false;
		off += (off_t)n;
		len -= n;
	}
	return true;
}

/* A daemon on the configuration @p conf, and a client of it. */
static pinshm_client_t *start_conf(struct daemon *d, const char *conf)
{
	daemon_start_config(d, &(struct daemon_opts){.config = true}, "%s", conf);
	return connect_ok(d);
}

/* ---- huge pages ---------------------------------------------------------- */

static bool huge_held; /* tu_huge_begin() and HUGE_RESERVE free, in the runner */
static long huge_free0; /* HugePages_Free at the start of a test (huge_ready()) */

/* The unchecked fixture of the huge-page tests: vm.nr_hugepages locked
 * and raised for them, put back after them, failed or not. */
static void huge_setup(void)
{
	huge_held = tu_huge_begin() && tu_meminfo("Hugepagesize:") * 1024ll == (long long)HUGE_PAGE &&
		    tu_huge_reserve(HUGE_RESERVE);
}

static void huge_teardown(void)
{
	tu_huge_end();
}

/* Whether test @p what has its huge pages (a note where not: skipped);
 * the free ones counted into huge_free0. */
static bool huge_ready(const char *what)
{
	huge_free0 = huge_held ? tu_meminfo("HugePages_Free:") : 0;
	if (huge_free0 >= HUGE_RESERVE)
		return true;
	fprintf(stderr, "note: %s: skipped: it needs root and %ld free huge pages of %llu kB (vm.nr_hugepages), "
		"%ld here\n", what, HUGE_RESERVE, HUGE_PAGE >> 10, huge_free0);
	return false;
}

/* In a child, after rounds that ended with exit status @p status: where
 * @p huge, every huge page is free again within GONE_MS (as many as at
 * huge_ready()): the daemon unmapped and punched out the pages of each
 * channel it destroyed.  @return the exit status. */
static int huge_back(int status, bool huge)
{
	uint64_t end = tu_now_ms() + GONE_MS;
	long nfree;

	if (status != 0 || !huge)
		return status;
	while ((nfree = tu_meminfo("HugePages_Free:")) < huge_free0 && tu_now_ms() < end)
		tu_sleep_ms(2);
	if (nfree >= huge_free0)
		return 0;
	fprintf(stderr, "stall: %ld huge pages not given back after the rounds\n", huge_free0 - nfree);
	return 1;
}

/*
 * One round: connect, create @p name (@p flags), open it as its consumer
 * and producer, keep a copy of its descriptor and a mapping with every page touched,
 * disconnect, and wait until the daemon has destroyed it.
 */
static void hostile_round(const struct daemon *d, pinshm_client_t *obs, const char *name, unsigned flags,
			  struct kept *k)
{
	static bool before[FD_SCAN], after[FD_SCAN];
	pinshm_channel_attr_t attr;
	pinshm_client_t *c = connect_ok(d);

	tu_attr(&attr, PINSHM_QUEUE, HOSTILE_CAPACITY, 1, 1);
	CLIENT_RC(c, pinshm_create_full(c, name, &attr, 0600, flags, PINSHM_NODE_ANY, PINSHM_PIN_DEFAULT), 0);
	segment_fds(before);
	CLIENT_RC(c, pinshm_open(c, name, PINSHM_CONSUMER, &k->h), 0);
	segment_fds(after);
	CLIENT_RC(c, pinshm_open(c, name, PINSHM_PRODUCER, &k->p), 0);
	k->fd = -1;
	for (int fd = 0; fd < FD_SCAN && k->fd < 0; fd++)
		if (after[fd] && !before[fd])
			k->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	ck_assert_msg(k->fd >= 0, "no new segment descriptor after pinshm_open()");
	k->size = tu_fd_size(k->fd);
	k->map = mmap(NULL, k->size, PROT_READ, MAP_SHARED, k->fd, 0);
	ck_assert_msg(k->map != MAP_FAILED, "mmap: %s", strerror(errno));
	/* Every page in memory, whether the daemon could lock it or not. */
	unsigned sum = 0;
	for (size_t off = 0; off < k->size; off += 4096)
		sum += ((volatile const unsigned char *)k->map)[off];
	ck_assert_msg(sum != 0, "the segment of '%s' reads as zeros before it is destroyed", name);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	wait_gone(obs, name);
}

/* After the rounds: Shmem back within the margin of @p base_kb, at one of
 * HOSTILE_SAMPLES looks (another process's growth comes and goes; a leak stays). */
static void assert_shmem_near(long long base_kb, const char *what)
{
	long long grew = 0;

	for (unsigned i = 0; i < HOSTILE_SAMPLES; i++) {
		if (i)
			tu_sleep_ms(500);
		grew = shmem_kb() - base_kb;
		if (grew < (long long)HOSTILE_MARGIN_KB)
			break;
	}
	printf("%s: Shmem %+lld kB after %u rounds of %u MiB kept (a leak: %llu kB)\n", what, grew, HOSTILE_ROUNDS,
	       HOSTILE_CAPACITY >> 20, (unsigned long long)HOSTILE_ROUNDS * (HOSTILE_CAPACITY >> 10));
	ck_assert_msg(grew < (long long)HOSTILE_MARGIN_KB,
		      "%s: Shmem grew by %lld kB while clients kept the descriptors of destroyed channels "
		      "(margin %llu kB)",
		      what, grew, HOSTILE_MARGIN_KB);
}

/* What a kept descriptor and handles see of a destroyed channel: zeros
 * from the first lane on, the size unchanged, peers gone; then they are
 * closed. */
static void check_kept(struct kept *k, const char *name)
{
	const unsigned char *m = k->map;
	unsigned char buf[64];
	size_t len = 0;
	pinshm_channel_attr_t attr;
	pinshm_channel_info_t info;
	struct seg_geometry g;

	tu_attr(&attr, PINSHM_QUEUE, HOSTILE_CAPACITY, 1, 1);
	TU_RC(seg_geometry_compute(&attr, &g), 0);
	ck_assert_uint_eq(tu_fd_size(k->fd), k->size);
	/* The pages go a slice a loop turn after the channel (pinshmd(8)). */
	bool zeros = false;
	for (uint64_t end = tu_now_ms() + PUNCH_MS; !(zeros = reads_zeros(k->fd, (off_t)g.lanes_off,
									    k->size - g.lanes_off)) &&
						    tu_now_ms() < end;)
		tu_sleep_ms(20);
	ck_assert_msg(zeros, "'%s': its kept descriptor reads data past its endpoints after destroy", name);
	/* Through the mapping: the first lane's page and the last page (each
	 * look takes a fresh page, charged to this process). */
	for (size_t i = 0; i < 4096; i++)
		ck_assert_msg(m[g.lanes_off + i] == 0 && m[k->size - 4096 + i] == 0,
			      "'%s': its kept mapping reads data", name);
	/* The endpoints' dead marks stay: both handles learn that the peers
	 * are gone rather than wait for them. */
	TU_RC(pinshm_recv(k->h, buf, sizeof(buf), &len, 0), -EPIPE);
	int rc = pinshm_send(k->p, "x", 1, 0);
	ck_assert_msg(rc == 0 || rc == -EPIPE, "'%s': pinshm_send: %s", name, pinshm_strerror(rc));
	rc = pinshm_channel_info(k->h, &info);
	ck_assert_msg(rc == 0 || rc == -EBADMSG, "'%s': pinshm_channel_info: %s", name, pinshm_strerror(rc));
	pinshm_channel_close(k->h);
	pinshm_channel_close(k->p);
	munmap(k->map, k->size);
	close(k->fd);
}

/* The rounds on a daemon configured by @p conf, channels made with @p flags. */
static void release_rounds(const char *conf, unsigned flags, bool pool, const char *what)
{
	struct daemon d;
	static struct kept kept[HOSTILE_ROUNDS];
	char name[32];

	pinshm_client_t *obs = start_conf(&d, conf);
	if (pool)
		wait_pool_ready(obs);
	long long base = shmem_kb();

	for (unsigned i = 0; i < HOSTILE_ROUNDS; i++) {
		snprintf(name, sizeof(name), "hostile%u", i);
		if (pool)
			wait_pool_ready(obs);
		hostile_round(&d, obs, name, flags, &kept[i]);
	}
	if (pool) {
		pinshm_status_t st;
		pinshm_pool_t p;
		wait_pool_ready(obs);
		CLIENT_RC(obs, pinshm_status_pool(obs, &st, &p, NULL, NULL), 0);
		ck_assert_msg(p.hits >= HOSTILE_ROUNDS, "%llu pool hits of %u creates", (unsigned long long)p.hits,
			      HOSTILE_ROUNDS);
	}
	assert_shmem_near(base, what);
	for (unsigned i = 0; i < HOSTILE_ROUNDS; i++) {
		snprintf(name, sizeof(name), "hostile%u", i);
		check_kept(&kept[i], name);
	}
	CLIENT_RC(obs, pinshm_disconnect(obs), 0);
	daemon_stop_ok(&d);
}

START_TEST(test_release_memfd)
{
	release_rounds("[daemon]\npool_segments = 0\nbudget = 256M\ndefault_user_quota = 32M\n", PINSHM_USE_MEMFD,
		       false, "memfd");
}
END_TEST

START_TEST(test_release_shm)
{
	release_rounds("[daemon]\npool_segments = 0\nbudget = 256M\ndefault_user_quota = 32M\n", PINSHM_USE_SHM,
		       false, "shm");
}
END_TEST

/* From the pool: every create takes a ready segment (never one handed
 * out before), and its destroy releases it as any other. */
START_TEST(test_release_pool)
{
	pinshm_channel_attr_t attr;
	size_t size;
	char conf[256];

	tu_attr(&attr, PINSHM_QUEUE, HOSTILE_CAPACITY, 1, 1);
	TU_RC(pinshm_segment_size(&attr, &size), 0);
	snprintf(conf, sizeof(conf),
		 "[daemon]\npool_segments = 1\npool_sizes = %zu\nbudget = 256M\ndefault_user_quota = 32M\n", size);
	release_rounds(conf, 0, true, "pool");
}
END_TEST

/* ---- defaults ----------------------------------------------------------- */

/*
 * What the MPI plugin asks of one user for a node of @p n ranks by default
 * (pinshm-mpi(7)): n queues of n lanes, rings of 2 MiB halved until the
 * n * n of them fit in 1 GiB, 16 KiB at least.  @return the bytes of all
 * of them; @p largest: of the largest.
 */
static uint64_t mpi_node_bytes(unsigned n, uint64_t *largest)
{
	uint64_t ring = 2 * MiB, pairs = (uint64_t)n * n;
	pinshm_channel_attr_t attr;
	size_t size;

	while (ring > 16 * 1024 && ring > (1ull << 30) / pairs)
		ring /= 2;
	pinshm_channel_attr_init(&attr);
	attr.kind = PINSHM_QUEUE;
	attr.capacity = ring;
	attr.max_producers = n;
	attr.max_consumers = 1;
	TU_RC(pinshm_segment_size(&attr, &size), 0);
	*largest = size;
	return (uint64_t)n * size;
}

START_TEST(test_derived_limits)
{
	static const uint64_t budgets[] = {512 * MiB, 2048 * MiB, 4096 * MiB, 12 * 1024 * MiB, 64 * 1024 * MiB,
					   1024 * 1024 * MiB};
	uint64_t mpi_total = 0, mpi_largest = 0, q, s;

	/* Nodes of up to 256 ranks: beyond, 16 KiB rings outgrow 1 GiB. */
	for (unsigned n = 1; n <= 256; n++) {
		uint64_t largest, total = mpi_node_bytes(n, &largest);
		mpi_total = total > mpi_total ? total : mpi_total;
		mpi_largest = largest > mpi_largest ? largest : mpi_largest;
	}
	for (unsigned i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		uint64_t b = budgets[i];
		config_derived_limits(b, &q, &s);
		printf("budget %6llu MiB: quota %6llu MiB, max segment %5llu MiB\n", (unsigned long long)(b / MiB),
		       (unsigned long long)(q / MiB), (unsigned long long)(s / MiB));
		ck_assert_uint_le(s, q);
		ck_assert_uint_eq(q, b / 4 > 1088 * MiB ? b / 4 : 1088 * MiB);
		ck_assert_uint_eq(s, b / 64 > 256 * MiB ? b / 64 : 256 * MiB);
		/* MPI jobs keep working wherever the budget holds them. */
		ck_assert_uint_ge(q, mpi_total);
		ck_assert_uint_ge(s, mpi_largest);
	}
	config_derived_limits(CONFIG_UNLIMITED, &q, &s);
	ck_assert_uint_eq(q, CONFIG_UNLIMITED);
	ck_assert_uint_eq(s, CONFIG_UNLIMITED);
}
END_TEST

/* A daemon on @p conf and a client of it; its budget and the quota of this
 * user (STATUS) into @p budget and @p quota. */
static pinshm_client_t *start_status(struct daemon *d, const char *conf, uint64_t *budget, uint64_t *quota)
{
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	size_t n;

	pinshm_client_t *c = start_conf(d, conf);
	CLIENT_RC(c, pinshm_status(c, &st, &u, &n), 0);
	ck_assert_uint_eq(n, 1);
	*budget = st.budget;
	*quota = u[0].quota;
	free(u);
	return c;
}

START_TEST(test_default_limits_daemon)
{
	struct daemon d;
	uint64_t budget, quota, q, s;
	pinshm_channel_attr_t attr;

	/* A budget of 8 GiB, nothing else: quota 2 GiB, max segment 256 MiB. */
	pinshm_client_t *c = start_status(&d, "[daemon]\npool_segments = 0\nbudget = 8G\n", &budget, &quota);
	ck_assert_uint_eq(budget, 8192 * MiB);
	ck_assert_uint_eq(quota, 2048 * MiB);
	tu_attr(&attr, PINSHM_QUEUE, 512 * MiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "big", &attr, 0600, 0), -EFBIG);
	ck_assert_msg(strstr(pinshm_client_error(c), "over max_segment_size, 268435456 bytes") != NULL, "%s",
		      pinshm_client_error(c));
	tu_attr(&attr, PINSHM_QUEUE, 4 * MiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "small", &attr, 0600, 0), 0);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);

	/* No budget either: both from half of RAM. */
	c = start_status(&d, "[daemon]\npool_segments = 0\n", &budget, &quota);
	config_derived_limits(budget, &q, &s);
	ck_assert_uint_eq(quota, q);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);

	/* One line lifts the max segment size: the same create meets the
	 * quota instead (1 MiB, set too, so that nothing is made). */
	c = start_status(&d, "[daemon]\npool_segments = 0\nbudget = 8G\nmax_segment_size = unlimited\n"
			   "default_user_quota = 1M\n",
		       &budget, &quota);
	ck_assert_uint_eq(quota, MiB);
	tu_attr(&attr, PINSHM_QUEUE, 512 * MiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "big", &attr, 0600, 0), -EDQUOT);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
}
END_TEST

/* The largest queue of lanes of @p lane bytes whose segment fits in
 * @p max bytes. */
static void largest_attr_of(pinshm_channel_attr_t *attr, uint64_t max, uint64_t lane)
{
	size_t size = 0;
	unsigned p = 1;

	for (;;) {
		tu_attr(attr, PINSHM_QUEUE, lane, p + 1, 1);
		ck_assert_int_eq(pinshm_segment_size(attr, &size), 0);
		if (size > max || p + 1 > PINSHM_MAX_PRODUCERS)
			break;
		p++;
	}
	tu_attr(attr, PINSHM_QUEUE, lane, p, 1);
}

/* The largest queue of 4 MiB lanes whose segment fits in @p max bytes. */
static void largest_attr(pinshm_channel_attr_t *attr, uint64_t max)
{
	largest_attr_of(attr, max, 4 * MiB);
}

/* The hostile client, in a child: create @p attr (@p flags: PINSHM_*),
 * unlink it and disconnect (which destroys it), until STALL_MS have passed.
 * @return the exit status: 0 (at least two rounds, each one whole), 1. */
static int stall_rounds(const struct daemon *d, const pinshm_channel_attr_t *attr, unsigned flags)
{
	uint64_t end = tu_now_ms() + STALL_MS;
	unsigned rounds = 0;

	while (tu_now_ms() < end) {
		pinshm_client_t *c = NULL;
		int rc = pinshm_connect(d->sock, &c);
		if (rc == 0)
			rc = pinshm_create(c, "stall", attr, 0600, flags);
		if (rc == 0)
			rc = pinshm_unlink(c, "stall");
		if (rc != 0) {
			fprintf(stderr, "stall: round %u: %s (%s)\n", rounds, strerror(-rc),
				c ? pinshm_client_error(c) : "");
			return 1;
		}
		pinshm_disconnect(c);
		rounds++;
	}
	fprintf(stderr, "stall: %u rounds of create and destroy\n", rounds);
	return rounds >= 2 ? 0 : 1;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * What the daemon keeps locked (its VmLck) around each round trip of
 * stall_measure_locked(): a request served while a large unmapping is
 * under way, once it began and before it ended, proves that it goes in
 * slices over the loop's turns, however fast the machine unmaps.
 */
struct locked_trace {
	long full_kb;     /* VmLck when the hostile side starts */
	long gone_kb;     /* of it, what the hostile side unmaps */
	long end_kb;      /* out: VmLck once that is gone */
	size_t inside;    /* out: round trips that began after the first slice
			   * went and ended before the last one */
	size_t trips;     /* out: all the round trips */
};

/*
 * Measure the daemon @p d's service to @p c, a STATUS round trip every
 * millisecond or so, while the hostile child @p pid works (@p what, for the
 * output); assert that the child succeeded and, unless under a wrapper,
 * the bounds.  With @p t, also read the daemon's VmLck before and after
 * each round trip, and wait for t->gone_kb of it to go (struct
 * locked_trace; asserted by the caller).
 */
static void stall_measure_locked(struct daemon *d, pinshm_client_t *c, pid_t pid, const char *what,
				 struct locked_trace *t)
{
	double *ms = malloc(STALL_SAMPLES * sizeof(*ms));
	long *lk = t ? malloc(2 * STALL_SAMPLES * sizeof(*lk)) : NULL;
	size_t n = 0;
	int status;

	ck_assert_ptr_nonnull(ms);
	ck_assert(!t || lk);
	/* The bound is the daemon's: a loop turn that holds the others up.
	 * The tests that make check runs beside this one on two cores must
	 * not decide it through the scheduler, so the daemon and the
	 * measuring client run ahead of them where that is allowed (root);
	 * the hostile client does not. */
	(void)setpriority(PRIO_PROCESS, (id_t)d->pid, STALL_NICE);
	(void)setpriority(PRIO_PROCESS, 0, STALL_NICE);
	while (waitpid(pid, &status, WNOHANG) == 0) {
		pinshm_status_t st;
		pinshm_user_usage_t *u;
		size_t nu;
		struct timespec a, b;
		long before = t ? proc_status_value_kb(d->pid, "VmLck:") : 0;
		clock_gettime(CLOCK_MONOTONIC, &a);
		CLIENT_RC(c, pinshm_status(c, &st, &u, &nu), 0);
		clock_gettime(CLOCK_MONOTONIC, &b);
		free(u);
		if (n < STALL_SAMPLES) {
			if (t) {
				lk[2 * n] = before;
				lk[2 * n + 1] = proc_status_value_kb(d->pid, "VmLck:");
			}
			ms[n++] = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
		}
		usleep(1000);
	}
	ck_assert_uint_gt(n, 0);
	if (t) {
		t->end_kb = daemon_locked_kb_at_most(d->pid, t->full_kb - t->gone_kb);
		t->trips = n;
		t->inside = 0;
		for (size_t i = 0; i < n; i++)
			t->inside += lk[2 * i] < t->full_kb && lk[2 * i + 1] > t->end_kb;
		free(lk);
		fprintf(stderr, "stall: %s: %zu of %zu STATUS round trips served while %ld kB were unmapped\n", what,
			t->inside, t->trips, t->gone_kb);
	}
	qsort(ms, n, sizeof(*ms), by_value);
	double p50 = ms[n / 2], p99 = ms[n * 99 / 100], max = ms[n - 1];
	free(ms);
	fprintf(stderr, "stall: %s; STATUS round trips: %zu, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", what, n, p50,
		p99, max);
	(void)setpriority(PRIO_PROCESS, 0, 0);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(d);
	/* The bounds first: a daemon that stalls may make the hostile client fail too. */
	if (!pinshmd_wrapper()) { /* slower by far there: the scenario, not the bounds */
		ck_assert_msg(p99 <= STALL_P99_MS, "%s: p99 %.2f ms > %.0f ms", what, p99, STALL_P99_MS);
		ck_assert_msg(max <= STALL_MAX_MS, "%s: max %.2f ms > %.0f ms", what, max, STALL_MAX_MS);
	}
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the hostile client failed (status %#x)",
		      status);
}

static void stall_measure(struct daemon *d, pinshm_client_t *c, pid_t pid, const char *what)
{
	stall_measure_locked(d, c, pid, what, NULL);
}

/* A daemon of the defaults without a pool, and a client of it; in @p attr
 * the largest channel a user may have there (@p size bytes). */
static pinshm_client_t *start_largest(struct daemon *d, pinshm_channel_attr_t *attr, size_t *size)
{
	uint64_t budget, quota, q, max_segment;
	pinshm_client_t *c = start_status(d, "[daemon]\npool_segments = 0\n", &budget, &quota);

	config_derived_limits(budget, &q, &max_segment);
	largest_attr(attr, max_segment < quota ? max_segment : quota);
	ck_assert_int_eq(pinshm_segment_size(attr, size), 0);
	return c;
}

START_TEST(test_stall)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	size_t size;
	char what[64];
	pinshm_client_t *c = start_largest(&d, &attr, &size);

	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(stall_rounds(&d, &attr, 0));
	snprintf(what, sizeof(what), "creates of %zu bytes", size);
	stall_measure(&d, c, pid, what);
}
END_TEST

/* ---- working-set pinning of many large channels ------------------------- */

#define IDLE_CHANNELS 5u      /* of IDLE_SEGMENT: 5 GiB */
#define IDLE_SEGMENT (1024ull * MiB) /* the max_segment_size of IDLE_CONF */
#define IDLE_CONF "[daemon]\npool_segments = 0\ndefault_user_quota = 6G\nmax_segment_size = 1G\n"
#define IDLE_CYCLES 3u        /* of unlocks and relocks, at least */
#define IDLE_PIN_S 2u         /* their pin_idle: longer than a round of RELOCKs takes */
#define IDLE_WAIT_MS 20000u   /* for every channel to be unlocked, or locked again */

/* Whether "idle.@p i" is listed unlocked (@p unlocked), or locked: pinned,
 * not unlocked, not being locked.  @return 1, 0, or a negative status. */
static int idle_is(pinshm_client_t *c, unsigned i, bool unlocked)
{
	pinshm_list_entry_t e;
	char name[32];

	snprintf(name, sizeof(name), "idle.%u", i);
	int rc = pinshm_stat(c, name, &e);
	if (rc != 0)
		return rc;
	bool is_unlocked = e.state & PINSHM_LIST_UNLOCKED;
	bool locked = (e.state & PINSHM_LIST_PINNED) && !is_unlocked && !(e.state & PINSHM_LIST_LOCKING);
	return unlocked ? is_unlocked : locked;
}

/* The hostile user's worst: the pages of the rings of @p ch (a producer's
 * handle; its own lane spared) punched out, so that locking them again
 * populates them afresh.  @return 0 or -errno. */
static int idle_punch(pinshm_channel_t *ch)
{
	const size_t page = 4096;

	for (unsigned l = 0; l < ch->g.max_producers; l++) {
		if (seg_lane(&ch->g, ch->base, l) == ch->lane)
			continue;
		uintptr_t from = ((uintptr_t)seg_ring(&ch->g, ch->base, l) + page - 1) / page * page;
		uintptr_t to = ((uintptr_t)seg_ring(&ch->g, ch->base, l) + ch->g.capacity) / page * page;
		if (to > from && madvise((void *)from, to - from, MADV_REMOVE) != 0)
			return -errno;
	}
	return 0;
}

/* Wait until each of the @p n channels "idle.I" on @p c has been listed
 * unlocked (@p unlocked), or locked, once (it may go on: a channel locked
 * again is unlocked again once idle).  @return 0, or a negative status. */
static int idle_wait(pinshm_client_t *c, unsigned n, bool unlocked)
{
	uint64_t end = tu_now_ms() + IDLE_WAIT_MS;
	bool seen[IDLE_CHANNELS] = {false};
	unsigned left = n;

	while (left > 0 && tu_now_ms() < end) {
		for (unsigned i = 0; i < n; i++) {
			int rc = seen[i] ? 0 : idle_is(c, i, unlocked);
			if (rc < 0)
				return rc;
			if (rc == 1) {
				seen[i] = true;
				left--;
			}
		}
		if (left > 0)
			tu_sleep_ms(10);
	}
	return left == 0 ? 0 : -ETIMEDOUT;
}

/*
 * The hostile client, in a child: @p n channels of @p attr, each of
 * pin_idle IDLE_PIN_S, are left idle until the daemon has unlocked every one, their
 * rings punched out (idle_punch()), then used (a message into each: the
 * idle scan sees them all at once) or asked for (a RELOCK of each, every
 * other round), and must all be locked again;
 * for STALL_MS and IDLE_CYCLES rounds at least.  A RELOCK's reply means
 * locked: a STAT right after it says so.  The charge never changes.
 * @return the exit status.
 */
static int idle_rounds(const struct daemon *d, const pinshm_channel_attr_t *attr, unsigned n)
{
	pinshm_channel_t *p[IDLE_CHANNELS];
	pinshm_client_t *c = NULL;
	pinshm_status_t st0, st;
	pinshm_user_usage_t *u;
	size_t nu;
	uint64_t end = tu_now_ms() + STALL_MS;
	unsigned rounds = 0;
	const char *step = "connect";
	int rc = pinshm_connect(d->sock, &c);

	for (unsigned i = 0; i < n && rc == 0; i++) {
		char name[32];
		snprintf(name, sizeof(name), "idle.%u", i);
		step = "create";
		rc = pinshm_create_full(c, name, attr, 0600, 0, PINSHM_NODE_ANY, IDLE_PIN_S);
		if (rc == 0) {
			step = "open";
			rc = pinshm_open(c, name, PINSHM_PRODUCER, &p[i]);
		}
	}
	if (rc == 0) {
		step = "status";
		rc = pinshm_status(c, &st0, &u, &nu);
		if (rc == 0)
			free(u);
	}
	while (rc == 0 && (rounds < IDLE_CYCLES || tu_now_ms() < end)) {
		step = "wait for the unlocks";
		rc = idle_wait(c, n, true);
		for (unsigned i = 0; i < n && rc == 0; i++) {
			step = "punch";
			rc = idle_punch(p[i]);
		}
		bool ask = rounds % 2 == 1;
		for (unsigned i = 0; i < n && rc == 0; i++) {
			step = ask ? "relock" : "send";
			rc = ask ? pinshm_channel_relock(p[i]) : pinshm_send(p[i], "x", 1, 1000);
			if (rc == 0 && ask) {
				step = "a channel listed not locked after its RELOCK";
				rc = idle_is(c, i, false);
				rc = rc == 1 ? 0 : rc == 0 ? -EBUSY : rc;
			}
		}
		if (rc == 0 && !ask) { /* asked for, each was locked at its reply (and may be idle again) */
			step = "wait for the relocks";
			rc = idle_wait(c, n, false);
		}
		if (rc == 0) {
			step = "status";
			rc = pinshm_status(c, &st, &u, &nu);
			if (rc == 0)
				free(u);
		}
		if (rc == 0 && (st.pinned != st0.pinned || st.channels_pinned != st0.channels_pinned)) {
			step = "the charge changed";
			rc = -EBADE;
		}
		rounds++;
	}
	if (rc != 0) {
		fprintf(stderr, "stall: idle: round %u: %s: %s (%s)\n", rounds, step, strerror(-rc),
			c ? pinshm_client_error(c) : "");
		return 1;
	}
	fprintf(stderr, "stall: idle: %u rounds of %u channels unlocked and locked again\n", rounds, n);
	pinshm_disconnect(c);
	return 0;
}

/* Working-set pinning of many large channels: their unlocks and their
 * locks again go a slice a turn, not a channel, nor a scan, in one. */
START_TEST(test_stall_idle)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	uint64_t budget, quota;
	size_t size;
	char what[96];
	pinshm_client_t *c = start_status(&d, IDLE_CONF, &budget, &quota);

	largest_attr(&attr, IDLE_SEGMENT);
	ck_assert_int_eq(pinshm_segment_size(&attr, &size), 0);
	/* As many as the quota, and three quarters of the budget, hold. */
	uint64_t room = quota < budget / 4 * 3 ? quota : budget / 4 * 3;
	unsigned n = room / size < IDLE_CHANNELS ? (unsigned)(room / size) : IDLE_CHANNELS;
	ck_assert_uint_ge(n, 1);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(idle_rounds(&d, &attr, n));
	snprintf(what, sizeof(what), "%u channels of %zu bytes unlocked and locked again", n, size);
	stall_measure(&d, c, pid, what);
}
END_TEST

/* ---- a RELOCK while a large destroy is unmapped ------------------------- */

#define FAIR_SMALL (16ull * MiB) /* the idle channel asked for again: some slices */
#define FAIR_BIG (2048ull * MiB) /* the channel destroyed meanwhile, where the budget allows */
#define FAIR_CONF "[daemon]\npool_segments = 0\ndefault_user_quota = 3G\nmax_segment_size = 2G\n"

/*
 * A RELOCK of a channel unlocked for want of use, sent while a channel of
 * up to 2 GiB destroyed just before is unmapped a slice a turn: the
 * locking queue has every other turn meanwhile, so its reply comes while
 * most of the destroyed segment is still locked in the daemon (VmLck),
 * within STALL_MAX_MS, not once the whole segment has gone.
 */
START_TEST(test_relock_while_dying)
{
	struct daemon d;
	pinshm_channel_attr_t big, small;
	uint64_t budget, quota;
	size_t big_size, small_size;
	pinshm_channel_t *p;
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	size_t nu;
	struct timespec a, b;
	pinshm_client_t *c = start_status(&d, FAIR_CONF, &budget, &quota);

	largest_attr(&small, FAIR_SMALL);
	ck_assert_int_eq(pinshm_segment_size(&small, &small_size), 0);
	largest_attr(&big, budget / 2 < FAIR_BIG ? budget / 2 : FAIR_BIG);
	ck_assert_int_eq(pinshm_segment_size(&big, &big_size), 0);
	long small_kb = (long)((small_size + 4095) / 4096 * 4), big_kb = (long)((big_size + 4095) / 4096 * 4);
	CLIENT_RC(c, pinshm_create_full(c, "idle.0", &small, 0600, 0, PINSHM_NODE_ANY, 1), 0);
	CLIENT_RC(c, pinshm_open(c, "idle.0", PINSHM_PRODUCER, &p), 0);
	pinshm_client_t *h = connect_ok(&d);
	CLIENT_RC(h, pinshm_create(h, "big", &big, 0600, 0), 0);
	CLIENT_RC(h, pinshm_unlink(h, "big"), 0);
	ck_assert_int_eq(idle_wait(c, 1, true), 0);
	/* "idle.0" wholly unlocked: what is locked is "big". */
	long base_kb = daemon_locked_kb_at_most(d.pid, big_kb);
	ck_assert_int_eq(base_kb, big_kb);
	CLIENT_RC(c, pinshm_status(c, &st, &u, &nu), 0);
	free(u);
	uint32_t channels = st.channels_pinned + st.channels_unpinned;
	CLIENT_RC(h, pinshm_disconnect(h), 0);
	uint64_t deadline = tu_now_ms() + GONE_MS;
	do { /* "big" destroyed: its segment queued to be unmapped */
		ck_assert_msg(tu_now_ms() < deadline, "'big' not destroyed in %u ms", GONE_MS);
		CLIENT_RC(c, pinshm_status(c, &st, &u, &nu), 0);
		free(u);
	} while (st.channels_pinned + st.channels_unpinned >= channels);

	(void)setpriority(PRIO_PROCESS, (id_t)d.pid, STALL_NICE);
	clock_gettime(CLOCK_MONOTONIC, &a);
	CLIENT_RC(c, pinshm_channel_relock(p), 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	long at_reply_kb = proc_status_value_kb(d.pid, "VmLck:");
	double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	ck_assert_int_eq(idle_is(c, 0, false), 1);
	long end_kb = daemon_locked_kb_at_most(d.pid, small_kb);
	fprintf(stderr, "relock while dying: %zu bytes locked again in %.2f ms while %zu bytes were unmapped; "
		"pinshmd VmLck %ld kB before the destroy, %ld kB at the reply, %ld kB after\n",
		small_size, ms, big_size, base_kb, at_reply_kb, end_kb);
	ck_assert_msg(end_kb <= small_kb, "pinshmd VmLck %ld kB: the destroyed segment not unmapped", end_kb);
	/* Some of it still locked when the test looks (not half: a test
	 * descheduled on a loaded machine looks late). */
	ck_assert_msg(at_reply_kb > small_kb, "the RELOCK's reply came with %ld kB of the destroyed %ld kB left "
		      "locked: it waited for the unmapping", at_reply_kb - small_kb, big_kb);
	if (!pinshmd_wrapper())
		ck_assert_msg(ms <= STALL_MAX_MS, "the RELOCK took %.2f ms > %.0f ms", ms, STALL_MAX_MS);
	pinshm_channel_close(p);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
}
END_TEST

/* ---- a reload that empties a large pool --------------------------------- */

#define RELOAD_SEGMENTS 3u     /* of RELOAD_CLASS: 3 GiB locked, ready, where the budget allows */
#define RELOAD_CLASS (1024ull * MiB) /* the largest pool_sizes allows */
#define RELOAD_NO_POOL "[daemon]\npool_segments = 0\n"
#define RELOAD_AFTER_MS 3000u  /* measured after the reload: the pool's pages go meanwhile */
/* STATUS round trips, at least, served while they go: a drain of a
 * segment a turn serves RELOAD_SEGMENTS - 1. */
#define RELOAD_INSIDE 8u

/* The hostile side, in a child: reload a configuration without a pool
 * (SIGHUP), which destroys the pool's ready segments, and wait while they
 * go.  @return the exit status: 0, 1. */
static int reload_drain(const struct daemon *d)
{
	FILE *f = fopen(d->conf, "w");

	if (!f || fputs(RELOAD_NO_POOL, f) < 0 || fclose(f) != 0 || kill(d->pid, SIGHUP) != 0) {
		fprintf(stderr, "stall: reload: %s\n", strerror(errno));
		return 1;
	}
	tu_sleep_ms(RELOAD_AFTER_MS);
	return 0;
}

/*
 * A reload (SIGHUP) that empties a large pool of ready segments: their
 * pages go in slices, not in one turn of the loop.  The pool: as much of
 * RELOAD_SEGMENTS segments of RELOAD_CLASS as half the budget holds (a
 * smaller class where not even one does).  Besides the bounds, the
 * daemon's VmLck says the unmapping went in slices: requests were served
 * between its first slice and its last (a drain in one turn serves none).
 */
START_TEST(test_stall_reload)
{
	struct daemon d;
	uint64_t budget, quota;
	char what[96];
	pinshm_client_t *c = start_status(&d, RELOAD_NO_POOL, &budget, &quota);
	uint64_t room = budget / 2, size = RELOAD_CLASS;
	unsigned n = room / size < RELOAD_SEGMENTS ? (unsigned)(room / size) : RELOAD_SEGMENTS;

	if (n == 0) {
		size = room / MiB * MiB;
		n = 1;
	}
	ck_assert_uint_ge(size, 64 * MiB);
	daemon_write_config(&d, "[daemon]\npool_segments = %u\npool_sizes = %lluM\n", n,
			    (unsigned long long)(size / MiB));
	long base_kb = proc_status_value_kb(d.pid, "VmLck:");
	ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
	uint64_t deadline = tu_now_ms() + GONE_MS;
	for (;;) { /* the reload taken: a pool of one class */
		pinshm_status_t st;
		pinshm_pool_t pool;
		CLIENT_RC(c, pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
		if (pool.count == 1)
			break;
		ck_assert_msg(tu_now_ms() < deadline, "the reload to a pool not taken in %u ms", GONE_MS);
		tu_sleep_ms(2);
	}
	wait_pool_ready(c);
	struct locked_trace t = {.full_kb = proc_status_value_kb(d.pid, "VmLck:"), .gone_kb = (long)(n * size / 1024)};
	ck_assert_msg(t.full_kb - base_kb >= t.gone_kb, "pinshmd VmLck %ld kB with the pool, %ld kB before: %ld kB "
		      "of ready segments not all locked", t.full_kb, base_kb, t.gone_kb);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(reload_drain(&d));
	snprintf(what, sizeof(what), "a reload that empties a pool of %u segments of %llu MiB", n,
		 (unsigned long long)(size / MiB));
	stall_measure_locked(&d, c, pid, what, &t);
	ck_assert_msg(t.end_kb <= t.full_kb - t.gone_kb, "pinshmd VmLck %ld kB after the reload, %ld kB before: "
		      "the pool's %ld kB not unmapped", t.end_kb, t.full_kb, t.gone_kb);
	/* A small pool (a small machine's budget) goes in a few ms: one trip. */
	unsigned want = n * size >= 512 * MiB ? RELOAD_INSIDE : 1;
	ck_assert_msg(t.inside >= want, "%zu of %zu STATUS round trips served while the pool was unmapped, fewer "
		      "than %u: the unmapping held the loop (not in slices)", t.inside, t.trips, want);
}
END_TEST

/* ---- hand-backs naming processes of long maps -------------------------- */

#define ADOPT_OWNERS 4u      /* processes the endpoints name */
#define ADOPT_MAPPINGS 24000 /* each: some 1.1 MB of maps, more than the daemon reads of one */
#define SMALL_QUOTA "[daemon]\npool_segments = 0\ndefault_user_quota = 8M\n"

/* A child of ADOPT_MAPPINGS mappings (pages of alternating protections,
 * untouched), until killed; a byte on @p arg's pipe once they are made. */
static int long_maps_owner(void *arg, int idx)
{
	long page = sysconf(_SC_PAGESIZE);
	char *area = mmap(NULL, (size_t)ADOPT_MAPPINGS * (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)idx;
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* not left behind by a failed test */
	if (area == MAP_FAILED)
		tu_child_fail(2, "mmap: %s", strerror(errno));
	for (long i = 0; i < ADOPT_MAPPINGS; i += 2)
		if (mprotect(area + i * page, (size_t)page, PROT_READ | PROT_WRITE) != 0)
			tu_child_fail(3, "mprotect: %s", strerror(errno));
	if (write(*(const int *)arg, "r", 1) != 1)
		tu_child_fail(4, "write: %s", strerror(errno));
	for (;;)
		pause();
}

/* Send @p m on @p sock, with descriptor @p fd unless -1.  @return 0 or -EIO. */
static int raw_send_msg(int sock, const struct proto_msg *m, int fd)
{
	uint8_t buf[PROTO_MAX_PACKET];
	int len = proto_encode(m, buf);

	return len > 0 && fdpass_send(sock, buf, (size_t)len, &fd, fd >= 0 ? 1 : 0, 0) == 0 ? 0 : -EIO;
}

/* Read a reply on @p sock into @p m (a descriptor it brings closed).
 * @return its status. */
static int raw_recv_msg(int sock, struct proto_msg *m)
{
	uint8_t buf[PROTO_MAX_PACKET];
	unsigned nfds = 0;
	int got = -1;
	ssize_t n = fdpass_recv(sock, buf, sizeof(buf), &got, 1, &nfds, 0);

	if (nfds > 0 && got >= 0)
		close(got);
	if (n <= 0 || proto_decode(buf, (size_t)n, true, m) != 0)
		return -ECONNRESET;
	return m->status;
}

/* Send @p m on @p sock, with descriptor @p fd unless -1, and read the
 * reply into @p m (a descriptor it brings closed).  @return its status. */
static int raw_request(int sock, struct proto_msg *m, int fd)
{
	int rc = raw_send_msg(sock, m, fd);

	return rc ? rc : raw_recv_msg(sock, m);
}

/* A raw connection to @p d, HELLO said.  @return it, or -1. */
static int raw_connect(const struct daemon *d)
{
	static struct proto_msg m;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(&m, 0, sizeof(m));
	m.h.type = PROTO_HELLO;
	m.h.seq = 1;
	m.u.hello.version = PROTO_VERSION;
	if (fd >= 0 && strlen(d->sock) < sizeof(sa.sun_path)) {
		memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && raw_request(fd, &m, -1) == 0)
			return fd;
	}
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A sealed memfd of huge pages holding a channel of @p attr, formatted, as
 * the daemon makes one (pinshmd.conf(5)): @return it, or -1. */
static int huge_segment(const pinshm_channel_attr_t *attr)
{
	size_t size;
	int fd = memfd_create("pinshm:huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);

	if (fd < 0 || pinshm_segment_size(attr, &size) != 0)
		goto fail;
	size = (size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto fail;
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		goto fail;
	int rc = pinshm_segment_format(base, size, attr);
	munmap(base, size);
	if (rc == 0)
		return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A segment of @p attr (of huge pages where @p huge) whose endpoints are
 * all attached: the producers by @p owners in turn, the consumer by this
 * process.  @return it, or -1. */
static int crafted_segment(const pinshm_channel_attr_t *attr, const pid_t *owners, unsigned nowners, bool huge)
{
	struct seg_geometry g;
	struct stat st;
	int fd = -1;

	if (seg_geometry_compute(attr, &g) != 0 || (huge ? (fd = huge_segment(attr)) < 0
							: pinshm_segment_create(attr, &fd) != 0))
		return -1;
	/* The file's size: a mapping of huge pages is unmapped whole. */
	void *base = fstat(fd, &st) == 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
					 : MAP_FAILED;
	if (base == MAP_FAILED) {
		close(fd);
		return -1;
	}
	for (unsigned i = 0; i < g.max_producers + g.max_consumers; i++) {
		struct endpoint *ep = seg_endpoint(&g, base, i);
		atomic_store(&ep->state, EP_ACTIVE);
		atomic_store(&ep->pid, i < g.max_producers ? (uint32_t)owners[i % nowners] : (uint32_t)getpid());
	}
	munmap(base, (size_t)st.st_size);
	return fd;
}

/* Hand back @p seg as @p attr's consumer on @p sock.  @return the status. */
static int raw_adopt(int sock, const pinshm_channel_attr_t *attr, int seg)
{
	static struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.h.type = PROTO_HANDBACK;
	m.h.seq = 2;
	snprintf(m.u.handback.name, sizeof(m.u.handback.name), "crafted");
	m.u.handback.geo = proto_geometry_from_attr(attr);
	m.u.handback.role = PINSHM_CONSUMER;
	m.u.handback.endpoint = attr->max_producers;
	return raw_request(sock, &m, seg);
}

/* Open @p name as @p role on @p sock (its descriptor closed at once): the
 * channel's number into @p id unless NULL.  @return the status. */
static int raw_open(int sock, const char *name, unsigned role, uint64_t *id)
{
	static struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.h.type = PROTO_OPEN;
	m.h.seq = 3;
	snprintf(m.u.open.name, sizeof(m.u.open.name), "%s", name);
	m.u.open.role = role;
	m.u.open.node = PINSHM_NODE_ANY;
	m.u.open.owner = PROTO_OWNER_ANY;
	int rc = raw_request(sock, &m, -1);
	if (rc == 0 && id)
		*id = m.u.open_reply.id;
	return rc;
}

static int raw_open_consumer(int sock, const char *name, uint64_t *id)
{
	return raw_open(sock, name, PINSHM_CONSUMER, id);
}

/* The RELOCK of channel @p id, or (@p device) a DEVICE +1 of it (a CUDA
 * registration, of an endpoint the connection holds). */
static void raw_lock_wait_msg(struct proto_msg *m, uint64_t id, bool device)
{
	memset(m, 0, sizeof(*m));
	m->h.type = device ? PROTO_DEVICE : PROTO_RELOCK;
	m->h.seq = device ? 5 : 4;
	if (device) {
		m->u.device.id = id;
		m->u.device.kind = PINSHM_DEVICE_CUDA;
		m->u.device.delta = 1;
	} else {
		m->u.relock.id = id;
	}
}

/* The hostile client, in a child: hand back a crafted segment of @p attr
 * (of huge pages where @p huge) whose producers name @p owners (@p nowners
 * of them), again and again for STALL_MS (each a new channel, gone with
 * its connection).  @return the exit status. */
static int adopt_rounds(const struct daemon *d, const pinshm_channel_attr_t *attr, const pid_t *owners,
			unsigned nowners, bool huge)
{
	uint64_t end = tu_now_ms() + STALL_MS;
	unsigned rounds = 0;

	while (tu_now_ms() < end) {
		int sock = raw_connect(d), seg = crafted_segment(attr, owners, nowners, huge);
		int rc = sock >= 0 && seg >= 0 ? raw_adopt(sock, attr, seg) : -EIO;
		if (rc != 0) {
			fprintf(stderr, "stall: hand-back %u: %s\n", rounds, strerror(-rc));
			return 1;
		}
		close(seg);
		close(sock);
		rounds++;
	}
	fprintf(stderr, "stall: %u hand-backs\n", rounds);
	return rounds >= 2 ? 0 : 1;
}

START_TEST(test_stall_adopt)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	struct tu_procs ps;
	pid_t owners[ADOPT_OWNERS];
	int ready[2];
	char b;

	tu_procs_init(&ps);
	ck_assert_int_eq(pipe(ready), 0);
	for (unsigned i = 0; i < ADOPT_OWNERS; i++) {
		owners[i] = ps.pid[tu_spawn(&ps, "long maps", long_maps_owner, &ready[1], (int)i)];
		ck_assert_int_eq(read(ready[0], &b, 1), 1);
	}
	pinshm_client_t *c = start_conf(&d, SMALL_QUOTA);
	tu_attr(&attr, PINSHM_QUEUE, 4096, 64, 1);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(adopt_rounds(&d, &attr, owners, ADOPT_OWNERS, false));
	stall_measure(&d, c, pid, "hand-backs naming 4 processes of long maps");
	tu_kill_all(&ps);
	close(ready[0]);
	close(ready[1]);
}
END_TEST

/* Measure the daemon @p d's service to @p c while a child hands back
 * segments of @p attr (@p size bytes; of huge pages where @p huge) again
 * and again (@p who: by whom, for the output). */
static void handback_measure(struct daemon *d, pinshm_client_t *c, const pinshm_channel_attr_t *attr, size_t size,
			     const char *who, bool huge)
{
	char what[96];
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(huge_back(adopt_rounds(d, attr, &(pid_t){getpid()}, 1, huge), huge));
	snprintf(what, sizeof(what), "hand-backs of %zu bytes%s", size, who);
	stall_measure(d, c, pid, what);
}

/* Hand-backs of the largest segments a user may have: the daemon locks
 * them a slice a turn, as it does what it creates. */
START_TEST(test_stall_handback_large)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	size_t size;
	pinshm_client_t *c = start_largest(&d, &attr, &size);

	handback_measure(&d, c, &attr, size, "", false);
}
END_TEST

/* ---- a restart that adopts a large segment ------------------------------ */

#define RESTART_BYTES (1024ull * MiB) /* the segment the store hands the daemon */
/* Room for larger segments than the defaults allow. */
#define LARGE_CONF "[daemon]\npool_segments = 0\nmax_segment_size = 2G\ndefault_user_quota = 2G\n"

#define STORED_MESSAGES 3u            /* left in the first lane of a stored segment */
#define STORED_MESSAGE (1024u * 1024u) /* bytes each: across huge pages */

/* Send STORED_MESSAGES messages into segment @p fd through a producer of
 * this process's own, which then closes. */
static void stored_fill(int fd)
{
	static unsigned char buf[STORED_MESSAGE];
	pinshm_channel_t *p = tu_attach(fd, PINSHM_PRODUCER);

	for (unsigned i = 0; i < STORED_MESSAGES; i++) {
		tu_pattern(buf, sizeof(buf), i);
		TU_RC(pinshm_send(p, buf, sizeof(buf), 0), 0);
	}
	TU_RC(pinshm_channel_close(p), 0);
}

/* In a child: the messages of stored_fill() came through the restart: a
 * consumer of @p name receives them, byte for byte.  @return 0, 1. */
static int stored_received(const struct daemon *d, const char *name)
{
	static unsigned char buf[STORED_MESSAGE];
	pinshm_client_t *c = NULL;
	pinshm_channel_t *h = NULL;
	uint64_t end = tu_now_ms() + GONE_MS;
	unsigned i = 0;
	int rc = pinshm_connect(d->sock, &c);

	/* Busy while the restart client's endpoints are still being reaped. */
	while (rc == 0 && (rc = pinshm_open(c, name, PINSHM_CONSUMER, &h)) == -EBUSY && tu_now_ms() < end)
		usleep(1000);
	for (; rc == 0 && i < STORED_MESSAGES; i++) {
		size_t len = 0;
		rc = pinshm_recv(h, buf, sizeof(buf), &len, 1000);
		if (rc == 0 && (len != sizeof(buf) || tu_pattern_bad(buf, len, i) >= 0))
			rc = -EBADMSG;
	}
	if (rc != 0)
		fprintf(stderr, "stall: restart: stored message %u of '%s': %s (%s)\n", i, name, strerror(-rc),
			c ? pinshm_client_error(c) : "");
	pinshm_channel_close(h);
	pinshm_disconnect(c);
	return rc == 0 ? 0 : 1;
}

/* A queue of about RESTART_BYTES (of huge pages where @p huge), made by
 * this process, as the descriptor store hands it to a daemon that starts,
 * stored_fill() done: @return its descriptor, and its record (this user's,
 * mode 0600, named @p name, @p flags: PINSHM_PERSISTENT or 0) in
 * @p fdname. */
static int stored_segment(const char *name, unsigned flags, bool huge, char *fdname, size_t len)
{
	pinshm_channel_attr_t attr;
	struct stat st;
	int fd = -1;

	largest_attr_of(&attr, RESTART_BYTES, huge ? HUGE_LANE : 4 * MiB);
	if (huge)
		ck_assert_int_ge(fd = huge_segment(&attr), 0);
	else
		ck_assert_int_eq(pinshm_segment_create(&attr, &fd), 0);
	stored_fill(fd);
	ck_assert_int_eq(fstat(fd, &st), 0);
	snprintf(fdname, len, "pinshm.2.%llu.%u.%u.600.%u.%u.%u.%llu.%u.%u.%u.-1.0.%s", (unsigned long long)st.st_ino,
		 (unsigned)getuid(), (unsigned)getgid(), flags, (unsigned)attr.kind, attr.flags,
		 (unsigned long long)attr.capacity, attr.max_message, attr.max_producers, attr.max_consumers, name);
	return fd;
}

/* Whether a STAT of @p name on @p c says it is locked: pinned, no longer
 * being locked.  @return 1, 0, or a negative status. */
static int stat_locked(pinshm_client_t *c, const char *name, pinshm_list_entry_t *e)
{
	int rc = pinshm_stat(c, name, e);

	if (rc != 0)
		return rc;
	return (e->state & PINSHM_LIST_PINNED) && !(e->state & PINSHM_LIST_LOCKING);
}

/* Send a RELOCK on @p socks[0] and a DEVICE +1 on @p socks[1] (channel
 * @p ids[i] on each), and wait for their replies: a reply seen before a
 * STAT says @p name is locked fails it (each is answered only once the
 * last slice is locked).  @return 0, or a negative status; the RELOCK's
 * wait in @p waited (ms). */
static int lock_waits(pinshm_client_t *c, const char *name, const int socks[2], const uint64_t ids[2],
		      uint64_t *waited)
{
	struct proto_msg m[2];
	bool answered[2] = {false, false};
	pinshm_list_entry_t e;
	uint64_t t0 = tu_now_ms(), end = t0 + 60000;
	int rc = 0;

	for (int i = 0; i < 2 && rc == 0; i++) {
		raw_lock_wait_msg(&m[i], ids[i], i == 1);
		rc = raw_send_msg(socks[i], &m[i], -1);
	}
	while (rc == 0 && !(answered[0] && answered[1]) && tu_now_ms() < end) {
		struct pollfd p[2] = {{.fd = socks[0], .events = POLLIN}, {.fd = socks[1], .events = POLLIN}};
		int n = poll(p, 2, 1);
		int locked = n < 0 ? -errno : stat_locked(c, name, &e); /* after the poll: a reply came before */
		for (int i = 0; i < 2 && n > 0 && locked >= 0; i++) {
			if (answered[i] || !(p[i].revents & POLLIN))
				continue;
			if (!locked) {
				fprintf(stderr, "stall: restart: the %s was answered while '%s' was being locked\n",
					i ? "DEVICE +1" : "RELOCK", name);
				return -EBUSY;
			}
			answered[i] = true;
			rc = raw_recv_msg(socks[i], &m[i]);
			if (i == 0)
				*waited = tu_now_ms() - t0;
		}
		rc = rc ? rc : locked < 0 ? locked : 0;
	}
	return rc ? rc : answered[0] && answered[1] ? 0 : -ETIMEDOUT;
}

/* In a child: the channel @p name, adopted at the start, is served while
 * it is locked: listed not pinned yet but locking (@p before: the test's
 * first STAT of it, on its first connection), opened, and a RELOCK
 * and a DEVICE +1 wait until it is locked; then it is listed pinned, no
 * longer locking, the registration counted, of huge pages where @p huge
 * (only then); and its messages are there (stored_received()).  The opens
 * are raw requests: the library's would map the whole segment first.
 * @return the exit status. */
static int restart_client(const struct daemon *d, const char *name, bool huge, const pinshm_list_entry_t *first)
{
	pinshm_client_t *c = NULL;
	pinshm_list_entry_t before = *first, after;
	uint64_t ids[2] = {0, 0}, waited = 0;
	int socks[2] = {raw_connect(d), raw_connect(d)}, rc = pinshm_connect(d->sock, &c);

	if (rc == 0 && (socks[0] < 0 || socks[1] < 0))
		rc = -EIO;
	rc = rc ? rc : raw_open(socks[0], name, PINSHM_PRODUCER, &ids[0]);
	rc = rc ? rc : raw_open_consumer(socks[1], name, &ids[1]);
	rc = rc ? rc : lock_waits(c, name, socks, ids, &waited);
	rc = rc ? rc : pinshm_stat(c, name, &after);
	if (rc != 0) {
		fprintf(stderr, "stall: restart: %s (%s)\n", strerror(-rc), c ? pinshm_client_error(c) : "");
		return 1;
	}
	fprintf(stderr,
		"stall: restart: '%s' %s%s at the first STAT, %s%s after a RELOCK that waited %llu ms, "
		"%u device registrations\n",
		name, before.state & PINSHM_LIST_PINNED ? "pinned" : "not pinned yet",
		before.state & PINSHM_LIST_LOCKING ? ", locking" : ", NOT locking",
		after.state & PINSHM_LIST_PINNED ? "pinned" : "NOT pinned",
		after.state & PINSHM_LIST_LOCKING ? ", STILL locking" : "", (unsigned long long)waited,
		after.device_regs);
	close(socks[0]);
	close(socks[1]);
	pinshm_disconnect(c);
	/* Huge pages lock fast (some 100 ms a GiB): a first STAT that comes
	 * late may find them locked already; the first round trip's bound
	 * is what shows they were locked a slice a turn. */
	bool locking_first = !(before.state & PINSHM_LIST_PINNED) && (before.state & PINSHM_LIST_LOCKING);
	bool locked_first = huge && (before.state & PINSHM_LIST_PINNED) && !(before.state & PINSHM_LIST_LOCKING);
	bool ok = (locking_first || locked_first) && (after.state & PINSHM_LIST_PINNED) && !(after.state & PINSHM_LIST_LOCKING) &&
		  after.device_regs == 1 && !(after.state & PINSHM_LIST_HUGEPAGES) == !huge;
	return ok ? stored_received(d, name) : 1;
}

/* A daemon that starts with a large segment (of huge pages where @p huge)
 * of channel @p name in the descriptor store (a restart) serves at once:
 * it locks the segment a slice a turn. */
static void restart_measure(const char *name, bool huge)
{
	struct daemon d;
	char fdname[256], what[96];
	const char *names[1] = {fdname};
	int seg = stored_segment(name, PINSHM_PERSISTENT, huge, fdname, sizeof(fdname));
	struct daemon_opts o = {.config = true, .listen_fds = &seg, .listen_names = names, .nlisten = 1};
	struct stat st;

	ck_assert_int_eq(fstat(seg, &st), 0);
	daemon_start_config(&d, &o, LARGE_CONF);
	close(seg); /* the daemon's now */
	/* Its first request, from the first accept on: not after the lock. */
	uint64_t t0 = tu_now_ms();
	pinshm_client_t *c = connect_ok(&d);
	pinshm_status_t status;
	pinshm_user_usage_t *u;
	size_t nu;
	CLIENT_RC(c, pinshm_status(c, &status, &u, &nu), 0);
	free(u);
	uint64_t first = tu_now_ms() - t0;
	fprintf(stderr, "stall: restart: the first connect and STATUS took %llu ms\n", (unsigned long long)first);
	pinshm_list_entry_t before; /* at once: a segment of huge pages is locked in some 100 ms */
	CLIENT_RC(c, pinshm_stat(c, name, &before), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(restart_client(&d, name, huge, &before));
	snprintf(what, sizeof(what), "a start that adopts %lld bytes%s", (long long)st.st_size,
		 huge ? " of huge pages" : "");
	stall_measure(&d, c, pid, what);
	if (!pinshmd_wrapper())
		ck_assert_msg(first <= STALL_MAX_MS, "%s: first round trip %llu ms > %.0f ms", what,
			      (unsigned long long)first, STALL_MAX_MS);
}

START_TEST(test_stall_restart_large)
{
	restart_measure("big", false);
}
END_TEST

static uint64_t charged(pinshm_client_t *c);

/* A channel adopted at the start and destroyed while it is locked (not
 * persistent, its grace over at once): its lock and its charge go, the
 * daemon serves on and stops cleanly (no leak under a wrapper). */
START_TEST(test_restart_given_up)
{
	struct daemon d;
	char fdname[256];
	const char *names[1] = {fdname};
	int seg = stored_segment("brief", 0, false, fdname, sizeof(fdname));
	struct daemon_opts o = {
		.config = true, .log = true, .verbose = true, .listen_fds = &seg, .listen_names = names, .nlisten = 1};

	ck_assert_int_eq(setenv("PINSHMD_TEST_ADOPT_GRACE_MS", "1", 1), 0);
	daemon_start_config(&d, &o, LARGE_CONF);
	unsetenv("PINSHMD_TEST_ADOPT_GRACE_MS");
	close(seg);
	pinshm_client_t *c = connect_ok(&d);
	wait_gone(c, "brief");
	uint64_t end = tu_now_ms() + GONE_MS;
	while (charged(c) != 0 && tu_now_ms() < end)
		usleep(1000);
	ck_assert_uint_eq(charged(c), 0);
	pinshm_status_t st;
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.pinned, 0); /* no pool here: nothing counted pinned is left */
	ck_assert_int_le(daemon_locked_kb_at_most(d.pid, 0), 0);
	ck_assert_msg(daemon_log_has(&d, "locking given up"), "'brief' was not destroyed while it was locked");
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
}
END_TEST

/* ---- hand-backs by a client the daemon cannot see ---------------------- */

#define UNSEEN_BYTES (512ull * MiB) /* each segment handed back */

/* Whether this process may make a PID namespace (root). */
static bool pid_namespaces_allowed(void)
{
	int st = 0;
	pid_t p = fork();

	if (p == 0)
		_exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Hand-backs of large segments by a client whose pid the daemon cannot
 * see (the daemon in a PID namespace of its own: SO_PEERCRED pid 0): no
 * endpoint is judged, but the segment is locked a slice a turn, as for
 * any other hand-back. */
START_TEST(test_stall_handback_unseen)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	size_t size;

	if (!pid_namespaces_allowed()) {
		fprintf(stderr, "note: no PID namespaces here (root needed): the unseen hand-back test is skipped\n");
		return;
	}
	daemon_start_config(&d, &(struct daemon_opts){.config = true, .own_pid_ns = true}, LARGE_CONF);
	pinshm_client_t *c = connect_ok(&d);
	largest_attr(&attr, UNSEEN_BYTES);
	ck_assert_int_eq(pinshm_segment_size(&attr, &size), 0);
	handback_measure(&d, c, &attr, size, " by a client of pid 0", false);
}
END_TEST

/* ---- reaps of a shared queue full of records --------------------------- */

#define REAP_CAPACITY (64u * 1024u)
#define REAP_CONSUMERS PINSHM_MAX_CONSUMERS

/* The hostile client, in a child: a shared queue of as many lanes of
 * REAP_CAPACITY as the quota holds, filled with the smallest records;
 * then, for STALL_MS, a connection opens all its consumers and goes,
 * again and again (each reap of a consumer scans every lane).
 * @return the exit status. */
static int reap_rounds(const struct daemon *d)
{
	pinshm_channel_attr_t attr;
	pinshm_client_t *owner = NULL;
	static pinshm_channel_t *prod[PINSHM_MAX_PRODUCERS];
	unsigned lanes = 1, rounds = 0;
	size_t size, records = 0;

	for (;; lanes++) {
		tu_attr(&attr, PINSHM_QUEUE, REAP_CAPACITY, lanes + 1, REAP_CONSUMERS);
		if (pinshm_segment_size(&attr, &size) != 0 || size > 8 * MiB - 64 * 1024)
			break;
	}
	tu_attr(&attr, PINSHM_QUEUE, REAP_CAPACITY, lanes, REAP_CONSUMERS);
	if (pinshm_connect(d->sock, &owner) != 0 || pinshm_create(owner, "reap", &attr, 0600, 0) != 0) {
		fprintf(stderr, "stall: reap: create: %s\n", owner ? pinshm_client_error(owner) : "no connection");
		return 1;
	}
	for (unsigned i = 0; i < lanes; i++) {
		if (pinshm_open(owner, "reap", PINSHM_PRODUCER, &prod[i]) != 0)
			return 1;
		while (pinshm_send(prod[i], "x", 1, 0) == 0)
			records++;
	}
	uint64_t end = tu_now_ms() + STALL_MS;
	while (tu_now_ms() < end) {
		int sock = raw_connect(d), rc = sock >= 0 ? 0 : -EIO;
		for (unsigned k = 0; k < REAP_CONSUMERS && rc == 0; k++)
			while ((rc = raw_open_consumer(sock, "reap", NULL)) == -EBUSY)
				usleep(1000); /* the last round's consumers are still being reaped */
		if (rc != 0) {
			fprintf(stderr, "stall: reap: round %u: %s\n", rounds, strerror(-rc));
			return 1;
		}
		close(sock); /* the daemon reaps every consumer */
		rounds++;
	}
	fprintf(stderr, "stall: %u lanes, %zu records, %u disconnects of %u consumers\n", lanes, records, rounds,
		REAP_CONSUMERS);
	return rounds >= 2 ? 0 : 1;
}

START_TEST(test_stall_reap)
{
	struct daemon d;

	pinshm_client_t *c = start_conf(&d, SMALL_QUOTA);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(reap_rounds(&d));
	stall_measure(&d, c, pid, "reaps of a shared queue full of records");
}
END_TEST

/* Bytes charged to this test's user (STATUS). */
static uint64_t charged(pinshm_client_t *c)
{
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	size_t n;
	uint64_t bytes = 0;

	CLIENT_RC(c, pinshm_status(c, &st, &u, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (u[i].uid == getuid())
			bytes += u[i].charged;
	free(u);
	return bytes;
}

/* A child that creates @p name as @p attr, and exits; @return its pid once
 * the daemon is making it (charged, not listed yet). */
static pid_t create_in_child(const struct daemon *d, pinshm_client_t *obs, const char *name,
			     const pinshm_channel_attr_t *attr)
{
	uint64_t base = charged(obs);
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pinshm_client_t *c = NULL;
		_exit(pinshm_connect(d->sock, &c) == 0 && pinshm_create(c, name, attr, 0600, 0) == 0 ? 0 : 1);
	}
	uint64_t end = tu_now_ms() + GONE_MS;
	while (charged(obs) == base && tu_now_ms() < end)
		usleep(200);
	ck_assert_msg(charged(obs) > base, "the create of '%s' was never charged", name);
	ck_assert_msg(!list_find(obs, name, NULL, NULL), "'%s' listed before its create is done", name);
	return pid;
}

START_TEST(test_stall_given_up)
{
	struct daemon d;
	uint64_t budget, quota, q, max_segment;
	pinshm_channel_attr_t attr;
	int status;

	pinshm_client_t *c = start_status(&d, "[daemon]\npool_segments = 0\n", &budget, &quota);
	config_derived_limits(budget, &q, &max_segment);
	largest_attr(&attr, max_segment < quota ? max_segment : quota);

	/* Its creator killed half-way: the charge goes, the name is free. */
	pid_t pid = create_in_child(&d, c, "half", &attr);
	CLIENT_RC(c, pinshm_create(c, "half", &attr, 0600, 0), -EEXIST);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	uint64_t end = tu_now_ms() + GONE_MS;
	while (charged(c) != 0 && tu_now_ms() < end)
		usleep(1000);
	ck_assert_uint_eq(charged(c), 0);
	CLIENT_RC(c, pinshm_create(c, "half", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "half", NULL, NULL));
	CLIENT_RC(c, pinshm_unlink(c, "half"), 0);

	/* The daemon stopped half-way: it exits 0 (no leak under valgrind). */
	pid = create_in_child(&d, c, "stop", &attr);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}
END_TEST

START_TEST(test_stall_unpinned)
{
	struct daemon d;
	struct daemon_opts o = {.as_user = true, .memlock = 3 * MiB};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	pinshm_channel_t *p, *q;
	char buf[16];
	size_t len;

	if (!daemon_test_user(&o.uid, &o.gid))
		return;
	daemon_start_opts(&d, &o);
	pinshm_client_t *c = connect_ok(&d);
	long lck0 = proc_status_value_kb(d.pid, "VmLck:");
	tu_attr(&attr, PINSHM_QUEUE, 8 * MiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "mid", &attr, 0600, 0), 0);
	ck_assert_msg(strstr(pinshm_client_error(c), "not pinned") != NULL, "create said: '%s'",
		      pinshm_client_error(c));
	ck_assert(list_find(c, "mid", &e, NULL));
	ck_assert(!(e.state & PINSHM_LIST_PINNED));
	ck_assert_int_le(proc_status_value_kb(d.pid, "VmLck:"), lck0); /* its first slice unlocked again */
	tu_attr(&attr, PINSHM_QUEUE, 4096, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "small", &attr, 0600, 0), 0);
	ck_assert(list_find(c, "small", &e, NULL));
	ck_assert(e.state & PINSHM_LIST_PINNED);
	CLIENT_RC(c, pinshm_open(c, "mid", PINSHM_PRODUCER, &p), 0);
	CLIENT_RC(c, pinshm_open(c, "mid", PINSHM_CONSUMER, &q), 0);
	ck_assert_int_eq(pinshm_send(p, "unpinned", 8, 1000), 0);
	ck_assert_int_eq(pinshm_recv(q, buf, sizeof(buf), &len, 1000), 0);
	ck_assert_uint_eq(len, 8);
	pinshm_channel_close(p);
	pinshm_channel_close(q);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
}
END_TEST

/* ---- huge pages through the slices --------------------------------------- */

/* A restart that adopts a persistent channel of huge pages: locked a slice
 * a turn too, and its messages there after it. */
START_TEST(test_huge_restart)
{
	if (huge_ready("a restart with a channel of huge pages"))
		restart_measure("hugebig", true);
}
END_TEST

/* Hand-backs of segments of huge pages, again and again: locked a slice a
 * turn, and destroyed so, every page given back. */
START_TEST(test_huge_handback)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	size_t size;

	if (!huge_ready("hand-backs of huge pages"))
		return;
	pinshm_client_t *c = start_conf(&d, LARGE_CONF);
	largest_attr_of(&attr, HUGE_BYTES, HUGE_LANE);
	ck_assert_int_eq(pinshm_segment_size(&attr, &size), 0);
	handback_measure(&d, c, &attr, size, " of huge pages", true);
}
END_TEST

/* Creates of channels of huge pages, again and again: populated a slice a
 * turn, and destroyed so, every page given back. */
START_TEST(test_huge_create)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	size_t size;
	char what[64];

	if (!huge_ready("creates of huge pages"))
		return;
	pinshm_client_t *c = start_conf(&d, LARGE_CONF);
	largest_attr_of(&attr, HUGE_BYTES, HUGE_LANE);
	ck_assert_int_eq(pinshm_segment_size(&attr, &size), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(huge_back(stall_rounds(&d, &attr, PINSHM_HUGEPAGES), true));
	snprintf(what, sizeof(what), "creates of %zu bytes of huge pages", size);
	stall_measure(&d, c, pid, what);
}
END_TEST

/* The largest channel of huge pages whose segment takes at most @p pages
 * huge pages: into @p attr, its size into @p size. */
static void huge_attr_pages(pinshm_channel_attr_t *attr, long pages, size_t *size)
{
	largest_attr_of(attr, (uint64_t)pages * HUGE_PAGE, HUGE_LANE);
	ck_assert_int_eq(pinshm_segment_size(attr, size), 0);
	*size = (*size + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
}

/*
 * A channel of huge pages whose first huge page (header and endpoints) a
 * holder punched out, with no free huge page left: the daemon's next look
 * at it would fault (SIGBUS) where it is not guarded.  It marks the
 * channel damaged instead, answers, and serves on.
 */
START_TEST(test_huge_punched)
{
	struct daemon d;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t e;
	size_t size;

	if (!huge_ready("a channel of huge pages punched out"))
		return;
	pinshm_client_t *c = start_conf(&d, LARGE_CONF);
	huge_attr_pages(&attr, 2, &size);
	int seg = huge_segment(&attr);
	ck_assert_int_ge(seg, 0);
	int sock = raw_connect(&d);
	ck_assert_int_ge(sock, 0);
	TU_RC(raw_adopt(sock, &attr, seg), 0);
	ck_assert_int_eq(fallocate(seg, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)HUGE_PAGE), 0);
	/* Every free huge page taken, and touched. */
	long left = tu_meminfo("HugePages_Free:");
	int hog = memfd_create("hog", MFD_CLOEXEC | MFD_HUGETLB);
	ck_assert_int_ge(hog, 0);
	void *held = MAP_FAILED;
	if (left > 0) {
		ck_assert_int_eq(ftruncate(hog, (off_t)((uint64_t)left * HUGE_PAGE)), 0);
		held = mmap(NULL, (size_t)left * HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, hog, 0);
		ck_assert_ptr_ne(held, MAP_FAILED);
	}
	ck_assert_int_eq(tu_meminfo("HugePages_Free:"), 0);

	int rc = pinshm_stat(c, "crafted", &e); /* the daemon reads its endpoints */
	ck_assert_msg(rc != -ECONNRESET && rc != -EPIPE, "the daemon died: %d", rc);
	pinshm_status_t st;
	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);

	if (held != MAP_FAILED)
		munmap(held, (size_t)left * HUGE_PAGE);
	close(hog);
	close(sock);
	close(seg);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
}
END_TEST

/* A create of huge pages right after a destroy: the destroyed channel's
 * pages come back a slice a turn, and a create that needs them (more than
 * half of the free ones: the two cannot both be there) waits for them
 * rather than failing.  Where they are truly not enough (another channel
 * holds the rest), the create fails with -ENOMEM and says why. */
START_TEST(test_huge_after_destroy)
{
	struct daemon d;
	pinshm_channel_attr_t big, small;
	size_t big_size, small_size;

	if (!huge_ready("creates of huge pages right after a destroy"))
		return;
	pinshm_client_t *c = start_conf(&d, LARGE_CONF);
	huge_attr_pages(&big, huge_free0 * 3 / 5, &big_size);
	huge_attr_pages(&small, huge_free0 / 3, &small_size);
	ck_assert_uint_gt(2 * big_size, (uint64_t)huge_free0 * HUGE_PAGE);
	for (unsigned i = 0; i < 4; i++) {
		pinshm_client_t *h = connect_ok(&d);
		CLIENT_RC(h, pinshm_create(h, "after", &big, 0600, PINSHM_HUGEPAGES), 0);
		CLIENT_RC(h, pinshm_unlink(h, "after"), 0);
		CLIENT_RC(h, pinshm_disconnect(h), 0); /* destroyed: its pages punched out a slice a turn */
	}
	ck_assert_int_eq(huge_back(0, true), 0);

	/* Truly too few: "held" keeps most of them. */
	CLIENT_RC(c, pinshm_create(c, "held", &big, 0600, PINSHM_HUGEPAGES), 0);
	pinshm_client_t *h = connect_ok(&d);
	CLIENT_RC(h, pinshm_create(h, "gone", &small, 0600, PINSHM_HUGEPAGES), 0);
	CLIENT_RC(h, pinshm_unlink(h, "gone"), 0);
	CLIENT_RC(h, pinshm_disconnect(h), 0);
	CLIENT_RC(c, pinshm_create(c, "more", &big, 0600, PINSHM_HUGEPAGES), -ENOMEM);
	ck_assert_msg(strstr(pinshm_client_error(c), "vm.nr_hugepages") != NULL, "create said: '%s'",
		      pinshm_client_error(c));
	ck_assert(!list_find(c, "more", NULL, NULL));
	CLIENT_RC(c, pinshm_create(c, "fits", &small, 0600, PINSHM_HUGEPAGES), 0); /* its charge went */
	CLIENT_RC(c, pinshm_unlink(c, "fits"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "held"), 0);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
	ck_assert_int_eq(huge_back(0, true), 0);
}
END_TEST

/*
 * In a child: create @p name as @p attr of huge pages, which waits for the
 * pages of destroyed channels and then cannot be made for another reason
 * (the daemon out of descriptors): it fails with -EMFILE, and its message
 * names that, not huge pages.  @return the exit status: 0; 1: another
 * failure; 2: made (the limit came too late).
 */
static int late_create(const struct daemon *d, const char *name, const pinshm_channel_attr_t *attr)
{
	pinshm_client_t *c = NULL;
	int rc = pinshm_connect(d->sock, &c);

	if (rc == 0)
		rc = pinshm_create(c, name, attr, 0600, PINSHM_HUGEPAGES);
	const char *msg = c ? pinshm_client_error(c) : "";
	fprintf(stderr, "late create: %s (%s)\n", strerror(-rc), msg);
	bool right = rc == -EMFILE && strstr(msg, strerror(EMFILE)) && !strstr(msg, "huge pages");
	pinshm_disconnect(c);
	return right ? 0 : rc == 0 ? 2 : 1;
}

/*
 * A create of huge pages that waits for a destroyed channel's pages (see
 * test_huge_after_destroy) and then fails for another reason than too few
 * of them says that reason: here the daemon's RLIMIT_NOFILE is lowered to
 * nothing (prlimit) while the create waits, so its late memfd_create()
 * fails with EMFILE.  A channel of small pages destroyed first, of 1 GiB
 * where the budget allows, keeps the wait long enough to lower the limit
 * in.  The daemon goes on after, the create's charge gone.
 */
START_TEST(test_huge_late_error)
{
	struct daemon d;
	pinshm_channel_attr_t big, slow;
	size_t big_size, slow_size;
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	size_t nu;
	struct rlimit lim, none;
	int status;

	if (!huge_ready("a create of huge pages that waits, then fails otherwise"))
		return;
	daemon_start_config(&d, &(struct daemon_opts){.config = true, .log = true}, LARGE_CONF);
	pinshm_client_t *c = connect_ok(&d);
	CLIENT_RC(c, pinshm_status(c, &st, &u, &nu), 0);
	free(u);
	huge_attr_pages(&big, huge_free0 * 3 / 5, &big_size);
	largest_attr(&slow, st.budget / 4 < 1024 * MiB ? st.budget / 4 : 1024 * MiB);
	ck_assert_int_eq(pinshm_segment_size(&slow, &slow_size), 0);
	pinshm_client_t *h = connect_ok(&d);
	CLIENT_RC(h, pinshm_create(h, "slow", &slow, 0600, 0), 0);
	CLIENT_RC(h, pinshm_create(h, "gone", &big, 0600, PINSHM_HUGEPAGES), 0);
	CLIENT_RC(h, pinshm_unlink(h, "slow"), 0);
	CLIENT_RC(h, pinshm_unlink(h, "gone"), 0);
	CLIENT_RC(h, pinshm_disconnect(h), 0); /* both destroyed, "slow" unmapped first */

	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(late_create(&d, "late", &big));
	/* It waits, charged, until the destroyed channels' pages are back. */
	uint64_t deadline = tu_now_ms() + GONE_MS;
	while (charged(c) < big_size) {
		ck_assert_msg(tu_now_ms() < deadline, "the create of huge pages not charged in %u ms", GONE_MS);
		tu_sleep_ms(1);
	}
	ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &lim), 0);
	none = (struct rlimit){.rlim_cur = 0, .rlim_max = lim.rlim_max};
	ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &none, NULL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &lim, NULL), 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
		/* The destroyed pages came back before the limit went down
		 * (this test lost its own race): nothing to judge. */
		fprintf(stderr, "note: the late create was made before the limit was lowered: not judged\n");
	} else {
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "the late create did not fail with EMFILE, named (status %#x)", status);
		ck_assert_msg(daemon_log_has(&d, strerror(EMFILE)), "the daemon's log does not name %s",
			      strerror(EMFILE));
		ck_assert_uint_eq(charged(c), 0);
	}
	CLIENT_RC(c, pinshm_create(c, "after", &big, 0600, PINSHM_HUGEPAGES), 0);
	CLIENT_RC(c, pinshm_unlink(c, "after"), 0);
	CLIENT_RC(c, pinshm_disconnect(c), 0);
	daemon_stop_ok(&d);
	ck_assert_int_eq(huge_back(0, true), 0);
}
END_TEST

/* ---- a lane hidden from a consumer -------------------------------------- */

/*
 * A writer of a channel marks another producer's endpoint free (it never
 * was, for all the segment says) and bumps endpoint_changes, after that
 * producer sent: a sequential consumer's quick look counts the lanes of
 * producers that ever attached, and leaves that lane out.  The record is
 * received all the same: by a receive that waits (after its spin), and by
 * non-blocking ones (quick polls or not) within 64 of them, so that an
 * event loop that pinshm_channel_arm() tells to receive does not spin.
 */
START_TEST(test_hidden_lane)
{
	pinshm_channel_attr_t a;
	char buf[64];
	size_t len, size;

	tu_attr(&a, PINSHM_QUEUE, 4096, 2, 1);
	int fd = tu_create(&a);
	pinshm_channel_t *p0 = tu_attach(fd, PINSHM_PRODUCER), *p1 = tu_attach(fd, PINSHM_PRODUCER);
	pinshm_channel_t *c = tu_attach(fd, PINSHM_CONSUMER);
	uint8_t *base = tu_map(fd, &size);
	struct seg_geometry g;
	ck_assert_int_eq(seg_geometry_read(base, size, &g), 0);
	struct seg_header *hdr = (struct seg_header *)base;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(efd, 0);
	ck_assert_int_eq(pinshm_channel_set_notify_fd(c, efd), 0);

	for (int way = 0; way < 3; way++) {
		ck_assert_int_eq(pinshm_send(p1, "hidden", 7, PINSHM_NONBLOCK), 0);
		for (unsigned l = 0; l < g.max_producers; l++) /* the hostile writer */
			atomic_store(&seg_endpoint(&g, base, l)->state, EP_FREE);
		atomic_fetch_add(&hdr->endpoint_changes, 1);
		int rc = pinshm_channel_arm(c);
		ck_assert_msg(rc == -EAGAIN, "arm: %d (%s): the record not seen", rc, pinshm_strerror(rc));
		if (way == 0) {
			rc = pinshm_recv(c, buf, sizeof(buf), &len, 200);
		} else {
			pinshm_channel_set_quick_polls(c, way == 2);
			for (unsigned i = 0; i < 64 && (rc = pinshm_recv(c, buf, sizeof(buf), &len, PINSHM_NONBLOCK)) ==
						       -EAGAIN; i++)
				;
		}
		ck_assert_msg(rc == 0, "way %d: the record of the hidden lane not received: %d (%s)", way, rc,
			      pinshm_strerror(rc));
		ck_assert_str_eq(buf, "hidden");
		for (unsigned l = 0; l < g.max_producers; l++) /* as they were, for the next way */
			atomic_store(&seg_endpoint(&g, base, l)->state, EP_ACTIVE);
		atomic_fetch_add(&hdr->endpoint_changes, 1);
	}
	munmap(base, size);
	close(efd);
	ck_assert_int_eq(pinshm_channel_close(c), 0);
	ck_assert_int_eq(pinshm_channel_close(p1), 0);
	ck_assert_int_eq(pinshm_channel_close(p0), 0);
	close(fd);
}
END_TEST

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("release");

	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_release_memfd);
	tcase_add_test(tc, test_release_shm);
	tcase_add_test(tc, test_release_pool);
	suite_add_tcase(s, tc);

	tc = tcase_create("defaults");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_derived_limits);
	tcase_add_test(tc, test_default_limits_daemon);
	suite_add_tcase(s, tc);

	tc = tcase_create("stall");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stall);
	tcase_add_test(tc, test_stall_given_up);
	tcase_add_test(tc, test_stall_unpinned);
	tcase_add_test(tc, test_stall_reload);
	suite_add_tcase(s, tc);

	tc = tcase_create("stall_idle");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_stall_idle);
	tcase_add_test(tc, test_relock_while_dying);
	suite_add_tcase(s, tc);

	tc = tcase_create("stall_peers");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stall_adopt);
	tcase_add_test(tc, test_stall_handback_large);
	tcase_add_test(tc, test_stall_restart_large);
	tcase_add_test(tc, test_stall_handback_unseen);
	tcase_add_test(tc, test_restart_given_up);
	tcase_add_test(tc, test_stall_reap);
	suite_add_tcase(s, tc);

	tc = tcase_create("peers");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_hidden_lane);
	suite_add_tcase(s, tc);

	tc = tcase_create("stall_huge");
	tcase_set_timeout(tc, 60);
	/* In the runner: vm.nr_hugepages put back even when a test fails. */
	tcase_add_unchecked_fixture(tc, huge_setup, huge_teardown);
	tcase_add_test(tc, test_huge_restart);
	tcase_add_test(tc, test_huge_handback);
	tcase_add_test(tc, test_huge_create);
	tcase_add_test(tc, test_huge_after_destroy);
	tcase_add_test(tc, test_huge_punched);
	tcase_add_test(tc, test_huge_late_error);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(hostile_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
