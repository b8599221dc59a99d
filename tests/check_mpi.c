/*
 * check_mpi.c - the MPI test programs of tests/mpi under mpirun, without and
 * with the PMPI plugin (libpinshm_mpi.so, issue 4).
 *
 * Each test starts a real pinshmd (tests/daemonutil.c) and runs one program
 * (C, Fortran through the plugin's Fortran layer, or both in one program)
 * with `timeout $MPIRUN --mca pml ob1 --mca btl self,vader -np N`
 * (--oversubscribe above 2 ranks), or an MPMD pair of programs (a C one and
 * a Fortran one) as `-np N/2 PROG : -np N/2 PROG2`, with every -x option
 * repeated in each app context (in Open MPI 4.1 an -x reaches only the
 * context it is in, and the plugin must be in every rank), in one
 * configuration:
 *   plain:   no plugin, 2 and 4 ranks (the programs are correct MPI);
 *   plugin:  LD_PRELOAD=$PINSHM_MPI_LIB at 2 and 4 ranks, and at 4 ranks
 *            with PINSHM_MPI_NODES=2 (two pretend nodes), and at 2 ranks
 *            with PINSHM_MPI=0 (turned off: nothing through pinshm) and
 *            with PINSHM_SOCKET where no daemon can be (the plugin falls
 *            back: one "pinshm-mpi: warning" line, everything to MPI);
 *   wrapped: at 4 ranks, a tool's library that defines MPI_Send
 *            (tests/mpi/wrap_send.c) preloaded before the plugin: the
 *            plugin carries nothing, with one warning naming the library;
 * always with PINSHM_SOCKET (the daemon's) and PINSHM_MPI_STATS=1;
 *   user:    as MPI users run it (root only: the test makes the user
 *            pinshm-mpi-user): mpirun as that user, in a clean environment,
 *            with no PINSHM_SOCKET and no daemon running (a system daemon
 *            of the machine hidden in a mount namespace of the test's own,
 *            tu_hide_system_daemon()), so that the plugin
 *            starts a user-mode one itself (PINSHMD), with RLIMIT_MEMLOCK at
 *            64 KiB in one run and as it is in another; the plugin, pinshmd
 *            and the program run from copies in a folder of mode 0755 (the
 *            build's may be closed to others).  On top of a plugin run's
 *            checks, the daemon started runs the copy as that user, with
 *            that RLIMIT_MEMLOCK, is the one the user's clients reach, and
 *            stops on SIGTERM; nothing of the user is left running.  Once
 *            more at 2 ranks with a system-mode daemon of root's instead
 *            (PINSHM_SOCKET), whose pinshmd.conf turns shared names off:
 *            the plugin's channel names are the user's own.
 * A run
 * passes when mpirun exits 0 in time, no "pinshm-mpi: warning" was printed,
 * and the stats lines say what the program's call families did: with the
 * plugin, every rank reports every family, each family that the program
 * uses carried messages through pinshm, and on one node none went to the MPI
 * library, except for the families that the program uses on an
 * intercommunicator only (those must have gone to it); on two pretend nodes
 * some went to the MPI library.  Without the plugin, no stats line appears.
 *
 * Environment: MPIRUN (empty: the test is skipped, exit 77), PINSHM_MPI_LIB
 * (missing: only the plain runs are made, then exit 77 if they pass),
 * PINSHMD, PINSHM_MPI_TESTS (the folder of the programs, else the build's),
 * PINSHM_MPI_ONLY (a program's name: only its runs are made, the others
 * pass at once; for iterating on one), PINSHM_MPI_CHECK (empty: the runs
 * above; "quick": each program and each case once, in its first
 * configuration with the plugin, for a build that only has to show it
 * works, as distcheck's; "full": the runs without the plugin in an ASan
 * build too).
 * In an ASan build the plugin is preloaded after the libasan that this
 * program runs with, and leak checking is off in the ranks (Open MPI's own
 * allocations at exit are not ours to fix); the runs without the plugin
 * are left to the plain build: they run only Open MPI and the program,
 * which the plugin's runs run too.
 * Each run's time goes to the log ("mpirun took").
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <link.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "protocol.h"
#include "testutil.h"

#ifndef MPI_TESTS_DIR
#define MPI_TESTS_DIR "tests/mpi"
#endif

#define RUN_LIMIT_S 60 /* for one mpirun (each takes seconds), then SIGTERM, SIGKILL 10 s later */

/* RUN_LIMIT_S times check's CK_TIMEOUT_MULTIPLIER, which slower builds
 * (the sanitizers' stage) set for the test cases' own limits too. */
static int run_limit_s(void)
{
	const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
	int k = m ? atoi(m) : 1;
	return RUN_LIMIT_S * (k > 1 ? k : 1);
}
#define OUT_MAX (1 << 20) /* of a run's output kept for checking */

enum family { F_BLOCKING, F_NONBLOCKING, F_PERSISTENT, F_PROBE, F_SYNCHRONOUS, F_BUFFERED, NFAMILY };

static const char *const family_name[NFAMILY] = {"blocking", "nonblocking", "persistent",
						 "probe",    "synchronous", "buffered"};

/* The collective calls the plugin counts ("pinshm-mpi coll stats:" lines). */
enum { NCOLL = 21 };
static const char *const coll_name[NCOLL] = {
	"barrier",  "bcast",	"reduce",    "allreduce",  "gather",     "scatter",
	"allgather", "alltoall", "gatherv",   "scatterv",   "allgatherv", "alltoallv",
	"reduce_scatter_block", "reduce_scatter", "scan", "exscan", "ibarrier", "ibcast",
	"ireduce",  "iallreduce", "iallgather"};
#define COLL_BASIC 0xffu    /* Barrier ... Alltoall */
#define COLL_V 0xf00u       /* Gatherv, Scatterv, Allgatherv, Alltoallv */
#define COLL_SCAN 0xf000u   /* Reduce_scatter(_block), Scan, Exscan */
#define COLL_NB 0x1f0000u   /* Ibarrier ... Iallgather */
#define COLL_HIER 0xf77fu   /* all but the all-to-alls: carried across pretend nodes */

#define B (1u << F_BLOCKING)
#define NB (1u << F_NONBLOCKING)
#define P (1u << F_PERSISTENT)
#define PR (1u << F_PROBE)
#define SY (1u << F_SYNCHRONOUS)
#define BU (1u << F_BUFFERED)

struct program {
	const char *name;
	unsigned uses;   /* families that must carry messages through pinshm */
	unsigned passes; /* families used only where the plugin does not carry (intercommunicators) */
	const char *mpmd; /* the second app context's program (half the ranks each), or NULL */
	const char *env;  /* NAME=VALUE for its ranks in every run, or NULL */
};

static const struct program programs[] = {
	{"p2p_basic", B, 0, NULL, NULL},
	{"p2p_modes", B | NB | SY | BU, 0, NULL, NULL},
	{"p2p_persistent", B | P | SY | BU, 0, NULL, NULL},
	{"p2p_probe", B | PR, 0, NULL, NULL},
	{"p2p_complete", B | NB, 0, NULL, NULL},
	{"p2p_datatypes", B | NB, 0, NULL, NULL},
	{"p2p_comms", B | NB | P, SY | PR, NULL, NULL},
	{"p2p_order", B | NB | SY, 0, NULL, NULL},
	{"p2p_large", B | NB, 0, NULL, NULL},
	/* Calls through pointers that are PLT entries (built -fno-pie). */
	{"p2p_address", B | NB, 0, NULL, NULL},
	/* Long messages one way (streamed), then crossing (copied once). */
	{"p2p_crossing", B | NB, 0, NULL, NULL},
	/* MPI_Dist_graph_create(_adjacent) communicators, made and freed
	 * round after round; a negative count of requests (MPI_ERR_ARG). */
	{"p2p_distgraph", B | NB, 0, NULL, NULL},
	{"p2p_negcount", B | NB | P, 0, NULL, NULL},
	/* Derived types packed and unpacked in 64-byte pieces (a test hook),
	 * items larger than a piece included; a send that fails to pack
	 * fails its receive too. */
	{"p2p_pieces", B | NB, 0, NULL, "PINSHM_MPI_PIECE=64"},
	/* Collectives (Barrier, Bcast, Reduce, Allreduce) with point-to-point
	 * messages in flight; once more with collectives turned off. */
	{"coll_basic", NB, 0, NULL, NULL},
	{"coll_basic", NB, 0, NULL, "PINSHM_MPI_COLL=0"},
	/* Allgather and Alltoall read straight from the other ranks' memory. */
	{"coll_basic", NB, 0, NULL, "PINSHM_MPI_COLL_CMA=1"},
	/* The v variants; reduce-scatter and the scans (more ranks: test_coll_ranks). */
	{"coll_v", B, 0, NULL, NULL},
	{"coll_scan", B, 0, NULL, NULL},
	/* The nonblocking collectives, overlapping each other, blocking ones
	 * and point-to-point traffic (more runs: test_coll_nb). */
	{"coll_nb", NB, 0, NULL, "PINSHM_MPI_COLL_AREA=64K"}, /* halves of 8 to 16 KiB: calls of many steps */
	/* A seeded random mix of collectives, blocking and not, and
	 * point-to-point messages pending across them. */
	{"coll_random", NB, 0, NULL, "PINSHM_MPI_COLL_AREA=256K"}, /* halves of 16 to 64 KiB */
#ifdef HAVE_MPIFORT_TEST
	/* Fortran (mpif.h, `use mpi`, `use mpi_f08`), and C and Fortran
	 * exchanging the same messages: carried like C. */
	{"f_sendrecv", B | NB, 0, NULL, NULL},
	/* Fortran's collectives: carried like C's. */
	{"f_coll", B, 0, NULL, NULL},
	{"f_collv", B, 0, NULL, NULL},
	{"f_p2p", B | NB | P | PR | SY | BU, 0, NULL, NULL},
	{"f_p2p08", B | NB | P | PR | SY | BU, 0, NULL, NULL},
	{"f_comms", B | NB, 0, NULL, NULL},
	{"mixed_cf", B | NB | P, 0, NULL, NULL},
	/* MPI_COMM_IDUP from Fortran (use mpi, mpi_f08), alone and in an
	 * MPMD job whose other half idups from C: carried alike on both sides. */
	{"f_idup", B | NB, 0, NULL, NULL},
	{"f_idup08", B | NB, 0, NULL, NULL},
	{"idup_c", B | NB, 0, "f_idup", NULL},
	/* A negative count of requests from Fortran (MPI_ERR_ARG). */
	{"f_negcount", B | NB | P, 0, NULL, NULL},
	/* MPI_COMM_IDUP of an intercommunicator (left to the library), then
	 * used across, merged, and a later dup of WORLD carried. */
	{"f_idup_inter", B, NB | SY, NULL, NULL},
#endif
};
#define NPROGRAMS ((int)(sizeof(programs) / sizeof(programs[0])))

/* p2p_random (a seeded random mix of every call and family) with each of
 * these seeds, in every configuration; another seed: run it with that seed
 * as its argument. */
static const char *const random_seeds[] = {"1", "2", "3"};
#define NSEEDS ((int)(sizeof(random_seeds) / sizeof(random_seeds[0])))
static const char *program_arg; /* the program's one argument, or NULL */

struct config {
	const char *name;
	int np;
	bool plugin;
	int nodes; /* PINSHM_MPI_NODES, 0: unset */
	bool off;      /* PINSHM_MPI=0: preloaded, but turned off */
	bool fallback; /* PINSHM_SOCKET where no daemon can be: one warning, all through MPI */
	bool wrapped;  /* a tool's MPI_Send preloaded before the plugin: the same */
	bool recovery; /* mpirun --enable-recovery: a rank's death does not end the job */
	const char *env[2]; /* more NAME=VALUE for the ranks, or NULL */
	const char *env2;   /* the second app context's instead (MPMD), or NULL */
	const char *warning; /* the one "pinshm-mpi: warning" line the run must print (its text), or NULL */
	unsigned long long ring; /* the ring every rank must report (its stats' queue line), 0: config_ring()'s */
};

static const struct config plain_configs[] = {
	{.name = "plain -np 2", .np = 2},
	{.name = "plain -np 4", .np = 4},
};
static const struct config plugin_configs[] = {
	{.name = "plugin -np 2", .np = 2, .plugin = true},
	{.name = "plugin -np 4", .np = 4, .plugin = true},
	{.name = "plugin -np 4 PINSHM_MPI_NODES=2", .np = 4, .plugin = true, .nodes = 2},
	{.name = "plugin -np 2 PINSHM_MPI=0", .np = 2, .plugin = true, .off = true},
	{.name = "plugin -np 2 without a daemon", .np = 2, .plugin = true, .fallback = true},
};
#define NPLAIN ((int)(sizeof(plain_configs) / sizeof(plain_configs[0])))
#define NPLUGIN ((int)(sizeof(plugin_configs) / sizeof(plugin_configs[0])))

static const char *env_or(const char *var, const char *fallback)
{
	const char *v = getenv(var);

	return v && v[0] ? v : fallback;
}

static const char *plugin_path(void)
{
	return env_or("PINSHM_MPI_LIB", "src/mpi/.libs/libpinshm_mpi.so");
}

/* The tool's library that defines MPI_Send (tests/mpi/wrap_send.c). */
static const char *wrap_path(void)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/.libs/libwrap_send.so", env_or("PINSHM_MPI_TESTS", MPI_TESTS_DIR));
	return path;
}

