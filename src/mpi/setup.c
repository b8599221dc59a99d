/*
 * setup.c - MPI_Init and MPI_Finalize of the plugin: configuration, the
 * channels between the ranks of a node, statistics.
 *
 * At MPI_Init: the ranks of each node (MPI_Comm_split_type shared, cut into
 * PINSHM_MPI_NODES pretend nodes) get one inbound queue each from pinshmd
 * (a user-mode one is started where none answers, see pinshm_connect_flags):
 * the node's first rank creates them under a name made of a random token
 * it broadcasts, then every rank opens its own as the consumer and every
 * queue of the node, its own included, as a producer.  The ranks of a node
 * agree (allreduce) that all of them succeeded; otherwise every one of them
 * leaves everything to the MPI library, and the first that failed says why
 * in one warning.
 *
 * Progress: the plugin registers its engine with Open MPI's progress loop
 * (opal_progress_register, found with dlsym), so that a rank blocked in any
 * MPI call - a barrier, a wait on a request of the library - still moves the
 * plugin's messages; where that is missing, the plugin's own calls drive it.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plugin.h"

struct pm_state pm;

typedef int (*opal_callback_t)(void);
static int (*opal_register)(opal_callback_t);
static int (*opal_unregister)(opal_callback_t);
static void (*opal_progress_fn)(void);
static bool registered;

static const char *const family_names[FAM_COUNT] = {
	"blocking", "nonblocking", "persistent", "probe", "synchronous", "buffered",
};

void pm_mpi_progress(void)
{
	if (opal_progress_fn) {
		opal_progress_fn();
		return;
	}
	int flag;
	PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
}

static int progress_callback(void)
{
	return pm_progress_hook();
}

/* ---- configuration ---------------------------------------------------- */

/* Variable @p name as a size from @p min to @p max, with an optional K, M
 * or G suffix, into *@p out.  @return 1 (set), 0 (unset or empty) or -1
 * (not such a size: world rank 0 warns that it uses @p instead). */
static int env_parse(const char *name, uint64_t min, uint64_t max, uint64_t *out, const char *instead)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 0);
	uint64_t unit = 1;
	if (*end == 'k' || *end == 'K')
		unit = 1024, end++;
	else if (*end == 'm' || *end == 'M')
		unit = 1024 * 1024, end++;
	else if (*end == 'g' || *end == 'G')
		unit = 1024 * 1024 * 1024, end++;
	if (errno || *end || v[0] == '-' || x > max / unit || x * unit < min) {
		if (pm.world_rank == 0)
			fprintf(stderr,
				"pinshm-mpi: warning: %s=%s is not a size from %" PRIu64 " to %" PRIu64
				": using %s\n",
				name, v, min, max, instead);
		return -1;
	}
	*out = x * unit;
	return 1;
}

static uint64_t env_size(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
	char instead[32];
	uint64_t x = def;
	snprintf(instead, sizeof(instead), "%" PRIu64, def);
	return env_parse(name, min, max, &x, instead) > 0 ? x : def;
}

uint64_t pm_env_size(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
	return env_size(name, def, min, max);
}

/* The machine's cores, not this process's affinity (mpirun binds each rank
 * to one core, which says nothing about how many ranks share the cores). */