static int find_asan(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "/libasan.so")) {
		snprintf(arg, PATH_MAX, "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

/* The libasan this process runs with (an ASan build), or "". */
static const char *asan_lib(void)
{
	static char path[PATH_MAX];

	path[0] = 0;
	dl_iterate_phdr(find_asan, path);
	return path;
}

/* ======================================================================== */
/* an ordinary user                                                          */
/* ======================================================================== */

#define MPI_USER "pinshm-mpi-user"
#define MPI_USER_LOCK "/tmp/pinshm-check-mpi-user.lock" /* one run as the user at a time */
#define USER_PATH "/usr/local/bin:/usr/bin:/bin"

/* A run as MPI_USER, from copies in dir (mode 0755): the user's processes
 * may not be able to read the build. */
struct mpi_user {
	uid_t uid;
	gid_t gid;
	rlim_t memlock; /* RLIMIT_MEMLOCK to run with, 0: the test's own */
	bool xdg;       /* XDG_RUNTIME_DIR=dir/run, else unset (the socket in /tmp/pinshm-UID) */
	const char *sock; /* a system daemon's socket for the ranks (PINSHM_SOCKET), or NULL */
	int lock;       /* flock of MPI_USER_LOCK */
	char dir[64];
	char home[80], tmp[80], run[80]; /* the user's HOME, TMPDIR, XDG_RUNTIME_DIR (0700, its own) */
	char plugin[PATH_MAX], pinshmd[PATH_MAX];
	char asan[PATH_MAX]; /* the copy of the libasan the ranks preload, or "" */
};

/* In a child: become the user, with its RLIMIT_MEMLOCK, in its HOME and a
 * clean environment (Open MPI's OMPI_MCA_* settings kept: CI sets some for
 * containers), or print why on stderr and exit 125. */
static void user_enter(const struct mpi_user *u)
{
	extern char **environ;
	char *keep[32];
	int nkeep = 0;
	gid_t groups[64];

	if (u->memlock) {
		struct rlimit rl = {u->memlock, u->memlock};
		if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
			tu_child_fail(125, "RLIMIT_MEMLOCK: %s", strerror(errno));
	}
	if (initgroups(MPI_USER, u->gid) != 0 || setgid(u->gid) != 0 || setuid(u->uid) != 0)
		tu_child_fail(125, "become %s: %s", MPI_USER, strerror(errno));
	int n = getgroups(64, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == 0)
			tu_child_fail(125, "%s is still in group 0", MPI_USER);
	if (n < 0 || getuid() != u->uid || geteuid() != u->uid || getgid() != u->gid || getegid() != u->gid ||
	    setuid(0) == 0)
		tu_child_fail(125, "still root after becoming %s", MPI_USER);
	if (chdir(u->home) != 0)
		tu_child_fail(125, "cd %s: %s", u->home, strerror(errno));
	for (char **e = environ; *e && nkeep < 32; e++)
		if (strncmp(*e, "OMPI_MCA_", 9) == 0 && (keep[nkeep] = strdup(*e)) != NULL)
			nkeep++;
	if (clearenv() != 0 || setenv("PATH", USER_PATH, 1) != 0 || setenv("HOME", u->home, 1) != 0 ||
	    setenv("TMPDIR", u->tmp, 1) != 0 || setenv("USER", MPI_USER, 1) != 0 ||
	    setenv("LOGNAME", MPI_USER, 1) != 0 || (u->xdg && setenv("XDG_RUNTIME_DIR", u->run, 1) != 0))
		tu_child_fail(125, "environment: %s", strerror(errno));
	for (int i = 0; i < nkeep; i++)
		putenv(keep[i]);
}

/* ======================================================================== */
/* one run                                                                   */
/* ======================================================================== */

struct stats {
	unsigned long long pinshm_msgs, pinshm_bytes, mpi_msgs, mpi_bytes;
	unsigned long long ranks; /* bit r: rank r reported this family */
};

struct run {
	int status;
	char *out; /* stdout and stderr of mpirun, NUL-terminated */
	size_t len;
	struct stats fam[NFAMILY];
	unsigned long long queue_pinned, queue_unpinned; /* bit r: rank r's queue was (not) locked in RAM */
	unsigned long long ring_other; /* bit r: rank r reported a ring of another size than the run's */
	unsigned long long copy_other; /* bit r: rank r copies once from another size than the run's */
	unsigned long long copied_once; /* messages received straight from their sender's memory, all ranks */
	unsigned long long copy_refused; /* bit r: the kernel refused rank r such a copy */
	int stat_lines, bad_lines;
	unsigned long long coll_pinshm[NCOLL], coll_mpi[NCOLL]; /* calls, all ranks */
	unsigned long long coll_ranks;                           /* bit r: rank r reported them all */
};

/* The ring every rank of @p cf must report (its stats' queue line): the
 * config's, else pinshm-mpi(7)'s rule: 2 MiB, halved until the node's N * N
 * rings take at most 1 GiB (22 ranks keep 2 MiB, 32 get 1 MiB). */
static unsigned long long config_ring(const struct config *cf)
{
	unsigned long long per_node = (unsigned long long)(cf->nodes > 1 ? cf->np / cf->nodes : cf->np);
	unsigned long long ring = 2ull << 20;

	if (cf->ring)
		return cf->ring;
	while (ring > 16 * 1024 && ring * per_node * per_node > 1ull << 30)
		ring /= 2;
	return ring;
}

/* Whether the kernel lets a process read a sibling's memory, as the
 * plugin's single copy does between ranks (process_vm_readv(2); a
 * container without CAP_SYS_PTRACE, or Yama, may forbid it): a child
 * reads a word its brother holds.  Asked once. */
static bool sibling_readable(void)
{
	static int known = -1;
	static volatile uint64_t word;
	int ready[2];

	if (known >= 0)
		return known;
	ck_assert_int_eq(pipe(ready), 0);
	pid_t holder = fork();
	ck_assert_int_ge(holder, 0);
	if (holder == 0) {
		word = 0x5eed5eed5eed5eedull;
		ssize_t n = write(ready[1], "r", 1);
		(void)n;
		pause();
		_exit(0);
	}
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	pid_t reader = fork();
	ck_assert_int_ge(reader, 0);
	if (reader == 0) {
		uint64_t got = 0;
		struct iovec local = {&got, sizeof(got)}, remote = {(void *)&word, sizeof(word)};
		_exit(process_vm_readv(holder, &local, 1, &remote, 1, 0) == (ssize_t)sizeof(got) &&
			      got == 0x5eed5eed5eed5eedull
		      ? 0
		      : 1);
	}
	int st;
	while (waitpid(reader, &st, 0) < 0)
		ck_assert_int_eq(errno, EINTR);
	kill(holder, SIGKILL);
	while (waitpid(holder, NULL, 0) < 0 && errno == EINTR)
		;
	close(ready[0]);
	close(ready[1]);
	known = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	return known;
}

/* PINSHM_MPI_CMA's value where @p cf sets it (a plain number of bytes),
 * else NULL: then crossing messages are copied once too. */
static const char *cma_env(const struct config *cf)
{
	for (int e = 0; e < 2 && cf->env[e]; e++)
		if (!strncmp(cf->env[e], "PINSHM_MPI_CMA=", 15))
			return cf->env[e] + 15;
	return NULL;
}

/* The size from which the ranks of @p cf copy messages once, from their
 * sender's memory (crossing ones aside): PINSHM_MPI_CMA's where the
 * config sets it, else past the eager size where the ranks of a (pretend)
 * node outnumber the machine's cores, else none (0).  The eager size is
 * 32 KiB, or what a record of the ring holds (no config asks for less). */
static unsigned long long copy_once_from(const struct config *cf)
{
	if (cma_env(cf))
		return strtoull(cma_env(cf), NULL, 0);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int per_node = cf->nodes > 1 ? cf->np / cf->nodes : cf->np;
	unsigned long long eager = config_ring(cf) / 2 - 96;

	if (eager > 32 * 1024)
		eager = 32 * 1024;
	return per_node > (cores > 0 ? cores : 1) ? eager + 1 : 0;
}

/* The messages p2p_crossing copies once in @p cf, all ranks: of each pair
 * of ranks of a node, its 24 crossing ones (4 exchanges, 4 Sendrecv's and
 * 4 half-blocking exchanges, each both ways), and its 4 one-way ones
 * where messages of their size (100000 bytes) are copied. */
static unsigned long long crossing_copies(const struct config *cf)
{
	int nodes = cf->nodes > 1 ? cf->nodes : 1, per_node = cf->np / nodes;
	unsigned long long pairs = (unsigned long long)nodes * per_node * (per_node - 1) / 2;
	unsigned long long from = copy_once_from(cf);
	if (from)
		return from <= 100000 ? 28 * pairs : 0; /* every message, or none, by its size */
	return cma_env(cf) ? 0 : 24 * pairs;
}

/* "pinshm-mpi coll stats: rank=R call=C pinshm_calls=N pinshm_bytes=N mpi_calls=N" lines: a bad
 * one counts as a malformed stats line. */
static void parse_coll(struct run *r, int np)
{
	unsigned long long seen[NCOLL] = {0};
	const char *tag = "pinshm-mpi coll stats:";
	for (char *line = strstr(r->out, tag); line; line = strstr(line + 1, tag)) {
		int rank = -1, k;
		char call[32];
		unsigned long long calls, bytes, mpi;
		if (sscanf(line, "pinshm-mpi coll stats: rank=%d call=%31s pinshm_calls=%llu pinshm_bytes=%llu mpi_calls=%llu",
			   &rank, call, &calls, &bytes, &mpi) != 5 || rank < 0 || rank >= np) {
			r->bad_lines++;
			continue;
		}
		for (k = 0; k < NCOLL && strcmp(call, coll_name[k]) != 0; k++)
			;
		if (k == NCOLL || seen[k] >> rank & 1) {
			r->bad_lines++;
			continue;
		}
		seen[k] |= 1ull << rank;
		r->coll_pinshm[k] += calls;
		r->coll_mpi[k] += mpi;
	}
	r->coll_ranks = ~0ull;
	for (int k = 0; k < NCOLL; k++)
		r->coll_ranks &= seen[k];
}

/* The collective calls (bit k: coll_name[k]) that @p pg makes, which must
 * go through pinshm on one node. */
static unsigned colls_of(const struct program *pg)
{
	if (!strcmp(pg->name, "coll_nb"))
		return COLL_NB | 1u << 0 | 1u << 1 | 1u << 3; /* and Barrier, Bcast, Allreduce */
	if (!strcmp(pg->name, "f_coll_nb"))
		return COLL_NB;
	if (!strcmp(pg->name, "coll_nb_first"))
		return COLL_NB | 1u << 0; /* and Barrier */
	if (!strcmp(pg->name, "coll_kept")) /* Barrier, Bcast, Allreduce and their nonblocking twins */
		return 1u << 0 | 1u << 1 | 1u << 3 | 1u << 16 | 1u << 17 | 1u << 19;
	if (!strcmp(pg->name, "coll_random")) /* all but the v variants and Reduce_scatter */
		return COLL_BASIC | 1u << 12 | 1u << 14 | 1u << 15 | COLL_NB;
	if (!strcmp(pg->name, "coll_hier"))
		return COLL_HIER;
	if (!strcmp(pg->name, "coll_a2a_hier"))
		return 1u << 7 | 1u << 11; /* Alltoall, Alltoallv */
	if (!strcmp(pg->name, "coll_nb_hier"))
		return 1u << 0 | 1u << 3 | COLL_NB; /* Barrier, Allreduce, the nonblocking ones */
	if (!strcmp(pg->name, "coll_mismatch"))
		return 1u << 0 | 1u << 1 | 1u << 3; /* Barrier, Bcast, Allreduce */
	if (!strcmp(pg->name, "coll_truncate")) /* Barrier, Bcast, Allreduce, Gather, Scatter, Allgather, Alltoall,
						   Ibcast, Iallreduce, Iallgather */
		return 1u << 0 | 1u << 1 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 7 | 1u << 17 | 1u << 19 |
		       1u << 20;
	return !strcmp(pg->name, "coll_basic") || !strcmp(pg->name, "f_coll") ? COLL_BASIC
	       : !strcmp(pg->name, "coll_v")				      ? COLL_V
	       : !strcmp(pg->name, "coll_scan")				      ? COLL_SCAN
	       : !strcmp(pg->name, "f_collv")				      ? COLL_V | COLL_SCAN
										      : 0;
}

/* What coll_hier sends to the MPI library per rank, by call: on the
 * interleaved communicator (tests/mpi/coll_hier.c), one Reduce per root,
 * one Allreduce and one Reduce_scatter_block (its non-commutative calls),
 * 6 Scans and 5 Exscans (no node there is a block of ranks). */
static unsigned long long hier_mpi_calls(int k, unsigned long long np)
{
	return k == 2 ? np : k == 3 || k == 12 ? 1 : k == 14 ? 6 : k == 15 ? 5 : 0;
}

/* coll_hier on pretend nodes: each call it makes (COLL_HIER) went through
 * pinshm at every rank, and to the MPI library only hier_mpi_calls(). */
static bool hier_failed(const struct config *cf, const struct run *r, char *why, size_t len)
{
	unsigned long long np = (unsigned long long)cf->np;
	for (int k = 0; k < NCOLL; k++) {
		unsigned long long want_mpi = np * hier_mpi_calls(k, np);
		if ((COLL_HIER >> k & 1) && (r->coll_pinshm[k] < np || r->coll_mpi[k] != want_mpi)) {
			snprintf(why, len, "%s: %llu calls through pinshm, %llu to the MPI library (want %llu) on %d nodes",
				 coll_name[k], r->coll_pinshm[k], r->coll_mpi[k], want_mpi, cf->nodes);
			return true;
		}
	}
	return false;
}

/* coll_kept on one node: every rank's "pinshm-mpi coll areas:" line says
 * 3 areas made and 16 kept ones taken (tests/mpi/coll_kept.c), or with
 * PINSHM_MPI_COLL_KEEP=0 (none kept), 19 made. */
static bool kept_failed(const struct config *cf, const struct run *r, char *why, size_t len)
{
	bool none = cf->env[0] && !strcmp(cf->env[0], "PINSHM_MPI_COLL_KEEP=0");
	unsigned long long want_made = none ? 19 : 3, want_taken = none ? 0 : 16;
	int lines = 0;
	for (const char *l = strstr(r->out, "pinshm-mpi coll areas: "); l; l = strstr(l + 1, "pinshm-mpi coll areas: ")) {
		int rank = -1;
		unsigned long long made = 0, taken = 0;
		if (sscanf(l, "pinshm-mpi coll areas: rank=%d joined=%llu kept_taken=%llu", &rank, &made, &taken) != 3 ||
		    made != want_made || taken != want_taken) {
			snprintf(why, len, "rank %d: %llu areas made, %llu kept ones taken: want %llu and %llu", rank,
				 made, taken, want_made, want_taken);
			return true;
		}
		lines++;
	}
	if (lines != cf->np) {
		snprintf(why, len, "%d \"coll areas\" lines from %d ranks", lines, cf->np);
		return true;
	}
	return false;
}

/* For a program of collectives (colls_of()) in @p cf: every rank reported every
 * call; on one node each call it uses went through pinshm and none went to
 * the MPI library; with collectives or the plugin off, none went through
 * pinshm; coll_hier on pretend nodes: hier_failed(). */
static bool coll_failed(const struct program *pg, const struct config *cf, const struct run *r, bool all_mpi,
			char *why, size_t len)
{
	unsigned colls = colls_of(pg);
	if (!colls)
		return false;
	/* NB_FIRST_COLL_OFF: collectives off at one rank (coll_nb_first), so
	 * every communicator's agreement says off. */
	bool off = cf->off || all_mpi || (pg->env && !strcmp(pg->env, "PINSHM_MPI_COLL=0")) ||
		   (pg->env && !strncmp(pg->env, "NB_FIRST_COLL_OFF=", 18)) ||
		   (cf->env[0] && !strcmp(cf->env[0], "PINSHM_MPI_COLL=0"));
	if (r->coll_ranks != (1ull << cf->np) - 1) {
		snprintf(why, len, "collective stats from ranks %#llx", r->coll_ranks);
		return true;
	}
	for (int k = 0; k < NCOLL; k++) {
		bool used = colls >> k & 1;
		bool bad = off ? r->coll_pinshm[k] != 0
			       : cf->nodes <= 1 && ((used && !r->coll_pinshm[k]) || r->coll_mpi[k]);
		if (bad) {
			snprintf(why, len, "%s: %llu calls through pinshm, %llu to the MPI library%s", coll_name[k],
				 r->coll_pinshm[k], r->coll_mpi[k], off ? " (collectives off)" : "");
			return true;
		}
	}
	/* coll_a2a_hier, coll_nb_hier on pretend nodes: every call carried, none to the library. */
	bool a2a = !strcmp(pg->name, "coll_a2a_hier"), nbh = !strcmp(pg->name, "coll_nb_hier");
	for (int k = 0; !off && cf->nodes >= 2 && (a2a || nbh) && k < NCOLL; k++)
		if ((colls >> k & 1) && (r->coll_pinshm[k] < (unsigned long long)cf->np || r->coll_mpi[k])) {
			snprintf(why, len, "%s: %llu calls through pinshm, %llu to the MPI library on %d nodes",
				 coll_name[k], r->coll_pinshm[k], r->coll_mpi[k], cf->nodes);
			return true;
		}
	if (!off && cf->nodes <= 1 && !strcmp(pg->name, "coll_kept") && kept_failed(cf, r, why, len))
		return true;
	return !off && cf->nodes >= 2 && !strcmp(pg->name, "coll_hier") && hier_failed(cf, r, why, len);
}

/* Run @p pg in @p cf: with the test daemon @p d, or, where @p u is not NULL,
 * as the ordinary user @p u (@p d NULL) from its copies, with PINSHMD and
 * without PINSHM_SOCKET. */
/* One line per run with how long mpirun took, for whoever looks where
 * the test's time goes (the log). */
static void note_time(const struct program *pg, const struct config *cf, uint64_t t0)
{
	fprintf(stderr, "check_mpi: %s%s%s, %s: mpirun took %.1f s\n", pg->name, program_arg ? " " : "",
		program_arg ? program_arg : "", cf->name, (double)(tu_now_ms() - t0) / 1000);
	fflush(stderr);
}

static void run_mpi(const struct daemon *d, const struct mpi_user *u, const struct program *pg,
		    const struct config *cf, struct run *r)
{
	char prog[2][PATH_MAX], outpath[PATH_MAX], np[16], sock[200], preload[4 * PATH_MAX], nodes[40], asan_opt[300];
	char pinshmd[PATH_MAX + 16], limit[16];
	const char *argv[64];
	int n = 0, contexts = pg->mpmd ? 2 : 1;

	memset(r, 0, sizeof(*r));
	for (int c = 0; c < contexts; c++) {
		snprintf(prog[c], sizeof(prog[c]), "%s/%s", u ? u->dir : env_or("PINSHM_MPI_TESTS", MPI_TESTS_DIR),
			 c ? pg->mpmd : pg->name);
		ck_assert_msg(access(prog[c], X_OK) == 0, "%s: %s (not built?)", prog[c], strerror(errno));
	}
	snprintf(outpath, sizeof(outpath), "%s/mpirun.out", u ? u->dir : d->dir);
	snprintf(np, sizeof(np), "%d", cf->np / contexts);
	snprintf(limit, sizeof(limit), "%d", run_limit_s());
	/* Without a daemon: a socket in a folder that does not exist, where none can start. */
	if (!u)
		snprintf(sock, sizeof(sock), "PINSHM_SOCKET=%s%s", cf->fallback ? d->dir : d->sock,
			 cf->fallback ? "/missing/sock" : "");
	else if (u->sock)
		snprintf(sock, sizeof(sock), "PINSHM_SOCKET=%s", u->sock);
	else
		snprintf(pinshmd, sizeof(pinshmd), "PINSHMD=%s", u->pinshmd);
	snprintf(nodes, sizeof(nodes), "PINSHM_MPI_NODES=%d", cf->nodes);
	const char *asan = u ? u->asan : asan_lib();
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s%s%s", asan, asan[0] ? ":" : "",
		 cf->wrapped ? wrap_path() : "", cf->wrapped ? ":" : "", u ? u->plugin : plugin_path());
	snprintf(asan_opt, sizeof(asan_opt), "ASAN_OPTIONS=%s%sdetect_leaks=0", env_or("ASAN_OPTIONS", ""),
		 getenv("ASAN_OPTIONS") && getenv("ASAN_OPTIONS")[0] ? ":" : "");

	argv[n++] = "timeout";
	argv[n++] = "-k";
	argv[n++] = "10";
	argv[n++] = limit;
	argv[n++] = getenv("MPIRUN");
	if (cf->np > 2)
		argv[n++] = "--oversubscribe";
	if (cf->recovery)
		argv[n++] = "--enable-recovery";
	argv[n++] = "--mca";
	argv[n++] = "pml";
	argv[n++] = "ob1";
	argv[n++] = "--mca";
	argv[n++] = "btl";
	argv[n++] = "self,vader";
	for (int c = 0; c < contexts; c++) {
		if (c)
			argv[n++] = ":";
		argv[n++] = "-np";
		argv[n++] = np;
		argv[n++] = "-x";
		argv[n++] = u && !u->sock ? pinshmd : sock;
		argv[n++] = "-x";
		argv[n++] = "PINSHM_MPI_STATS=1";
		if (cf->plugin) {
			argv[n++] = "-x";
			argv[n++] = preload;
		}
		if (cf->nodes) {
			argv[n++] = "-x";
			argv[n++] = nodes;
		}
		if (cf->off) {
			argv[n++] = "-x";
			argv[n++] = "PINSHM_MPI=0";
		}
		if (c && cf->env2) {
			argv[n++] = "-x";
			argv[n++] = cf->env2;
		} else {
			for (int e = 0; e < 2 && cf->env[e]; e++) {
				argv[n++] = "-x";
				argv[n++] = cf->env[e];
			}
		}
		if (asan[0]) {
			argv[n++] = "-x";
			argv[n++] = asan_opt;
		}
		if (pg->env) {
			argv[n++] = "-x";
			argv[n++] = pg->env;
		}
		argv[n++] = prog[c];
		if (c == 0 && program_arg)
			argv[n++] = program_arg;
	}
	argv[n] = NULL;

	fflush(stdout);
	fflush(stderr);
	uint64_t t0 = tu_now_ms();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
		int nul = open("/dev/null", O_RDONLY);
		if (nul < 0 || dup2(nul, STDIN_FILENO) < 0)
			_exit(126);
		setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
		setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
		/* The plugin goes to the ranks only (-x), never into mpirun. */
		unsetenv("LD_PRELOAD");
		unsetenv("PINSHM_MPI_NODES");
		unsetenv("PINSHM_MPI");
		unsetenv("PINSHM_MPI_RING");
		unsetenv("PINSHM_MPI_NODE_RINGS");
		unsetenv("PINSHM_MPI_EAGER");
		unsetenv("PINSHM_MPI_CHUNK");
		unsetenv("PINSHM_MPI_CMA");
		unsetenv("PINSHM_MPI_PIECE");
		if (u)
			user_enter(u);
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "exec timeout: %s\n", strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &r->status, 0) < 0)
		ck_assert_int_eq(errno, EINTR);
	note_time(pg, cf, t0);

	FILE *f = fopen(outpath, "r");
	ck_assert_msg(f != NULL, "%s: %s", outpath, strerror(errno));
	r->out = malloc(OUT_MAX + 1);
	ck_assert_ptr_nonnull(r->out);
	r->len = fread(r->out, 1, OUT_MAX, f);
	r->out[r->len] = 0;
	fclose(f);
	unlink(outpath);

	parse_coll(r, cf->np);
	/* "pinshm-mpi stats: rank=R family=F pinshm_msgs=N pinshm_bytes=N mpi_msgs=N mpi_bytes=N" */
	for (char *line = strstr(r->out, "pinshm-mpi stats:"); line; line = strstr(line + 1, "pinshm-mpi stats:")) {
		int rank = -1;
		char fam[32];
		struct stats s = {0};
		r->stat_lines++;
		/* "pinshm-mpi stats: rank=R queue=pinned|unpinned ring=BYTES copy_once_from=BYTES copied_once=N
		 * copy_refused=0|1" */
		unsigned long long ring = 0, copy_from = 0, copied = 0;
		int refused = -1;
		int fields = sscanf(line,
				    "pinshm-mpi stats: rank=%d queue=%31s ring=%llu copy_once_from=%llu copied_once=%llu "
				    "copy_refused=%d",
				    &rank, fam, &ring, &copy_from, &copied, &refused);
		if (fields >= 2) {
			unsigned long long *m = !strcmp(fam, "pinned")	 ? &r->queue_pinned
						: !strcmp(fam, "unpinned") ? &r->queue_unpinned
									   : NULL;
			if (fields != 6 || (refused != 0 && refused != 1) || !m || rank < 0 || rank >= cf->np ||
			    ((r->queue_pinned | r->queue_unpinned) >> rank & 1)) {
				r->bad_lines++;
				continue;
			}
			*m |= 1ull << rank;
			if (ring != config_ring(cf))
				r->ring_other |= 1ull << rank;
			if (copy_from != copy_once_from(cf))
				r->copy_other |= 1ull << rank;
			r->copied_once += copied;
			if (refused)
				r->copy_refused |= 1ull << rank;
			continue;
		}
		if (sscanf(line,
			   "pinshm-mpi stats: rank=%d family=%31s pinshm_msgs=%llu pinshm_bytes=%llu mpi_msgs=%llu "
			   "mpi_bytes=%llu",
			   &rank, fam, &s.pinshm_msgs, &s.pinshm_bytes, &s.mpi_msgs, &s.mpi_bytes) != 6 ||
		    rank < 0 || rank >= cf->np) {
			r->bad_lines++;
			continue;
		}
		int k;
		for (k = 0; k < NFAMILY && strcmp(fam, family_name[k]) != 0; k++)
			;
		if (k == NFAMILY) {
			r->bad_lines++;
			continue;
		}
		struct stats *t = &r->fam[k];
		if (t->ranks & 1ull << rank)
			r->bad_lines++; /* twice the same */
		t->ranks |= 1ull << rank;
		t->pinshm_msgs += s.pinshm_msgs;
		t->pinshm_bytes += s.pinshm_bytes;
		t->mpi_msgs += s.mpi_msgs;
		t->mpi_bytes += s.mpi_bytes;
	}
}

/* The output of a run, for the log of a failed test. */
static void dump(const struct program *pg, const struct config *cf, const struct run *r)
{
	char st[64];
	size_t from = r->len > 6000 ? r->len - 6000 : 0;

	fprintf(stderr, "---- %s%s%s, %s: %s; output%s:\n%s\n", pg->name, pg->mpmd ? " : " : "",
		pg->mpmd ? pg->mpmd : "", cf->name, tu_status_str(r->status, st, sizeof(st)), from ? " (its end)" : "",
		r->out + from);
	for (int k = 0; k < NFAMILY; k++)
		fprintf(stderr, "  %-11s ranks %#llx pinshm %llu msgs %llu bytes, mpi %llu msgs %llu bytes\n",
			family_name[k], r->fam[k].ranks, r->fam[k].pinshm_msgs, r->fam[k].pinshm_bytes,
			r->fam[k].mpi_msgs, r->fam[k].mpi_bytes);
	fflush(stderr);
}

/* How many times @p what appears in @p out. */
static int occurrences(const char *out, const char *what)
{
	int n = 0;
	for (const char *w = strstr(out, what); w; w = strstr(w + 1, what))
		n++;
	return n;
}

/* Why run @p r of @p pg in @p cf failed, into @p why; or false if it passed. */
static bool run_failed(const struct program *pg, const struct config *cf, const struct run *r, char *why,
		       size_t len)
{
	char st[64], lim[48] = "";

	if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) {
		if (WIFEXITED(r->status) && (WEXITSTATUS(r->status) == 124 || WEXITSTATUS(r->status) == 137))
			snprintf(lim, sizeof(lim), " (timed out after %d s: a hang)", run_limit_s());
		snprintf(why, len, "mpirun: %s%s", tu_status_str(r->status, st, sizeof(st)), lim);
		return true;
	}
	int warnings = occurrences(r->out, "pinshm-mpi: warning");
	if (cf->warning && (warnings != 1 || !strstr(r->out, cf->warning))) {
		snprintf(why, len, "%d warnings, want one saying \"%s\"", warnings, cf->warning);
		return true;
	}
	if (warnings && !cf->fallback && !cf->warning) {
		snprintf(why, len, "the plugin warned: %.200s", strstr(r->out, "pinshm-mpi: warning"));
		return true;
	}
	if (r->bad_lines) {
		snprintf(why, len, "%d malformed or repeated stats lines", r->bad_lines);
		return true;
	}
	if (!cf->plugin) {
		if (r->stat_lines) {
			snprintf(why, len, "%d stats lines without the plugin", r->stat_lines);
			return true;
		}
		return false;
	}
	const char *all_mpi = cf->fallback ? "without a daemon" : cf->wrapped ? "behind a tool's MPI_Send" : NULL;
	if ((cf->off || all_mpi) && (r->queue_pinned | r->queue_unpinned)) {
		snprintf(why, len, "a queue line, but no queue (%s)", cf->off ? "PINSHM_MPI=0" : all_mpi);
		return true;
	}
	if (coll_failed(pg, cf, r, all_mpi != NULL, why, len))
		return true;
	if (cf->off) {
		/* Turned off: stats are optional, but nothing may go through pinshm. */
		for (int k = 0; k < NFAMILY; k++)
			if (r->fam[k].pinshm_msgs) {
				snprintf(why, len, "PINSHM_MPI=0, yet family %s carried %llu messages through pinshm",
					 family_name[k], r->fam[k].pinshm_msgs);
				return true;
			}
		return false;
	}
	if (all_mpi) {
		/* One line for the node, then everything through the MPI library. */
		if (warnings != 1) {
			snprintf(why, len, "%s: %d warning lines, want 1", all_mpi, warnings);
			return true;
		}
		unsigned long long passed = 0;
		for (int k = 0; k < NFAMILY; k++) {
			if (r->fam[k].pinshm_msgs) {
				snprintf(why, len, "%s, family %s carried %llu messages through pinshm", all_mpi,
					 family_name[k], r->fam[k].pinshm_msgs);
				return true;
			}
			passed += r->fam[k].mpi_msgs;
		}
		if (passed == 0) {
			snprintf(why, len, "%s, the stats show nothing passed to the MPI library", all_mpi);
			return true;
		}
		return false;
	}
	unsigned long long all = (1ull << cf->np) - 1, mpi_total = 0;
	if ((r->queue_pinned | r->queue_unpinned) != all) {
		snprintf(why, len, "queue lines from ranks %#llx, want %#llx", r->queue_pinned | r->queue_unpinned, all);
		return true;
	}
	if (r->ring_other) {
		snprintf(why, len, "ranks %#llx report a ring of another size than %llu bytes", r->ring_other,
			 config_ring(cf));
		return true;
	}
	if (r->copy_other) {
		snprintf(why, len, "ranks %#llx copy messages once from another size than %llu bytes", r->copy_other,
			 copy_once_from(cf));
		return true;
	}
	/* Its messages past the eager size, between ranks that share the
	 * cores, go straight from sender to receiver (never where ranks have
	 * cores of their own).  Where a child may read its brother's memory,
	 * ranks may too; where not, they still may (Open MPI's CMA lets any
	 * process of the user trace its ranks where Yama would forbid it), or
	 * the kernel refused them and they said so, streaming instead. */
	if (!strcmp(pg->name, "p2p_crossing") && !(r->copy_refused && !sibling_readable()) &&
	    r->copied_once != crossing_copies(cf)) {
		snprintf(why, len, "%llu messages copied once, want %llu (one-way ones streamed, crossing ones copied%s)",
			 r->copied_once, crossing_copies(cf), copy_once_from(cf) ? ", and all from their size" : "");
		return true;
	}
	if (!strcmp(pg->name, "p2p_large")) {
		/* Its messages cross: copied once unless PINSHM_MPI_CMA says not. */
		bool copying = copy_once_from(cf) != 0 || !cma_env(cf);
		bool ok = !copying ? r->copied_once == 0 && r->copy_refused == 0
				   : r->copied_once != 0 || (!sibling_readable() && r->copy_refused != 0);
		if (!ok) {
			snprintf(why, len, "%llu messages copied once (ranks %#llx refused), copying from %llu bytes (%s)",
				 r->copied_once, r->copy_refused, copy_once_from(cf),
				 sibling_readable() ? "a child reads its brother" : "a child may not read its brother");
			return true;
		}
	}
	for (int k = 0; k < NFAMILY; k++) {
		const struct stats *s = &r->fam[k];
		unsigned bit = 1u << k;
		mpi_total += s->mpi_msgs;
		if (s->ranks != all) {
			snprintf(why, len, "family %s: stats from ranks %#llx, want %#llx", family_name[k], s->ranks,
				 all);
			return true;
		}
		if ((pg->uses & bit) && s->pinshm_msgs == 0) {
			snprintf(why, len, "family %s: no message through pinshm (mpi_msgs=%llu)", family_name[k],
				 s->mpi_msgs);
			return true;
		}
		if ((pg->uses & bit) && s->pinshm_bytes == 0) {
			snprintf(why, len, "family %s: %llu messages through pinshm but 0 bytes", family_name[k],
				 s->pinshm_msgs);
			return true;
		}
		if (cf->nodes <= 1 && !(pg->passes & bit) && s->mpi_msgs != 0) {
			snprintf(why, len, "family %s: %llu messages (%llu bytes) to the MPI library on one node",
				 family_name[k], s->mpi_msgs, s->mpi_bytes);
			return true;
		}
		if (cf->nodes <= 1 && (pg->passes & bit) && s->mpi_msgs == 0) {
			snprintf(why, len, "family %s: used on an intercommunicator, but nothing went to the MPI library",
				 family_name[k]);
			return true;
		}
	}
	if (cf->nodes >= 2 && cf->np >= 4 && mpi_total == 0) {
		snprintf(why, len, "%d pretend nodes, but no message went to the MPI library", cf->nodes);
		return true;
	}
	return false;
}