static unsigned cpus_online(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

#define RING_MIN (16 * 1024)
#define RING_DEFAULT (2 * 1024 * 1024)
#define RING_LIMIT (1ull << 30)
#define NODE_RINGS_DEFAULT (1ull << 30)

static uint64_t floor_pow2(uint64_t x)
{
	uint64_t r = RING_MIN;
	while (r * 2 <= x)
		r *= 2;
	return r;
}

/* The eager and chunk sizes, within what one record of the ring may carry
 * (a set value that does not fit is lowered, with a warning). */
static void bound_sizes(void)
{
	struct pm_config *c = &pm.cfg;
	uint64_t max_payload = c->ring / 2 - 64 - 32;

	c->eager = c->eager_asked < max_payload ? c->eager_asked : max_payload;
	c->chunk = c->chunk_asked < max_payload ? c->chunk_asked : max_payload;
	if (pm.world_rank == 0 && ((c->eager_set && c->eager < c->eager_asked) ||
				   (c->chunk_set && c->chunk < c->chunk_asked)))
		fprintf(stderr,
			"pinshm-mpi: warning: a record of the %" PRIu64 "-byte ring holds %" PRIu64
			" bytes: eager size %zu, chunk %zu\n",
			c->ring, max_payload, c->eager, c->chunk);
}

/*
 * The ring of each sender in each queue, once the node's size is known: a
 * node of N ranks has N queues of N rings.  PINSHM_MPI_RING, where set, is
 * taken as it is (rounded down to a power of two); else 2 MiB, halved
 * until the N * N rings fit in PINSHM_MPI_NODE_RINGS (1 GiB: 22 ranks keep
 * 2 MiB, 32 get 1 MiB, 64 get 256 KiB, 256 get 16 KiB), and never below
 * 16 KiB.  The node's first rank creates the queues with its own figure,
 * which the others then take (open_channels()).
 *
 * The default is at least as long as a core's L2 cache: long messages go
 * fast only through such rings (a shorter one is likely still in the
 * receiver's cache when the sender writes it again, and taking each line
 * back costs a round trip between the cores).
 */
static void size_rings(void)
{
	struct pm_config *c = &pm.cfg;
	uint64_t pairs = (uint64_t)pm.nlocal * (uint64_t)pm.nlocal;

	if (c->ring_fixed) {
		c->ring = floor_pow2(c->ring);
	} else {
		c->ring = RING_DEFAULT;
		while (c->ring > RING_MIN && c->ring > c->node_rings / pairs)
			c->ring /= 2;
	}
	bound_sizes();
}

/* Whether the CPU has a write-intent prefetch: x86's PREFETCHW is not on
 * every x86 CPU (CPUID 0x80000001, ECX bit 8); elsewhere the compiler's
 * prefetch for writing is the architecture's own. */
static bool cpu_claims_lines(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;
	return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW);
#else
	return true;
#endif
}

static void read_config(void)
{
	struct pm_config *c = &pm.cfg;
	c->stats = getenv("PINSHM_MPI_STATS") && strcmp(getenv("PINSHM_MPI_STATS"), "0") != 0;
	c->nodes = (unsigned)env_size("PINSHM_MPI_NODES", 1, 1, 1 << 20);
	c->ring_fixed = env_parse("PINSHM_MPI_RING", RING_MIN, RING_LIMIT, &c->ring, "the ring fitted to the node") > 0;
	/* Eager up to 32 KiB, DATA records of 32 KiB: a message of up to 32
	 * KiB saves the RTS/CTS round trip; 64 KiB, eagerly or in records, was
	 * slower on some machines.  Both sizes bounded by the ring, once it is
	 * known (bound_sizes()). */
	c->eager_asked = 32 * 1024;
	c->chunk_asked = 32 * 1024;
	c->eager_set = env_parse("PINSHM_MPI_EAGER", 0, RING_LIMIT / 2, &c->eager_asked, "32768") > 0;
	c->chunk_set = env_parse("PINSHM_MPI_CHUNK", 1024, RING_LIMIT / 2, &c->chunk_asked, "32768") > 0;
	c->node_rings = env_size("PINSHM_MPI_NODE_RINGS", NODE_RINGS_DEFAULT, RING_MIN, UINT64_MAX);
	uint64_t cma = 0; /* unset: crossing messages, and all where ranks outnumber cores (setup()) */
	c->cma_set = env_parse("PINSHM_MPI_CMA", 0, UINT64_MAX, &cma, "the default") > 0;
	c->cma = cma;
	c->spin_ns = env_size("PINSHM_MPI_SPIN_NS", 20000, 0, 1000000000);
	c->yield_ns = env_size("PINSHM_MPI_YIELD_NS", 500000, 0, 1000000000);
	/* A test hook: smaller pieces take the piece logic of pack.c on small
	 * messages.  64 bytes hold any predefined type. */
	c->piece = env_size("PINSHM_MPI_PIECE", INT_MAX, 64, INT_MAX);
	c->claim_lines = cpu_claims_lines();
	pm_coll_config();
}

/* ---- channels ---------------------------------------------------------- */

/* The owned name "@UID.mpi.TOKEN.N" (UID: this rank's): only this user may
 * create it, wherever pinshmd.conf(5) turns shared names off, and
 * pinshm_open() of it opens only this user's channel. */