static void run_one(const struct program *pg, const struct config *cf)
{
	struct daemon d;
	struct run r;
	char why[512];
	const char *only = getenv("PINSHM_MPI_ONLY");

	if (only && only[0] && strcmp(only, pg->name) != 0)
		return;
	/* mixed_cf's C half counts allocations with its own malloc; built
	 * without the sanitizers (Makefile.am), it cannot run beside the
	 * libasan an ASan build preloads: the plain build runs it. */
	if (!strcmp(pg->name, "mixed_cf") && asan_lib()[0]) {
		fprintf(stderr, "note: %s, %s: not run in an ASan build\n", pg->name, cf->name);
		return;
	}
	daemon_start(&d);
	run_mpi(&d, NULL, pg, cf, &r);
	bool failed = run_failed(pg, cf, &r, why, sizeof(why));
	if (!failed && geteuid() == 0 && r.queue_unpinned) { /* root's test daemon locks every queue */
		snprintf(why, sizeof(why), "the queues of ranks %#llx were not locked in RAM", r.queue_unpinned);
		failed = true;
	}
	if (failed)
		dump(pg, cf, &r);
	free(r.out);
	ck_assert_msg(!failed, "%s%s%s%s%s, %s: %s", pg->name, program_arg ? " " : "", program_arg ? program_arg : "",
		      pg->mpmd ? " : " : "", pg->mpmd ? pg->mpmd : "", cf->name, why);
	daemon_stop_ok(&d);
}

/* Every program in one configuration, then in the next (a quick run
 * makes the first configuration's only). */
START_TEST(test_plain)
{
	run_one(&programs[_i % NPROGRAMS], &plain_configs[_i / NPROGRAMS]);
}
END_TEST

/* Whether another run makes @p pg's in @p cf already: a variant of a
 * program's collectives' settings (PINSHM_MPI_COLL..., where the program
 * also runs without it) where the plugin carries nothing (turned off, or
 * no daemon), and collectives off at more than 2 ranks (that none goes
 * through pinshm does not depend on the ranks; the library's own
 * collectives run in the plain configurations). */
static bool same_as_another(const struct program *pg, const struct config *cf)
{
	if (!pg->env || strncmp(pg->env, "PINSHM_MPI_COLL", 15) != 0)
		return false;
	bool variant = false;
	for (int i = 0; i < NPROGRAMS; i++)
		variant = variant || (!strcmp(programs[i].name, pg->name) && !programs[i].env);
	return variant && (cf->off || cf->fallback || (!strcmp(pg->env, "PINSHM_MPI_COLL=0") && cf->np > 2));
}

START_TEST(test_plugin)
{
	const struct program *pg = &programs[_i % NPROGRAMS];
	const struct config *cf = &plugin_configs[_i / NPROGRAMS];

	if (same_as_another(pg, cf)) {
		fprintf(stderr, "note: %s %s, %s: the same as another run, not made\n", pg->name, pg->env, cf->name);
		return;
	}
	run_one(pg, cf);
}
END_TEST

/* p2p_random, with one seed in one configuration (plain ones first). */
START_TEST(test_random)
{
	static const struct program prog = {"p2p_random", B | NB | P | PR | SY | BU, 0, NULL, NULL};
	int c = _i % (NPLAIN + NPLUGIN);

	program_arg = random_seeds[_i / (NPLAIN + NPLUGIN)];
	run_one(&prog, c < NPLAIN ? &plain_configs[c] : &plugin_configs[c - NPLAIN]);
	program_arg = NULL;
}
END_TEST

/* The collectives of coll_v, coll_scan and coll_random at 3 ranks (sub-communicators
 * of 3, a rank count not a power of two) with the smallest area (blocks of
 * 1000 items then take several steps), at 8 ranks on these few cores
 * (their short subset), and at 3 ranks with collectives off (the stats say
 * none went through pinshm). */
static const struct config coll_configs[] = {
	/* Small halves, and every piece of 256 bytes up streamed (coll_copy.c). */
	{.name = "plugin -np 3 PINSHM_MPI_COLL_AREA=16K PINSHM_MPI_COLL_STREAM=256", .np = 3, .plugin = true,
	 .env = {"PINSHM_MPI_COLL_AREA=16K", "PINSHM_MPI_COLL_STREAM=256"}},
	{.name = "plugin -np 8 (short)", .np = 8, .plugin = true},
	{.name = "plugin -np 3 PINSHM_MPI_COLL=0", .np = 3, .plugin = true, .env = {"PINSHM_MPI_COLL=0"}},
};
#define NCOLL_CONFIGS ((int)(sizeof(coll_configs) / sizeof(coll_configs[0])))

START_TEST(test_coll_ranks)
{
	static const struct program progs[] = {
		{"coll_v", B, 0, NULL, NULL}, {"coll_scan", B, 0, NULL, NULL}, {"coll_random", NB, 0, NULL, NULL}};
	const struct config *cf = &coll_configs[_i % NCOLL_CONFIGS];

	program_arg = cf->np > 4 ? "short" : NULL;
	run_one(&progs[_i / NCOLL_CONFIGS], cf);
	program_arg = NULL;
}
END_TEST

/* p2p_basic where the daemon allows 2 channels a user: the ranks' inbound
 * queues take them, MPI_COMM_WORLD's collective area cannot be made, and
 * its rank 0 says so once; its barriers go to Open MPI, point to point
 * stays carried. */
START_TEST(test_coll_no_area)
{
	static const struct program prog = {"p2p_basic", B, 0, NULL, NULL};
	static const struct config cf = {.name = "plugin -np 2, 2 channels a user", .np = 2, .plugin = true,
					 .warning = "could not be made"};
	const char *only = getenv("PINSHM_MPI_ONLY");
	struct daemon_opts o = {.config = true};
	struct daemon d;
	struct run r;
	char why[512];

	if (only && only[0] && strcmp(only, prog.name) != 0)
		return;
	daemon_start_config(&d, &o, "[daemon]\nmax_channels_per_user = 2\n");
	run_mpi(&d, NULL, &prog, &cf, &r);
	bool failed = run_failed(&prog, &cf, &r, why, sizeof(why));
	const char *st = strstr(r.out, "pinshm-mpi coll stats: rank=0 call=barrier ");
	unsigned long carried = 1, passed = 0;
	if (st)
		sscanf(st, "pinshm-mpi coll stats: rank=0 call=barrier pinshm_calls=%lu pinshm_bytes=%*u mpi_calls=%lu",
		       &carried, &passed);
	if (!failed && (carried != 0 || passed == 0)) {
		snprintf(why, sizeof(why), "barriers through pinshm %lu, through MPI %lu: want 0 and some", carried,
			 passed);
		failed = true;
	}
	if (failed)
		dump(&prog, &cf, &r);
	free(r.out);
	ck_assert_msg(!failed, "%s, %s: %s", prog.name, cf.name, why);
	daemon_stop_ok(&d);
}
END_TEST