static void channel_name(char *buf, size_t size, uint64_t token, int index)
{
	char rest[PINSHM_NAME_MAX + 1];

	snprintf(rest, sizeof(rest), "mpi.%016" PRIx64 ".%d", token, index);
	if (pinshm_name_own(buf, size, rest) != 0)
		buf[0] = '\0'; /* cannot be: 44 characters at most (then the create fails, -EINVAL) */
}

uint64_t pm_token(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
	FILE *f = fopen("/dev/urandom", "re");
	if (f) {
		uint64_t r = 0;
		if (fread(&r, sizeof(r), 1, f) == 1)
			x ^= r;
		fclose(f);
	}
	return x;
}

/* Create (first rank of the node) and open the channels.
 * @return 0, or a negative errno with @p why filled. */
static int open_channels(char *why, size_t whylen)
{
	uint64_t token = 0;
	int rc = 0;
	char name[PINSHM_NAME_MAX + 1];
	int created = 0;

	rc = pinshm_connect_flags(NULL, PINSHM_CONNECT_AUTOSTART, &pm.client);
	if (rc < 0) {
		snprintf(why, whylen, "cannot reach pinshmd: %s (%s)", pinshm_strerror(rc),
			 pinshm_client_error(NULL));
		pm.client = NULL;
	}
	if (pm.local_rank == 0 && rc == 0) {
		token = pm_token();
		pinshm_channel_attr_t attr;
		pinshm_channel_attr_init(&attr);
		attr.kind = PINSHM_QUEUE;
		attr.capacity = pm.cfg.ring;
		attr.max_producers = (uint32_t)pm.nlocal;
		attr.max_consumers = 1;
		for (; created < pm.nlocal; created++) {
			channel_name(name, sizeof(name), token, created);
			rc = pinshm_create(pm.client, name, &attr, 0600, 0);
			if (rc < 0) {
				snprintf(why, whylen, "pinshmd refused channel %s: %s (%s)", name, pinshm_strerror(rc),
					 pinshm_client_error(pm.client));
				break;
			}
		}
	}
	/* Everybody learns the token and the ring, or that the first rank
	 * failed: the first rank's entry of an allgather, not a broadcast.
	 * One MPI_Bcast over a communicator of Open MPI 4.1 (ob1, vader),
	 * even one freed since, left the job's later MPI_Allreduce over
	 * MPI_COMM_WORLD slower at 2 ranks; an allgather did not. */
	int64_t mine[3] = {rc, (int64_t)token, (int64_t)pm.cfg.ring};
	int64_t *all = malloc((size_t)pm.nlocal * sizeof(mine));
	if (!all) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return -ENOMEM;
	}
	PMPI_Allgather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, pm.node_comm);
	int64_t msg[3] = {all[0], all[1], all[2]};
	free(all);
	if (pm.local_rank != 0) {
		if (msg[0] < 0 && rc == 0) {
			rc = (int)msg[0];
			snprintf(why, whylen, "the node's first rank could not create the channels");
		}
		token = (uint64_t)msg[1];
		if ((uint64_t)msg[2] != pm.cfg.ring) { /* its environment differs: its queues rule */
			pm.cfg.ring = (uint64_t)msg[2];
			bound_sizes();
		}
	}
	pm.node_token = token;
	if (rc == 0) {
		channel_name(name, sizeof(name), token, pm.local_rank);
		rc = pinshm_open(pm.client, name, PINSHM_CONSUMER, &pm.in);
		if (rc < 0)
			snprintf(why, whylen, "cannot open %s: %s (%s)", name, pinshm_strerror(rc),
				 pinshm_client_error(pm.client));
		else
			pinshm_channel_set_quick_polls(pm.in, 1); /* progress polls often (engine.c) */
		pinshm_list_entry_t e;
		if (rc == 0 && pm.cfg.stats && pinshm_stat(pm.client, name, &e) == 0)
			pm.in_locked = e.state & PINSHM_LIST_PINNED ? QUEUE_PINNED : QUEUE_UNPINNED;
	}
	for (int i = 0; rc == 0 && i < pm.nlocal; i++) {
		channel_name(name, sizeof(name), token, i);
		rc = pinshm_open(pm.client, name, PINSHM_PRODUCER, &pm.peers[i].out);
		if (rc < 0)
			snprintf(why, whylen, "cannot open %s: %s (%s)", name, pinshm_strerror(rc),
				 pinshm_client_error(pm.client));
	}
	if (rc == 0)
		pinshm_channel_set_spin(pm.in, 0); /* pm_idle spins before it sleeps */
	/* The names are not needed once everybody has opened them: the queues
	 * live while a rank's connection holds them. */
	PMPI_Barrier(pm.node_comm);
	if (pm.local_rank == 0 && pm.client)
		for (int i = 0; i < created; i++) {
			channel_name(name, sizeof(name), token, i);
			pinshm_unlink(pm.client, name);
		}
	return rc;
}