/* coll_hier (the calls carried hierarchically) on two and three pretend
 * nodes of 4 ranks, two of 3 ranks, and with collectives off. */
static const struct config hier_configs[] = {
	{.name = "plugin -np 4 PINSHM_MPI_NODES=2", .np = 4, .plugin = true, .nodes = 2},
	{.name = "plugin -np 4 PINSHM_MPI_NODES=3", .np = 4, .plugin = true, .nodes = 3},
	{.name = "plugin -np 3 PINSHM_MPI_NODES=2", .np = 3, .plugin = true, .nodes = 2},
	{.name = "plugin -np 4 PINSHM_MPI_NODES=2 PINSHM_MPI_COLL=0", .np = 4, .plugin = true, .nodes = 2,
	 .env = {"PINSHM_MPI_COLL=0"}},
};
#define NHIER_CONFIGS ((int)(sizeof(hier_configs) / sizeof(hier_configs[0])))

START_TEST(test_coll_hier)
{
	static const struct program prog = {"coll_hier", B, 0, NULL, NULL};
	run_one(&prog, &hier_configs[_i]);
}
END_TEST

/* coll_mismatch: a Bcast whose receiver's count differs from the root's
 * (MPI_ERR_TRUNCATE), and the collectives after it; an erroneous program
 * whose outcome only the carried path defines, so it runs on one node
 * with collectives on: at 4 ranks, and at 3 with the smallest area
 * (messages of many steps). */
START_TEST(test_coll_mismatch)
{
	static const struct program prog = {"coll_mismatch", 0, 0, NULL, NULL}; /* no point to point */
	run_one(&prog, _i == 0 ? &plugin_configs[1] : &coll_configs[0]);
}
END_TEST

/* coll_truncate: Bcast, Scatter, Gather, Alltoall, Allgather, Ibcast and Iallgather whose
 * ranks' signatures differ in size (MPI_ERR_TRUNCATE where a receiver is
 * short, nothing past its count, no hang), each call carried; an erroneous
 * program whose outcome only the carried path defines (Open MPI alone
 * differs), so it runs on one node with collectives on: at 2 and 4 ranks,
 * and at 3 with the smallest area (blocks of many steps). */
START_TEST(test_coll_truncate)
{
	static const struct program prog = {"coll_truncate", 0, 0, NULL, NULL}; /* no point to point */
	static const struct config *const cfs[] = {&plugin_configs[0], &plugin_configs[1], &coll_configs[0]};
	run_one(&prog, cfs[_i]);
}
END_TEST

/* coll_dead across pretend nodes: at 4 ranks on 2 pretend nodes the last
 * rank (on the second node, not its leader) kills itself, and the three
 * survivors make calls with errors returned: each must get MPI_ERR_OTHER,
 * the ones of the first node too (they see the death only through the
 * call), well within the time limit (a hang runs into it), and pass it to
 * the error handler exactly once, but a rank whose own part of the call is
 * complete may return MPI_SUCCESS, the handler not called: one without a
 * result (rank 1 of a Reduce to rank 0), one whose result came from its
 * own node only (ranks 0 and 1 of a Bcast from rank 0, of a Scan).  Cases:
 * MPI_Iallreduce, MPI_Ibcast from the dead rank, MPI_Ibarrier, MPI_Ireduce
 * to rank 1 or to rank 0 (its leader), or MPI_Iallgather, and MPI_Wait;
 * in one run the blocking calls of coll_dead's "blocking", one after the
 * other (dead_blocking: after the first, the dead rank's node fails each
 * at once, and its survivor must still call the handler); and the same
 * at 6 ranks on 3 pretend nodes of 2 (the dead rank's node the third), where
 * a rank of the second node learns of the third's failure only where its
 * data depends on it (dead_blocking's either3).  Last, with the default
 * handler: "blocking", and "nonblocking" (the six nonblocking calls
 * pending together, one MPI_Waitall): every survivor must abort through
 * the handler (none reports a call), none wait for ever for a leader that
 * aborted.  The flat case, and calls of a count of 0 and collectives
 * made inside the handler (flat and on 2 pretend nodes):
 * tests/check_coll.sh. */
#define NDEAD_CALLS 6
#define NDEAD_RUNS (NDEAD_CALLS + 4)
static const struct {
	const char *call;
	unsigned either;  /* the ranks that may return MPI_SUCCESS at 4 ranks on 2 nodes, a bit each */
	unsigned either3; /* the same at 6 ranks on 3 nodes */
} dead_blocking[] = {
	{"barrier", 0, 0},	  {"bcast", 0, 0},	{"bcast0", 0x3, 0xf},	{"bcastL", 0, 0},
	{"allreduce", 0, 0},	  {"allreduceL", 0, 0}, {"reduce", 0, 0xc},	{"reduce0", 0x2, 0xe},
	{"gather", 0, 0xc},	  {"allgather", 0, 0},	{"gatherv", 0, 0x8},	{"allgatherv", 0, 0},
	{"scatter", 0, 0},	  {"scatterv", 0, 0},	{"alltoall", 0, 0},	{"alltoallv", 0, 0},
	{"reduce_scatter", 0, 0}, {"scan", 0x3, 0x2},
};

/* Whether a coll_dead line's call (from @p w, its line ending at @p nl)
 * returned MPI_SUCCESS. */
static bool rc_success(const char *w, const char *nl)
{
	const char *z = strstr(w, " returned 0 ");
	return z && (!nl || z < nl);
}

/* Of coll_dead's lines in @p out for @p call: how many survivors reported
 * it (*@p oks) and how many of those as they should (*@p errs): the error,
 * passed to the handler once (a nonblocking call's by MPI_Wait), or (a
 * rank of @p either) success and the handler never called. */
static void dead_count(const char *out, const char *call, unsigned either, int *oks, int *errs)
{
	char want[64];
	int rank;
	snprintf(want, sizeof(want), ": %s returned ", call);
	*oks = *errs = 0;
	for (const char *l = strstr(out, "coll_dead: rank "); l; l = strstr(l + 1, "coll_dead: rank ")) {
		const char *w = strstr(l, want), *nl = strchr(l, '\n');
		if (w && (!nl || w < nl) && sscanf(l, "coll_dead: rank %d", &rank) == 1) {
			const char *e = strstr(w, "MPI_ERR_OTHER"), *hd = strstr(w, ", handler ");
			bool err = e && (!nl || e < nl);
			int times = hd && (!nl || hd < nl) ? atoi(hd + 10) : -1;
			*errs += err ? times == 1
				     : times == 0 && rc_success(w, nl) && rank >= 0 && rank < 32 && (either >> rank & 1);
			(*oks)++;
		}
	}
}

START_TEST(test_coll_dead_hier)
{
	static const char *const calls[NDEAD_CALLS] = {"iallreduce", "ibcast",	 "ibarrier",
						       "ireduce",    "ireduce0", "iallgather"};
	static const struct program prog = {"coll_dead", 0, 0, NULL, NULL};
	static const struct config cf = {.name = "plugin -np 4 PINSHM_MPI_NODES=2 --enable-recovery", .np = 4,
					 .plugin = true, .nodes = 2, .recovery = true, .env = {"COLL_DEAD_RETURN=1"}};
	static const struct config cf3 = {.name = "plugin -np 6 PINSHM_MPI_NODES=3 --enable-recovery", .np = 6,
					  .plugin = true, .nodes = 3, .recovery = true, .env = {"COLL_DEAD_RETURN=1"}};
	static const struct config fatal = {.name = "plugin -np 4 PINSHM_MPI_NODES=2 --enable-recovery, errors fatal",
					    .np = 4, .plugin = true, .nodes = 2, .recovery = true};
	/* _i: the calls, then "blocking" on 2 nodes and on 3, then with errors fatal "blocking" and "nonblocking" */
	bool blocking = _i >= NDEAD_CALLS, three = _i == NDEAD_CALLS + 1, aborts = _i >= NDEAD_CALLS + 2;
	const struct config *c = aborts ? &fatal : three ? &cf3 : &cf;
	struct daemon d;
	struct run r;

	const char *arg = _i == NDEAD_CALLS + 3 ? "nonblocking" : blocking ? "blocking" : calls[_i];
	program_arg = arg;
	daemon_start(&d);
	run_mpi(&d, NULL, &prog, c, &r);
	program_arg = NULL;
	/* mpirun's own status may tell of the killed rank: only a timeout counts. */
	bool hung = !WIFEXITED(r.status) || WEXITSTATUS(r.status) == 124 || WEXITSTATUS(r.status) == 137;
	if (aborts) { /* each survivor says it before the default handler ends it */
		static const char ends[] = "the default handler ends";
		int said = 0;
		for (const char *l = strstr(r.out, ends); l; l = strstr(l + 1, ends))
			said++;
		bool quiet = !strstr(r.out, " returned ");
		if (hung || !quiet || said != c->np - 1)
			dump(&prog, c, &r);
		free(r.out);
		ck_assert_msg(!hung && quiet && said == c->np - 1, "coll_dead %s, %s: exit %d, %s (%d aborts, want %d)",
			      arg, c->name, WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1,
			      hung ? "hung" : !quiet ? "a survivor returned" : "not every survivor aborted", said,
			      c->np - 1);
		daemon_stop_ok(&d);
		return;
	}
	char why[1024] = "";
	size_t n = blocking ? sizeof(dead_blocking) / sizeof(dead_blocking[0]) : 1, at = 0;
	int survivors = c->np - 1;
	for (size_t k = 0; k < n; k++) {
		const char *call = blocking ? dead_blocking[k].call : calls[_i];
		unsigned either = !blocking ? (!strcmp(call, "ireduce0") ? 2 : 0)
				  : three   ? dead_blocking[k].either3
					    : dead_blocking[k].either;
		int oks, errs;
		dead_count(r.out, call, either, &oks, &errs);
		if ((oks != survivors || errs != survivors) && at < sizeof(why))
			at += (size_t)snprintf(why + at, sizeof(why) - at,
					       "%s%s: %d survivors reported, %d as they should", at ? "; " : "", call,
					       oks, errs);
	}
	bool failed = hung || why[0];
	if (failed)
		dump(&prog, c, &r);
	free(r.out);
	ck_assert_msg(!failed, "coll_dead %s, %s: exit %d, %s (want %d and %d)", arg, c->name,
		      WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, why[0] ? why : "hung", survivors, survivors);
	daemon_stop_ok(&d);
}
END_TEST

/* coll_a2a_hier: Alltoall and Alltoallv carried hierarchically, on the
 * pretend nodes of hier_configs (all but the one with collectives off). */
START_TEST(test_coll_a2a_hier)
{
	/* Small pieces: the leaders' exchange sends a pair's blocks in several. */
	static const struct program prog = {"coll_a2a_hier", B, 0, NULL, "PINSHM_MPI_PIECE=1000"};
	run_one(&prog, &hier_configs[_i]);
}
END_TEST

/* coll_nb_hier: the nonblocking collectives carried hierarchically, on
 * the pretend nodes of hier_configs (all but the one with collectives off). */
START_TEST(test_coll_nb_hier)
{
	static const struct program prog = {"coll_nb_hier", B, 0, NULL, NULL};
	run_one(&prog, &hier_configs[_i]);
}
END_TEST

/* coll_commfree: a communicator spanning two pretend nodes, freed with
 * operations pending that finish inside collectives on world. */
START_TEST(test_coll_commfree)
{
	static const struct program prog = {"coll_commfree", NB, 0, NULL, NULL};
	run_one(&prog, &hier_configs[0]);
}
END_TEST

/* The rings' size: set, or fitted to what the node's rings may take
 * together, with every message still delivered through the smaller rings
 * (messages up to 64 MiB, each send mode, persistent requests). */
static const struct config ring_configs[] = {
	{.name = "plugin -np 4 PINSHM_MPI_NODE_RINGS=256K", .np = 4, .plugin = true,
	 .env = {"PINSHM_MPI_NODE_RINGS=256K"}, .ring = 16384},
	{.name = "plugin -np 4 PINSHM_MPI_NODE_RINGS=1M", .np = 4, .plugin = true,
	 .env = {"PINSHM_MPI_NODE_RINGS=1M"}, .ring = 65536},
	/* Every message streamed, crossing ones too, through small rings. */
	{.name = "plugin -np 2 PINSHM_MPI_RING=32K PINSHM_MPI_CMA=0", .np = 2, .plugin = true,
	 .env = {"PINSHM_MPI_RING=32K", "PINSHM_MPI_CMA=0"}, .ring = 32768},
	/* Not a size: the ring is fitted to the node as if unset. */
	{.name = "plugin -np 4 PINSHM_MPI_RING=256KB PINSHM_MPI_NODE_RINGS=256K", .np = 4, .plugin = true,
	 .env = {"PINSHM_MPI_RING=256KB", "PINSHM_MPI_NODE_RINGS=256K"}, .ring = 16384,
	 .warning = "PINSHM_MPI_RING=256KB is not a size from 16384 to 1073741824: using the ring fitted"},
	/* An eager size the ring's records cannot carry: lowered, saying so. */
	{.name = "plugin -np 4 PINSHM_MPI_EAGER=32K PINSHM_MPI_NODE_RINGS=256K", .np = 4, .plugin = true,
	 .env = {"PINSHM_MPI_EAGER=32K", "PINSHM_MPI_NODE_RINGS=256K"}, .ring = 16384,
	 .warning = "a record of the 16384-byte ring holds 8096 bytes: eager size 8096, chunk 8096"},
};
#define NRING_CONFIGS ((int)(sizeof(ring_configs) / sizeof(ring_configs[0])))
static const char *const ring_programs[] = {"p2p_large", "p2p_modes", "p2p_persistent", "p2p_crossing"};
#define NRING_PROGRAMS ((int)(sizeof(ring_programs) / sizeof(ring_programs[0])))

START_TEST(test_rings)
{
	const char *name = ring_programs[_i / NRING_CONFIGS];
	int k = 0;

	while (k < NPROGRAMS && strcmp(programs[k].name, name) != 0)
		k++;
	ck_assert_int_lt(k, NPROGRAMS);
	run_one(&programs[k], &ring_configs[_i % NRING_CONFIGS]);
}
END_TEST

/* Ranks whose environments ask for other rings take the node's first
 * rank's, which made the queues: messages up to 64 MiB pass (a rank that
 * kept its own sent eager records too large for them). */
START_TEST(test_rings_differ)
{
	static const struct program large_twice = {"p2p_large", B | NB, 0, "p2p_large", NULL};
	static const struct config differ = {.name = "plugin -np 2, PINSHM_MPI_RING=16K then 1M", .np = 2,
					     .plugin = true, .env = {"PINSHM_MPI_RING=16K"},
					     .env2 = "PINSHM_MPI_RING=1M", .ring = 16384};

	run_one(&large_twice, &differ);
}
END_TEST

/* More ranks than a consumer looks at in every poll (16): the queues' lanes
 * looked at quickly while a rank spins and polls (pinshm-wait(3)), under
 * mpirun, with 32 ranks on the machine's cores. */
START_TEST(test_many_ranks)
{
	static const struct program many[] = {
		{"p2p_basic", B, 0, NULL, NULL},
		{"p2p_modes", B | NB | SY | BU, 0, NULL, NULL},
		{"p2p_random", B | NB | P | PR | SY | BU, 0, NULL, NULL},
	};
	/* The node's rings held to 256 MiB (256 KiB each, as the default gave
	 * before session 9), not 1 GiB: lanes are what this case is about. */
	static const struct config np32 = {.name = "plugin -np 32 PINSHM_MPI_NODE_RINGS=256M", .np = 32,
					   .plugin = true, .env = {"PINSHM_MPI_NODE_RINGS=256M"}, .ring = 256 * 1024};

	program_arg = _i == 2 ? "1" : NULL;
	run_one(&many[_i], &np32);
	program_arg = NULL;
}
END_TEST

/* The nonblocking collectives in a few more runs than every
 * configuration's (each run costs seconds): at 3 ranks (a node not a
 * power of two), with collectives turned off, as a communicator's first
 * collective calls (which must not wait, carried once the communicator's
 * agreement ends, or passed to the library where it says off), on
 * communicators that take the area their freed forerunner kept, from
 * Fortran. */
START_TEST(test_coll_nb)
{
	static const struct {
		struct program pg;
		struct config cf;
	} runs[] = {
		{{"coll_nb", NB, 0, NULL, "PINSHM_MPI_COLL_AREA=64K"},
		 {.name = "plugin -np 3 PINSHM_MPI_COLL_STREAM=256", .np = 3, .plugin = true,
		  .env = {"PINSHM_MPI_COLL_STREAM=256"}}},
		{{"coll_nb", NB, 0, NULL, "PINSHM_MPI_COLL=0"}, {.name = "plugin -np 4", .np = 4, .plugin = true}},
		{{"coll_nb_first", B, 0, NULL, NULL}, {.name = "plugin -np 3", .np = 3, .plugin = true}},
		{{"coll_nb_first", B, 0, NULL, "NB_FIRST_COLL_OFF=1"}, {.name = "plugin -np 2", .np = 2, .plugin = true}},
		{{"coll_kept", 0, 0, NULL, NULL}, {.name = "plugin -np 2", .np = 2, .plugin = true}},
		{{"coll_kept", 0, 0, NULL, NULL},
		 {.name = "plugin -np 3 PINSHM_MPI_COLL_AREA=16K", .np = 3, .plugin = true,
		  .env = {"PINSHM_MPI_COLL_AREA=16K"}}},
		{{"coll_kept", 0, 0, NULL, NULL},
		 {.name = "plugin -np 2 PINSHM_MPI_COLL_KEEP=0", .np = 2, .plugin = true,
		  .env = {"PINSHM_MPI_COLL_KEEP=0"}}},
#ifdef HAVE_MPIFORT_TEST
		{{"f_coll_nb", NB, 0, NULL, NULL}, {.name = "plugin -np 4", .np = 4, .plugin = true}},
#endif
	};
	if ((size_t)_i < sizeof(runs) / sizeof(runs[0]))
		run_one(&runs[_i].pg, &runs[_i].cf);
}
END_TEST

/* A tool's library that defines MPI_Send (as a profiler's wrappers do)
 * preloaded before the plugin: that MPI_Send reaches the MPI library
 * without the plugin, so the plugin must carry nothing (else its receives
 * wait for ever), say so once for the node and name the library. */
START_TEST(test_wrapped)
{
	static const struct program wrapped[] = {
		{"p2p_basic", B, 0, NULL, NULL},
		{"p2p_modes", B | NB | SY | BU, 0, NULL, NULL},
		{"p2p_probe", B | PR, 0, NULL, NULL},
	};
	char warning[PATH_MAX + 40];
	snprintf(warning, sizeof(warning), "MPI_Send is defined by %s,", wrap_path());
	const struct config cf = {.name = "plugin -np 4, a tool's MPI_Send preloaded before it", .np = 4,
				  .plugin = true, .wrapped = true, .warning = warning};

	ck_assert_msg(access(wrap_path(), R_OK) == 0, "%s: %s (not built?)", wrap_path(), strerror(errno));
	run_one(&wrapped[_i], &cf);
}
END_TEST

/* Why a run of p2p_threads (MPI_THREAD_MULTIPLE) in @p cf failed, or NULL:
 * it must pass its checks; with the plugin, every rank says its statistics
 * were not kept, and the plugin warns once unless turned off. */
static const char *threads_failed(const struct config *cf, const struct run *r, char *why, size_t len)
{
	int warnings = occurrences(r->out, "pinshm-mpi: warning");
	int not_kept = occurrences(r->out, "not kept (MPI_THREAD_MULTIPLE");
	bool warned = strstr(r->out, "MPI_THREAD_MULTIPLE is not carried") != NULL;
	if (!WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0 || !strstr(r->out, "p2p_threads: ok"))
		snprintf(why, len, "the program failed (status %#x)", (unsigned)r->status);
	else if (!cf->plugin && (r->stat_lines || warnings))
		snprintf(why, len, "%d stats lines and %d warnings without the plugin", r->stat_lines, warnings);
	else if (cf->plugin && (not_kept != cf->np || r->stat_lines != cf->np))
		snprintf(why, len, "%d \"not kept\" lines of %d stats lines, want %d", not_kept, r->stat_lines,
			 cf->np);
	else if (cf->plugin && !cf->off && (warnings != 1 || !warned))
		snprintf(why, len, "%d warnings, want 1 saying MPI_THREAD_MULTIPLE is not carried", warnings);
	else if (cf->off && warnings)
		snprintf(why, len, "PINSHM_MPI=0, yet %d warnings", warnings);
	else
		return NULL;
	return why;
}

/* MPI_THREAD_MULTIPLE, every configuration: left to the library whole.
 * Its threads race through 1000 rounds with the plugin at 2 ranks (where
 * a race in the plugin's bookkeeping once crashed a program like it), and
 * through 300 in the other configurations, which check that the plugin
 * stays out of the way (the library's locking makes rounds slow on few
 * cores: 3000, the program's own count, took a minute on a loaded
 * machine). */
START_TEST(test_thread_multiple)
{
	static const struct program threads = {"p2p_threads", 0, 0, NULL, NULL};
	const struct config *cf = _i < NPLAIN ? &plain_configs[_i] : &plugin_configs[_i - NPLAIN];
	struct daemon d;
	struct run r;
	char why[512];
	const char *only = getenv("PINSHM_MPI_ONLY");

	if (only && only[0] && strcmp(only, threads.name) != 0)
		return;
	daemon_start(&d);
	program_arg = cf == &plugin_configs[0] ? "1000" : "300";
	run_mpi(&d, NULL, &threads, cf, &r);
	program_arg = NULL;
	const char *failed = threads_failed(cf, &r, why, sizeof(why));
	if (failed)
		dump(&threads, cf, &r);
	free(r.out);
	ck_assert_msg(!failed, "p2p_threads, %s: %s", cf->name, failed);
	daemon_stop_ok(&d);
}
END_TEST

/* ======================================================================== */
/* as an ordinary user                                                       */
/* ======================================================================== */

struct user_case {
	const char *program;
	struct config cf;
	rlim_t memlock; /* RLIMIT_MEMLOCK of the run, 0: the test's own (8 MiB on Debian) */
	bool xdg;       /* XDG_RUNTIME_DIR set, else the daemon's socket goes to /tmp/pinshm-UID */
	bool unpinned;  /* the limit is too small for any queue: each rank must say so */
	const char *system_conf; /* a system-mode pinshmd (root's) with this pinshmd.conf serves the ranks
				  * (PINSHM_SOCKET), else they start the user's own */
};

static const struct user_case user_cases[] = {
	{"p2p_basic", {.name = "as a user, -np 2, RLIMIT_MEMLOCK 64 KiB", .np = 2, .plugin = true}, 64 * 1024, false,
	 true, NULL},
	/* 256 KiB rings: 4 queues of them fit the 8 MiB that Debian gives a
	 * user, where the default 2 MiB ones would leave every queue unpinned. */
	{"p2p_modes",
	 {.name = "as a user, -np 4, XDG_RUNTIME_DIR, PINSHM_MPI_RING=256K", .np = 4, .plugin = true,
	  .env = {"PINSHM_MPI_RING=256K"}, .ring = 256 * 1024},
	 0, true, false, NULL},
	/* The plugin's channel names are the user's own (@UID.mpi...): they
	 * work where the administrator turned shared names off. */
	{"p2p_basic", {.name = "as a user, -np 2, a system daemon with shared_names = no", .np = 2, .plugin = true},
	 0, false, false, "[daemon]\nshared_names = no\npool_segments = 0\n"},
};
#define NUSER ((int)(sizeof(user_cases) / sizeof(user_cases[0])))

/* Real, effective, saved and filesystem uids and the state (R, S, Z...) of
 * process @p pid; false if it is gone. */
static bool proc_ids(pid_t pid, unsigned uid[4], char *state)
{
	char path[64], line[256];
	int got = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "State: %c", state) == 1)
			got |= 1;
		else if (sscanf(line, "Uid: %u %u %u %u", &uid[0], &uid[1], &uid[2], &uid[3]) == 4)
			got |= 2;
	}
	fclose(f);
	return got == 3;
}

/* Processes that have not exited (zombies aside): those of real uid @p uid,
 * or of any uid where it is (uid_t)-1, and where @p exe is not NULL only
 * those that run the file @p exe.  Their pids into @p pids (at most @p max).
 * @return how many there are. */
static int find_procs(uid_t uid, const char *exe, pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	int n = 0;

	ck_assert_msg(d != NULL, "/proc: %s", strerror(errno));
	for (struct dirent *e; (e = readdir(d));) {
		char *end, path[64], target[PATH_MAX], state;
		unsigned ids[4];
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || !proc_ids((pid_t)pid, ids, &state) || state == 'Z' ||
		    (uid != (uid_t)-1 && ids[0] != uid))
			continue;
		if (exe) {
			snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
			ssize_t len = readlink(path, target, sizeof(target) - 1);
			if (len < 0)
				continue;
			target[len] = 0;
			if (strcmp(target, exe) != 0)
				continue;
		}
		if (n < max)
			pids[n] = (pid_t)pid;
		n++;
	}
	closedir(d);
	return n;
}

/* The soft RLIMIT_MEMLOCK of process @p pid (/proc/PID/limits), in bytes or
 * RLIM_INFINITY; false if it cannot be read. */
static bool proc_memlock(pid_t pid, rlim_t *soft)
{
	char path[64], line[256], word[32];
	bool found = false;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "Max locked memory %31s", word) == 1) {
			*soft = strcmp(word, "unlimited") == 0 ? RLIM_INFINITY : (rlim_t)strtoull(word, NULL, 10);
			found = true;
		}
	fclose(f);
	return found;
}

/* Reap this process's children that exited (the daemons and helpers that
 * were orphaned to it: it is their subreaper). */
static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* Wait up to @p ms until process @p pid is gone (its status into @p status
 * where this process reaps it, else -1).  @return whether it is gone. */