static void close_channels(void)
{
	if (pm.peers)
		for (int i = 0; i < pm.nlocal; i++)
			if (pm.peers[i].out) {
				pinshm_channel_close(pm.peers[i].out);
				pm.peers[i].out = NULL;
			}
	if (pm.in) {
		pinshm_channel_close(pm.in);
		pm.in = NULL;
	}
	pm.in_locked = QUEUE_UNKNOWN;
	if (pm.client) {
		pinshm_disconnect(pm.client);
		pm.client = NULL;
	}
}

static void free_state(void)
{
	free(pm.peers);
	free(pm.busy);
	free(pm.local_world);
	free(pm.local_pid);
	free(pm.world_local);
	pm.peers = NULL;
	pm.busy = NULL;
	pm.local_world = pm.world_local = pm.local_pid = NULL;
	pm.sent = MPI_REQUEST_NULL;
	if (pm.world_group != MPI_GROUP_NULL)
		PMPI_Group_free(&pm.world_group);
	if (pm.node_comm != MPI_COMM_NULL)
		PMPI_Comm_free(&pm.node_comm);
	if (pm.quiet_comm != MPI_COMM_NULL)
		PMPI_Comm_free(&pm.quiet_comm);
}

/* ---- MPI_Init ------------------------------------------------------------ */

/* Open MPI answers every send to MPI_PROC_NULL with one shared request
 * that is complete (a wait only nulls the caller's handle).  Where two
 * such sends give the same handle, an eager send written whole returns it
 * without asking, and Waitall and Testall complete it themselves. */
static void find_sent_request(void)
{
	MPI_Request a, b;
	pm.sent = MPI_REQUEST_NULL;
	if (PMPI_Isend(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &a) != MPI_SUCCESS)
		return;
	if (PMPI_Isend(NULL, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, &b) != MPI_SUCCESS) {
		PMPI_Wait(&a, MPI_STATUS_IGNORE);
		return;
	}
	bool same = a == b;
	MPI_Request shared = a;
	PMPI_Wait(&a, &pm.sent_status);
	PMPI_Wait(&b, MPI_STATUS_IGNORE);
	if (same && shared != MPI_REQUEST_NULL)
		pm.sent = shared;
}

/* The (pretend) node: collective over MPI_COMM_WORLD, so every rank takes
 * part even where it will fail. */
static void find_node(void)
{
	MPI_Comm shared;
	PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
	int srank, ssize;
	PMPI_Comm_rank(shared, &srank);
	PMPI_Comm_size(shared, &ssize);
	unsigned k = pm.cfg.nodes < (unsigned)ssize ? pm.cfg.nodes : (unsigned)ssize;
	int color = (int)((uint64_t)srank * k / (uint64_t)ssize);
	PMPI_Comm_split(shared, color, srank, &pm.node_comm);
	PMPI_Comm_free(&shared);
	PMPI_Comm_rank(pm.node_comm, &pm.local_rank);
	PMPI_Comm_size(pm.node_comm, &pm.nlocal);
	size_rings();
	PMPI_Comm_group(MPI_COMM_WORLD, &pm.world_group);
}

/* Each rank of the node: its world rank and pid; each world rank's place
 * on the node (-1: another node). */
static void map_ranks(void)
{
	pm.local_world = calloc((size_t)pm.nlocal, sizeof(int));
	pm.local_pid = calloc((size_t)pm.nlocal, sizeof(int));
	pm.world_local = malloc((size_t)pm.world_size * sizeof(int));
	pm.peers = calloc((size_t)pm.nlocal, sizeof(*pm.peers));
	pm.busy_mask_words = (uint32_t)(pm.nlocal + 63) / 64;
	pm.busy = calloc(pm.busy_mask_words, sizeof(uint64_t));
	if (!pm.local_world || !pm.local_pid || !pm.world_local || !pm.peers || !pm.busy) {
		fprintf(stderr, "pinshm-mpi: out of memory\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	}
	PMPI_Allgather(&pm.world_rank, 1, MPI_INT, pm.local_world, 1, MPI_INT, pm.node_comm);
	int pid = (int)getpid();
	PMPI_Allgather(&pid, 1, MPI_INT, pm.local_pid, 1, MPI_INT, pm.node_comm);
	for (int w = 0; w < pm.world_size; w++)
		pm.world_local[w] = -1;
	for (int i = 0; i < pm.nlocal; i++)
		pm.world_local[pm.local_world[i]] = i;
}

/* Every rank of the node opened its channels: carry. */
static void start_carrying(void)
{
	int *ub = NULL, found = 0;
	PMPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
	pm.tag_ub = found && ub ? *ub : 32767;
	PMPI_Comm_dup(MPI_COMM_SELF, &pm.quiet_comm);
	PMPI_Comm_set_errhandler(pm.quiet_comm, MPI_ERRORS_RETURN);
	find_sent_request();
	pm.active = true;
	if (pm_comm_setup() != MPI_SUCCESS) {
		fprintf(stderr, "pinshm-mpi: rank %d: out of memory\n", pm.world_rank);
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
	}
	bool oversubscribed = pm.nlocal > (int)cpus_online();
	if (oversubscribed && !getenv("PINSHM_MPI_SPIN_NS"))
		pm.cfg.spin_ns = 0; /* a waiting rank yields at once */
	/* More ranks than cores: a long message's two ranks seldom run at
	 * once, and a stream through the ring waits for each in turn, a
	 * context switch at each; copied once, by its receiver alone, it does
	 * not wait so, and it is copied half as much.  So every message past
	 * the eager size is copied once. */
	if (oversubscribed && !pm.cfg.cma_set)
		pm.cfg.cma = pm.cfg.eager + 1;
	opal_register = (int (*)(opal_callback_t))dlsym(RTLD_DEFAULT, "opal_progress_register");
	opal_unregister = (int (*)(opal_callback_t))dlsym(RTLD_DEFAULT, "opal_progress_unregister");
	opal_progress_fn = (void (*)(void))dlsym(RTLD_DEFAULT, "opal_progress");
	if (opal_register && opal_unregister && opal_register(progress_callback) == 0)
		registered = true;
}

static void setup(int provided)
{
	char why[512] = "";
	int rc = 0;
	pm.sent = MPI_REQUEST_NULL;
	pm.node_comm = MPI_COMM_NULL;
	pm.quiet_comm = MPI_COMM_NULL;
	pm.world_group = MPI_GROUP_NULL;
	PMPI_Comm_rank(MPI_COMM_WORLD, &pm.world_rank);
	PMPI_Comm_size(MPI_COMM_WORLD, &pm.world_size);
	read_config();
	pm.loaded = true;
	pm.multiple = provided == MPI_THREAD_MULTIPLE;

	/* Where every rank is turned off, the plugin makes no other MPI call
	 * here: no communicator (Open MPI keeps the progress callback of its
	 * nonblocking collectives, which agree on a new communicator's id,
	 * registered to the end), no channel, no progress callback.  Where
	 * some rank is on, every rank takes part in the collective calls here
	 * and in the creation of communicators, turned off or not, so that
	 * ranks that differ never wait for each other. */
	const char *on = getenv("PINSHM_MPI");
	bool off = on && strcmp(on, "0") == 0;
	int some_on = !off;
	PMPI_Allreduce(MPI_IN_PLACE, &some_on, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (!some_on)
		return;

	find_node();

	if (off) {
		rc = -ECANCELED; /* turned off: silently */
	} else if (pm.multiple) {
		rc = -ENOTSUP;
		snprintf(why, sizeof(why), "MPI_THREAD_MULTIPLE is not carried");
	} else if (pm_calls_taken(why, sizeof(why))) {
		rc = -ELIBBAD; /* its calls and the plugin's would not meet */
	} else if (pm.nlocal > (int)PINSHM_MAX_PRODUCERS) {
		rc = -E2BIG; /* each rank writes into every queue on a lane of its own */
		snprintf(why, sizeof(why), "%d ranks on a node, more than the %u writers a queue may have", pm.nlocal,
			 PINSHM_MAX_PRODUCERS);
	}

	map_ranks();

	/* Everyone of the node opens, or nobody carries anything.  The
	 * node's first rank that failed says why. */
	int first_failed = rc < 0 ? pm.local_rank : pm.nlocal;
	PMPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, pm.node_comm);
	if (first_failed == pm.nlocal) {
		rc = open_channels(why, sizeof(why));
		first_failed = rc < 0 ? pm.local_rank : pm.nlocal;
		PMPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, pm.node_comm);
	}
	if (first_failed < pm.nlocal) {
		/* One line: from rank 0 for what all ranks share, else from
		 * the node's first rank that failed. */
		if (why[0] && (pm.multiple ? pm.world_rank == 0 : pm.local_rank == first_failed))
			fprintf(stderr,
				"pinshm-mpi: warning: rank %d: %s; the ranks of its node use the MPI library for "
				"everything\n",
				pm.world_rank, why);
		close_channels();
		free_state();
	} else {
		start_carrying();
	}
	/* Whether every node carries: a communicator that spans nodes runs
	 * its collectives hierarchically only then (coll_hier.c). */
	int all = pm.active;
	PMPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	pm.all_active = all != 0;
	if (pm.all_active) /* the same at every rank */
		pm_coll_world_layout();
}

int MPI_Init(int *argc, char ***argv)
{
	int rc = PMPI_Init(argc, argv);
	if (rc == MPI_SUCCESS)
		setup(MPI_THREAD_SINGLE);
	return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
	int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		setup(*provided);
	return rc;
}

/* ---- MPI_Finalize ---------------------------------------------------------- */

static void print_stats(void)
{
	if (pm.multiple) {
		fprintf(stderr, "pinshm-mpi stats: rank=%d not kept (MPI_THREAD_MULTIPLE: every call went to "
				"the MPI library)\n", pm.world_rank);
		return;
	}
	for (int f = 0; f < FAM_COUNT; f++) {
		const struct pm_counts *c = &pm.counts[f];
		fprintf(stderr,
			"pinshm-mpi stats: rank=%d family=%s pinshm_msgs=%" PRIu64 " pinshm_bytes=%" PRIu64
			" mpi_msgs=%" PRIu64 " mpi_bytes=%" PRIu64 "\n",
			pm.world_rank, family_names[f], c->pinshm_msgs, c->pinshm_bytes, c->mpi_msgs, c->mpi_bytes);
	}
	if (pm.in_locked != QUEUE_UNKNOWN)
		fprintf(stderr,
			"pinshm-mpi stats: rank=%d queue=%s ring=%" PRIu64 " copy_once_from=%zu copied_once=%" PRIu64
			" copy_refused=%d\n",
			pm.world_rank, pm.in_locked == QUEUE_PINNED ? "pinned" : "unpinned", pm.cfg.ring, pm.cfg.cma,
			pm.copied_once, pm.copy_refused);
	pm_coll_print_stats();
}

int MPI_Finalize(void)
{
	if (pm.active) {
		/* Deliver what is still on its way (sends whose requests were
		 * freed included) while waiting at a barrier of the node that
		 * keeps serving the others: a rank may still need this one's
		 * records, CTS or ACK.  Once every rank is here, what is left
		 * can only be a send that nobody will receive: after 2 s without
		 * any progress, leave. */
		MPI_Request barrier;
		PMPI_Ibarrier(pm.node_comm, &barrier);
		int done = 0;
		unsigned idle = 0;
		bool quiet = false;
		struct timespec since, now;
		while (!done || pm.sends_inflight > 0 || pm.streaming > 0) {
			if (!done)
				PMPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
			if (pm_progress()) {
				idle = 0;
				quiet = false;
				continue;
			}
			if (done) {
				clock_gettime(CLOCK_MONOTONIC, &now);
				if (!quiet) {
					quiet = true;
					since = now;
				} else if (now.tv_sec - since.tv_sec >= 2) {
					break;
				}
			}
			pm_idle(&idle, false);
		}
		if (registered) {
			opal_unregister(progress_callback);
			registered = false;
		}
		pm.active = false;
	}
	if (pm.cfg.stats)
		print_stats();
	pm_mprobe_teardown();
	pm_persist_teardown();
	pm_coll_nb_teardown();
	pm_comm_teardown();
	pm_coll_kept_free();
	pm_unexp_teardown();
	close_channels();
	free_state();
	pm_ops_teardown();
	pm_fortran_teardown();
	return PMPI_Finalize();
}