static bool wait_gone(pid_t pid, int ms, int *status)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)ms;
	unsigned ids[4];
	char state;

	*status = -1;
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		if (w == pid)
			return true;
		if (w < 0 && (!proc_ids(pid, ids, &state) || state == 'Z'))
			return true; /* not a child of this process, and gone */
		if (tu_now_ms() >= deadline)
			return false;
		tu_sleep_ms(20);
	}
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Remove the folder @p dir and all it holds (not following links). */
static void remove_tree(const char *dir)
{
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Kill whatever runs as the user (SIGKILL), and remove its default socket
 * folder (/tmp/pinshm-UID, where it is the user's). */
static void user_kill_all(const struct mpi_user *u)
{
	pid_t pids[64];
	char dir[64];
	struct stat st;

	for (int round = 0; round < 50; round++) {
		int n = find_procs(u->uid, NULL, pids, 64);
		if (n == 0)
			break;
		for (int i = 0; i < n && i < 64; i++)
			kill(pids[i], SIGKILL);
		tu_sleep_ms(20);
		reap_orphans();
	}
	snprintf(dir, sizeof(dir), "/tmp/pinshm-%u", (unsigned)u->uid);
	if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == u->uid)
		remove_tree(dir);
}

/* Leave nothing: the user's processes, its socket folder, the copies. */
static void user_cleanup(struct mpi_user *u)
{
	user_kill_all(u);
	remove_tree(u->dir);
	close(u->lock);
}

/* Copy @p from into the folder @p dir (mode 0755).  @return 0 or -errno. */
static int copy_into(const char *dir, const char *from, char *to, size_t tolen)
{
	const char *base = strrchr(from, '/');
	char buf[1 << 16];
	ssize_t got = 0;
	int rc = 0;

	snprintf(to, tolen, "%s/%s", dir, base ? base + 1 : from);
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	if (out < 0) {
		rc = -errno;
		close(in);
		return rc;
	}
	while (rc == 0 && (got = read(in, buf, sizeof(buf))) != 0) {
		if (got < 0 && errno != EINTR)
			rc = -errno;
		for (ssize_t off = 0; rc == 0 && got > 0 && off < got;) {
			ssize_t put = write(out, buf + off, (size_t)(got - off));
			if (put < 0 && errno != EINTR)
				rc = -errno;
			off += put > 0 ? put : 0;
		}
	}
	if (rc == 0 && fchmod(out, 0755) != 0)
		rc = -errno;
	close(in);
	if (close(out) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* A folder of the user's under dir, mode 0700.  @return 0 or -errno. */
static int user_folder(const struct mpi_user *u, const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", u->dir, name);
	return mkdir(path, 0700) != 0 || chown(path, u->uid, u->gid) != 0 ? -errno : 0;
}

/* Make the user (useradd -M -N) where missing, wait for the other runs as
 * it, kill what an earlier run left, and copy the plugin, pinshmd, @p pg
 * and the libasan the ranks preload into a fresh folder of mode 0755. */
static void user_prepare(struct mpi_user *u, const struct user_case *uc, const struct program *pg)
{
	struct passwd *pw = getpwnam(MPI_USER);
	char tmpl[64], path[PATH_MAX], copy[PATH_MAX];
	const char *why = NULL;
	int rc = 0;

	memset(u, 0, sizeof(*u));
	if (!pw) {
		rc = system("useradd -M -N " MPI_USER " >/dev/null 2>&1");
		(void)rc;
		pw = getpwnam(MPI_USER);
	}
	ck_assert_msg(pw != NULL, "cannot make the user %s (useradd)", MPI_USER);
	ck_assert_uint_ne(pw->pw_uid, 0);
	u->uid = pw->pw_uid;
	u->gid = pw->pw_gid;
	u->memlock = uc->memlock;
	u->xdg = uc->xdg;
	u->lock = open(MPI_USER_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	ck_assert_msg(u->lock >= 0, "%s: %s", MPI_USER_LOCK, strerror(errno));
	while (flock(u->lock, LOCK_EX) != 0)
		ck_assert_int_eq(errno, EINTR);
	/* The daemon detaches from the rank that starts it: it becomes a child
	 * of this process, which reaps it. */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	user_kill_all(u);

	snprintf(tmpl, sizeof(tmpl), "/tmp/pinshm-mpi-user-XXXXXX");
	ck_assert_msg(mkdtemp(tmpl) != NULL, "mkdtemp: %s", strerror(errno));
	ck_assert_msg(realpath(tmpl, u->dir) != NULL && strlen(u->dir) < sizeof(u->dir) - 1, "realpath %s", tmpl);
	if (chmod(u->dir, 0755) != 0)
		why = "chmod 0755";
	else if ((rc = copy_into(u->dir, plugin_path(), u->plugin, sizeof(u->plugin))) != 0)
		why = plugin_path();
	else if ((rc = copy_into(u->dir, pinshmd_path(), u->pinshmd, sizeof(u->pinshmd))) != 0)
		why = pinshmd_path();
	else if (asan_lib()[0] && (rc = copy_into(u->dir, asan_lib(), u->asan, sizeof(u->asan))) != 0)
		why = asan_lib();
	else if (snprintf(path, sizeof(path), "%s/%s", env_or("PINSHM_MPI_TESTS", MPI_TESTS_DIR), pg->name) > 0 &&
		 (rc = copy_into(u->dir, path, copy, sizeof(copy))) != 0)
		why = pg->name;
	else if ((rc = user_folder(u, "home", u->home, sizeof(u->home))) != 0 ||
		 (rc = user_folder(u, "tmp", u->tmp, sizeof(u->tmp))) != 0 ||
		 (rc = user_folder(u, "run", u->run, sizeof(u->run))) != 0)
		why = "the user's folders";
	if (why) {
		int err = rc ? -rc : errno;
		user_cleanup(u);
		ck_abort_msg("%s: %s: %s", u->dir, why, strerror(err));
	}
}

/* In a child, as the user: the daemon that its clients reach at its default
 * socket is process @p pid, in user mode. */
static int user_status_child(void *arg, int pid)
{
	const struct mpi_user *u = arg;
	pinshm_client_t *c;
	pinshm_status_t st;

	user_enter(u);
	int rc = pinshm_connect(NULL, &c);
	if (rc != 0)
		tu_child_fail(2, "as %s: connect: %s (%s)", MPI_USER, pinshm_strerror(rc), pinshm_client_error(NULL));
	rc = pinshm_status(c, &st, NULL, NULL);
	if (rc != 0)
		tu_child_fail(3, "as %s: status: %s", MPI_USER, pinshm_strerror(rc));
	if ((int)st.pid != pid || !(st.flags & PINSHM_STATUS_USER_MODE))
		tu_child_fail(4, "as %s: the daemon at the default socket is %u (flags %#x), want %d in user mode",
			      MPI_USER, st.pid, st.flags, pid);
	pinshm_disconnect(c);
	return 0;
}

/* After a run that passed: the daemon that the plugin started runs the copy
 * as the user, with the run's RLIMIT_MEMLOCK, and answers the user at its
 * default socket; it stops on SIGTERM, and nothing of the user is left.
 * @return whether something failed, and why into @p why. */
static bool user_daemon_failed(const struct mpi_user *u, char *why, size_t len)
{
	pid_t pids[8];
	unsigned ids[4] = {0};
	char state, st[48];
	struct rlimit own;
	rlim_t memlock = 0, want;
	struct tu_procs ps;
	int status;

	reap_orphans();
	int n = find_procs((uid_t)-1, u->pinshmd, pids, 8);
	if (n != 1) {
		snprintf(why, len, "%d processes run the copy of pinshmd, want 1 (the daemon that the plugin started)", n);
		return true;
	}
	pid_t pid = pids[0];
	if (!proc_ids(pid, ids, &state) || ids[0] != u->uid || ids[1] != u->uid || ids[2] != u->uid ||
	    ids[3] != u->uid) {
		snprintf(why, len, "the daemon %d runs as uids %u %u %u %u, want %u (%s)", (int)pid, ids[0], ids[1],
			 ids[2], ids[3], (unsigned)u->uid, MPI_USER);
		return true;
	}
	ck_assert_int_eq(getrlimit(RLIMIT_MEMLOCK, &own), 0);
	want = u->memlock ? u->memlock : own.rlim_cur;
	if (!proc_memlock(pid, &memlock) || memlock != want) {
		snprintf(why, len, "the daemon %d has RLIMIT_MEMLOCK %llu, want %llu", (int)pid,
			 (unsigned long long)memlock, (unsigned long long)want);
		return true;
	}
	tu_procs_init(&ps);
	tu_spawn(&ps, "status", user_status_child, (void *)u, (int)pid);
	if (tu_wait_all(&ps, 30000) != 0 || !WIFEXITED(ps.status[0]) || WEXITSTATUS(ps.status[0]) != 0) {
		snprintf(why, len, "status as %s: %s (its stderr says why)", MPI_USER,
			 tu_status_str(ps.status[0], st, sizeof(st)));
		return true;
	}
	kill(pid, SIGTERM);
	if (!wait_gone(pid, DAEMON_STOP_MS, &status)) {
		snprintf(why, len, "the daemon %d did not stop on SIGTERM", (int)pid);
		return true;
	}
	if (status != -1 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
		snprintf(why, len, "the daemon %d stopped with %s on SIGTERM", (int)pid,
			 tu_status_str(status, st, sizeof(st)));
		return true;
	}
	uint64_t deadline = tu_now_ms() + 5000;
	while ((n = find_procs(u->uid, NULL, pids, 8)) != 0 && tu_now_ms() < deadline) {
		tu_sleep_ms(50);
		reap_orphans();
	}
	if (n) {
		snprintf(why, len, "%d processes of %s left after the run (pid %d)", n, MPI_USER, (int)pids[0]);
		return true;
	}
	return false;
}

/* A program through the plugin as MPI users run it: as an ordinary user,
 * nobody's daemon running, the plugin starts one (root only). */
START_TEST(test_user)
{
	const struct user_case *uc = &user_cases[_i];
	const struct program *pg = NULL;
	const char *only = getenv("PINSHM_MPI_ONLY");
	struct mpi_user u;
	struct run r;
	char why[512];

	for (int i = 0; i < NPROGRAMS && !pg; i++)
		if (strcmp(programs[i].name, uc->program) == 0)
			pg = &programs[i];
	ck_assert_msg(pg != NULL, "%s is not a program of this file", uc->program);
	if (only && only[0] && strcmp(only, pg->name) != 0)
		return;
	/* Nobody's daemon: not even a system one that the machine runs (the
	 * plugin would use it).  Where no mount namespace can be made, there
	 * must be none to hide. */
	int hidden = tu_hide_system_daemon();
	ck_assert_msg(hidden == 0 || !accepts(PROTO_SYSTEM_SOCKET),
		      "a system daemon serves %s and no mount namespace can hide it (%s): this case needs none",
		      PROTO_SYSTEM_SOCKET, strerror(-hidden));
	user_prepare(&u, uc, pg);
	struct daemon sd = {0};
	if (uc->system_conf) {
		struct daemon_opts o = {.system_mode = true, .config = true};
		daemon_prepare(&sd, &o);
		FILE *f = fopen(sd.conf, "w");
		ck_assert_msg(f && fputs(uc->system_conf, f) >= 0 && fclose(f) == 0, "%s: %s", sd.conf, strerror(errno));
		daemon_spawn(&sd, &o);
		daemon_wait_ready(&sd);
		u.sock = sd.sock;
	}
	run_mpi(NULL, &u, pg, &uc->cf, &r);
	bool failed = run_failed(pg, &uc->cf, &r, why, sizeof(why));
	if (!failed && uc->unpinned && r.queue_pinned) {
		snprintf(why, sizeof(why), "ranks %#llx say their queue is locked in RAM beyond RLIMIT_MEMLOCK",
			 r.queue_pinned);
		failed = true;
	}
	if (failed)
		dump(pg, &uc->cf, &r);
	free(r.out);
	if (!failed && !uc->system_conf)
		failed = user_daemon_failed(&u, why, sizeof(why));
	user_cleanup(&u);
	if (uc->system_conf)
		daemon_stop_ok(&sd);
	ck_assert_msg(!failed, "%s, %s: %s", pg->name, uc->cf.name, why);
}
END_TEST

/* The checks of the stats themselves, on made-up outputs: each must fail. */
START_TEST(test_stats_checks)
{
	static const struct config one = {.name = "one node", .np = 2, .plugin = true},
				   two = {.name = "two nodes", .np = 4, .plugin = true, .nodes = 2},
				   off = {.name = "off", .np = 2, .plugin = true, .off = true},
				   nodaemon = {.name = "no daemon", .np = 2, .plugin = true, .fallback = true};
	const struct program *basic = &programs[0], *comms = &programs[6];
	struct run r;
	char why[512];

	ck_assert_str_eq(comms->name, "p2p_comms");
	memset(&r, 0, sizeof(r));
	r.out = "";
	for (int k = 0; k < NFAMILY; k++)
		r.fam[k].ranks = 3;
	r.fam[F_BLOCKING].pinshm_msgs = 10;
	r.fam[F_BLOCKING].pinshm_bytes = 100;
	r.queue_pinned = 1;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why))); /* rank 1's queue line missing */
	ck_assert(strstr(why, "queue") != NULL);
	r.queue_unpinned = 2;
	ck_assert_msg(!run_failed(basic, &one, &r, why, sizeof(why)), "a good run failed: %s", why);
	r.ring_other = 2;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "ring") != NULL);
	r.ring_other = 0;
	r.copy_other = 1;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "copy") != NULL);
	r.copy_other = 0;
	/* p2p_large's messages cross: copied once (or the kernel refused it,
	 * where a child could not either), unless PINSHM_MPI_CMA=0 streams
	 * them all. */
	static const struct config streamed = {.name = "streamed", .np = 2, .plugin = true,
					       .env = {"PINSHM_MPI_CMA=0"}};
	const struct program *large = &programs[8];
	ck_assert_str_eq(large->name, "p2p_large");
	r.fam[F_NONBLOCKING].pinshm_msgs = r.fam[F_NONBLOCKING].pinshm_bytes = 1;
	r.copied_once = 0;
	ck_assert(run_failed(large, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "copied once") != NULL);
	ck_assert_msg(!run_failed(large, &streamed, &r, why, sizeof(why)), "a good run failed: %s", why);
	r.copied_once = 3;
	ck_assert_msg(!run_failed(large, &one, &r, why, sizeof(why)), "a good run failed: %s", why);
	ck_assert(run_failed(large, &streamed, &r, why, sizeof(why)));
	r.copied_once = 0;
	r.copy_refused = 1;
	ck_assert(!sibling_readable() ? !run_failed(large, &one, &r, why, sizeof(why))
				      : run_failed(large, &one, &r, why, sizeof(why)));
	r.copy_refused = 0;
	/* p2p_crossing copies exactly its crossing messages (and its one-way
	 * ones where they are copied from their size). */
	const struct program *crossing = &programs[10];
	ck_assert_str_eq(crossing->name, "p2p_crossing");
	ck_assert_uint_eq(crossing_copies(&streamed), 0);
	ck_assert_uint_eq(crossing_copies(&two), copy_once_from(&two) ? 56 : 48);
	r.copied_once = crossing_copies(&one);
	ck_assert_msg(!run_failed(crossing, &one, &r, why, sizeof(why)), "a good run failed: %s", why);
	r.copied_once++;
	ck_assert(run_failed(crossing, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "crossing") != NULL);
	r.copied_once = 0;
	r.fam[F_NONBLOCKING].pinshm_msgs = r.fam[F_NONBLOCKING].pinshm_bytes = 0;
	ck_assert(run_failed(basic, &plain_configs[0], &(struct run){.out = "", .stat_lines = 1}, why, sizeof(why)));
	r.fam[F_PROBE].mpi_msgs = 1;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "probe") != NULL);
	r.fam[F_PROBE].mpi_msgs = 0;
	r.fam[F_BLOCKING].pinshm_msgs = 0;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	r.fam[F_BLOCKING].pinshm_msgs = 10;
	r.fam[F_BUFFERED].ranks = 1;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	r.fam[F_BUFFERED].ranks = 3;
	r.out = "x\npinshm-mpi: warning: no daemon\n";
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	r.out = "";
	r.status = 124 << 8;
	ck_assert(run_failed(basic, &one, &r, why, sizeof(why)));
	ck_assert(strstr(why, "hang") != NULL);
	r.status = 0;
	/* p2p_comms: synchronous and probe must go to the MPI library. */
	r.fam[F_NONBLOCKING].pinshm_msgs = r.fam[F_PERSISTENT].pinshm_msgs = 1;
	r.fam[F_NONBLOCKING].pinshm_bytes = r.fam[F_PERSISTENT].pinshm_bytes = 1;
	ck_assert(run_failed(comms, &one, &r, why, sizeof(why)));
	r.fam[F_SYNCHRONOUS].mpi_msgs = r.fam[F_PROBE].mpi_msgs = 2;
	ck_assert_msg(!run_failed(comms, &one, &r, why, sizeof(why)), "%s", why);
	/* Two pretend nodes at 4 ranks: something must go to the MPI library. */
	for (int k = 0; k < NFAMILY; k++) {
		r.fam[k].ranks = 15;
		r.fam[k].mpi_msgs = 0;
	}
	r.queue_pinned = 15;
	r.queue_unpinned = 0;
	ck_assert(run_failed(basic, &two, &r, why, sizeof(why)));
	r.fam[F_BLOCKING].mpi_msgs = 4;
	ck_assert_msg(!run_failed(basic, &two, &r, why, sizeof(why)), "%s", why);
	/* Turned off: no stats is fine, a message through pinshm is not. */
	ck_assert(!run_failed(basic, &off, &(struct run){.out = ""}, why, sizeof(why)));
	ck_assert(run_failed(basic, &off, &r, why, sizeof(why)));
	ck_assert(run_failed(basic, &off, &(struct run){.out = "", .queue_pinned = 1}, why, sizeof(why)));
	/* Without a daemon: exactly one warning, and the traffic through MPI. */
	struct run fb = {.out = "pinshm-mpi: warning: rank 0: cannot reach pinshmd\n"};
	fb.fam[F_BLOCKING].mpi_msgs = 5;
	ck_assert_msg(!run_failed(basic, &nodaemon, &fb, why, sizeof(why)), "%s", why);
	fb.out = "";
	ck_assert(run_failed(basic, &nodaemon, &fb, why, sizeof(why)));
	fb.out = "pinshm-mpi: warning: a\npinshm-mpi: warning: b\n";
	ck_assert(run_failed(basic, &nodaemon, &fb, why, sizeof(why)));
	fb.out = "pinshm-mpi: warning: a\n";
	fb.fam[F_BLOCKING].pinshm_msgs = 1;
	ck_assert(run_failed(basic, &nodaemon, &fb, why, sizeof(why)));
	/* Every program is held to its stats, Fortran ones too: a family
	 * that went to the MPI library on one node fails it. */
	for (int i = 0; i < NPROGRAMS; i++) {
		/* As p2p_crossing copies (p2p_large: some): no other looks. */
		struct run pr = {.out = "", .queue_pinned = 3, .copied_once = crossing_copies(&one)};
		for (int k = 0; k < NFAMILY; k++) {
			pr.fam[k].ranks = 3;
			pr.fam[k].pinshm_msgs = pr.fam[k].pinshm_bytes = 1;
			pr.fam[k].mpi_msgs = (programs[i].passes >> k) & 1;
		}
		bool coll_off = programs[i].env && !strcmp(programs[i].env, "PINSHM_MPI_COLL=0");
		pr.coll_ranks = 3;
		for (int k = 0; k < NCOLL; k++) {
			pr.coll_pinshm[k] = !coll_off && (colls_of(&programs[i]) >> k & 1);
			pr.coll_mpi[k] = coll_off;
		}
		ck_assert_msg(!run_failed(&programs[i], &one, &pr, why, sizeof(why)), "%s: %s", programs[i].name, why);
		if (colls_of(&programs[i])) {
			/* A collective down the other path, or a rank without its lines, fails it. */
			struct run bad = pr;
			bad.coll_pinshm[3] = coll_off;
			bad.coll_mpi[3] = !coll_off;
			ck_assert_msg(run_failed(&programs[i], &one, &bad, why, sizeof(why)), "%s: passed", programs[i].name);
			bad = pr;
			bad.coll_ranks = 1;
			ck_assert_msg(run_failed(&programs[i], &one, &bad, why, sizeof(why)), "%s: passed", programs[i].name);
		}
		int k = __builtin_ctz(programs[i].uses);
		pr.fam[k].pinshm_msgs = 0;
		pr.fam[k].mpi_msgs = 1;
		ck_assert_msg(run_failed(&programs[i], &one, &pr, why, sizeof(why)), "%s passed with %s through MPI",
			      programs[i].name, family_name[k]);
	}
	/* coll_hier on two pretend nodes: each call carried, and exactly its
	 * non-commutative calls on the interleaved communicator passed on. */
	static const struct program hier = {"coll_hier", B, 0, NULL, NULL};
	struct run h;
	memset(&h, 0, sizeof(h));
	h.coll_ranks = 0xf;
	for (int k = 0; k < NCOLL; k++)
		h.coll_pinshm[k] = COLL_HIER >> k & 1 ? 40 : 0;
	for (int k = 0; k < NCOLL; k++)
		h.coll_mpi[k] = 4 * hier_mpi_calls(k, 4);
	ck_assert_msg(!coll_failed(&hier, &two, &h, false, why, sizeof(why)), "a good hierarchical run failed: %s", why);
	h.coll_mpi[3] = 5; /* one Allreduce more went to the library */
	ck_assert(coll_failed(&hier, &two, &h, false, why, sizeof(why)));
	h.coll_mpi[3] = 4;
	h.coll_mpi[14] = 0; /* the Scans on the interleaved split carried */
	ck_assert(coll_failed(&hier, &two, &h, false, why, sizeof(why)));
	h.coll_mpi[14] = 24;
	h.coll_pinshm[1] = 0; /* Bcast not carried */
	ck_assert(coll_failed(&hier, &two, &h, false, why, sizeof(why)));
}
END_TEST

/* Which runs this test makes. */
struct scope {
	bool plugin;    /* the plugin was built: the runs with it */
	bool user;      /* root: the runs as an ordinary user */
	bool reference; /* the runs without the plugin (plain configurations) */
	bool quick;     /* every program and case once, in its first configuration only */
};

/* The configurations of the loops over every configuration (plain ones
 * first, then the plugin's): the first and one past the last. */
static void config_range(const struct scope *sc, int *first, int *last)
{
	*first = sc->reference ? 0 : NPLAIN;
	*last = sc->plugin ? NPLAIN + NPLUGIN : NPLAIN;
	if (sc->quick)
		*last = *first + 1;
}

static Suite *mpi_suite(const struct scope *sc)
{
	Suite *s = suite_create("mpi");
	TCase *tc;
	int first, last, quick = sc->quick;

	config_range(sc, &first, &last);
	tc = tcase_create("stats");
	tcase_add_test(tc, test_stats_checks);
	suite_add_tcase(s, tc);

	if (sc->reference) {
		tc = tcase_create("plain");
		tcase_add_loop_test(tc, test_plain, 0, NPROGRAMS * (quick ? 1 : NPLAIN));
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);
	}

	if (sc->plugin) {
		tc = tcase_create("plugin");
		tcase_add_loop_test(tc, test_plugin, 0, NPROGRAMS * (quick ? 1 : NPLUGIN));
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);

		if (!quick) {
			tc = tcase_create("rings");
			tcase_add_loop_test(tc, test_rings, 0, NRING_PROGRAMS * NRING_CONFIGS);
			tcase_add_test(tc, test_rings_differ);
			tcase_set_timeout(tc, 200);
			suite_add_tcase(s, tc);
		}

		tc = tcase_create("coll");
		tcase_add_loop_test(tc, test_coll_ranks, 0, quick ? 1 : 3 * NCOLL_CONFIGS);
		tcase_add_loop_test(tc, test_coll_hier, 0, quick ? 1 : NHIER_CONFIGS);
		tcase_add_test(tc, test_coll_commfree);
		tcase_add_test(tc, test_coll_no_area);
		tcase_add_loop_test(tc, test_coll_a2a_hier, 0, quick ? 1 : NHIER_CONFIGS - 1);
		tcase_add_loop_test(tc, test_coll_nb_hier, 0, quick ? 1 : NHIER_CONFIGS - 1);
		tcase_add_loop_test(tc, test_coll_mismatch, 0, quick ? 1 : 2);
		tcase_add_loop_test(tc, test_coll_truncate, 0, quick ? 1 : 3);
		tcase_add_loop_test(tc, test_coll_dead_hier, 0, quick ? 1 : NDEAD_RUNS);
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);

		tc = tcase_create("wrapped");
		tcase_add_loop_test(tc, test_wrapped, 0, quick ? 1 : 3);
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);

		tc = tcase_create("coll_nb"); /* quick: the programs of its own (coll_nb runs in "plugin") */
		tcase_add_loop_test(tc, test_coll_nb, quick ? 2 : 0, 8);
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);

		if (!quick) {
			tc = tcase_create("many");
			tcase_add_loop_test(tc, test_many_ranks, 0, 3);
			tcase_set_timeout(tc, 200);
			suite_add_tcase(s, tc);
		}
	}

	tc = tcase_create("random");
	for (int k = 0; k < (quick ? 1 : NSEEDS); k++)
		tcase_add_loop_test(tc, test_random, k * (NPLAIN + NPLUGIN) + first, k * (NPLAIN + NPLUGIN) + last);
	tcase_set_timeout(tc, 200);
	suite_add_tcase(s, tc);

	if (sc->user) {
		tc = tcase_create("user");
		tcase_add_loop_test(tc, test_user, 0, quick ? 1 : NUSER);
		tcase_set_timeout(tc, 200);
		suite_add_tcase(s, tc);
	}

	tc = tcase_create("threads");
	tcase_add_loop_test(tc, test_thread_multiple, first, last);
	tcase_set_timeout(tc, 200);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *mpirun = getenv("MPIRUN");

	if (!mpirun || !mpirun[0]) {
		printf("check_mpi: SKIP: MPIRUN is empty (configure found no mpirun)\n");
		return 77;
	}
	const char *depth = env_or("PINSHM_MPI_CHECK", "");
	struct scope sc = {.plugin = access(plugin_path(), R_OK) == 0, .quick = !strcmp(depth, "quick")};

	if (depth[0] && !sc.quick && strcmp(depth, "full") != 0) {
		printf("check_mpi: PINSHM_MPI_CHECK=%s: want quick or full (or nothing)\n", depth);
		return EXIT_FAILURE;
	}

	if (!sc.plugin)
		printf("check_mpi: the plugin %s is missing: only the runs without it\n", plugin_path());
	if (asan_lib()[0])
		printf("check_mpi: ASan build: the ranks preload %s first\n", asan_lib());
	sc.user = sc.plugin && geteuid() == 0;
	if (sc.plugin && !sc.user)
		printf("check_mpi: not root: the runs as an ordinary user are skipped (they make one)\n");
	/* The runs without the plugin check the programs against Open MPI
	 * alone; an ASan build's add nothing to the plain build's. */
	sc.reference = !sc.plugin || (!sc.quick && (!asan_lib()[0] || !strcmp(depth, "full")));
	if (sc.quick)
		printf("check_mpi: PINSHM_MPI_CHECK=quick: every program and case once, in its first configuration\n");
	else if (!sc.reference)
		printf("check_mpi: ASan build: no runs without the plugin (the plain build makes them; "
		       "PINSHM_MPI_CHECK=full: here too)\n");

	if (tu_run_suite(mpi_suite(&sc), true) != 0)
		return EXIT_FAILURE;
	if (!sc.plugin) {
		printf("check_mpi: SKIP: the runs without the plugin passed; the plugin was not built\n");
		return 77;
	}
	return EXIT_SUCCESS;
}
