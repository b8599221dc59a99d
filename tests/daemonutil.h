/*
 * daemonutil.h - a real pinshmd for the Check tests that talk to one.
 *
 * The daemon just built ($PINSHMD, else daemon/pinshmd) runs in the
 * foreground (-f) on DIR/sock, DIR a fresh folder under /tmp; it dies with
 * the test process (PR_SET_PDEATHSIG).  Start it, wait until it accepts,
 * stop it with SIGTERM and check that it exits 0, then remove its folder.
 *
 * $PINSHMD_WRAPPER, when set, is a command line (words split on blanks, no
 * quoting) put before the daemon's, e.g. "valgrind --error-exitcode=99 -q":
 * the daemon then runs under it, its start and stop times are scaled by
 * DAEMON_WRAPPER_SLOWDOWN and a descriptor limit it is given grows by
 * DAEMON_WRAPPER_FDS.
 */
#ifndef PINSHM_DAEMONUTIL_H
#define PINSHM_DAEMONUTIL_H

#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <check.h>

#include "pinshm.h"
#include "testutil.h"

#define DAEMON_START_MS 15000 /* for a daemon to accept */
#define DAEMON_STOP_MS 10000  /* for it to exit after SIGTERM */
#define DAEMON_LOG_MS 10000   /* for a line to reach its log */
#define DAEMON_WRAPPER_SLOWDOWN 6 /* under $PINSHMD_WRAPPER (valgrind: slower) */
#define DAEMON_WRAPPER_FDS 8      /* descriptors the wrapper takes, added to daemon_opts.nofile */

struct daemon {
	pid_t pid;
	char dir[64];
	char sock[128];
	char conf[128]; /* DIR/pinshmd.conf, used where daemon_opts.config */
	char log[128];  /* DIR/pinshmd.log, its stderr where daemon_opts.log */
};

struct daemon_opts {
	const char *tmpl;  /* mkdtemp template of DIR, NULL: /tmp/pinshm-check-XXXXXX */
	bool system_mode;  /* no --user */
	bool as_user;      /* run as uid/gid instead of the test's user */
	uid_t uid;
	gid_t gid;
	rlim_t memlock;    /* RLIMIT_MEMLOCK to run with, 0: unchanged */
	rlim_t nofile;     /* RLIMIT_NOFILE to run with, 0: unchanged */
	bool no_socket;    /* no -s: the default path of the mode */
	bool config;       /* -c d->conf (else a system daemon gets -c DIR/empty.conf: all defaults,
			    * not the machine's /etc/pinshm/pinshmd.conf) */
	bool log;          /* stderr to d->log */
	bool verbose;      /* -vv */
	bool numa_env;     /* set PINSHMD_TEST_NUMA_NODES to numa_nodes (NULL: unset it) */
	bool own_pid_ns;   /* pid 1 of a PID namespace of its own (root only), as in a container: it
			    * sees the test's processes as pid 0 (SO_PEERCRED) */
	const char *numa_nodes;
	/* Descriptors handed over as systemd hands its descriptor store to the
	 * unit: from 3 on, with $LISTEN_FDS, $LISTEN_FDNAMES and $LISTEN_PID. */
	const int *listen_fds;
	const char *const *listen_names; /* their FDNAMEs */
	unsigned nlisten;
};

/* A user and group to run as. */
struct ident {
	uid_t uid;
	gid_t gid;
};

/** Run the program @p path with @p argv (NULL-terminated, argv[0] its name),
 *  its stdout into the file @p out and its stderr into @p err, as @p as
 *  (NULL: as this process); it dies with the test.  Fail the test if it
 *  cannot be run, does not exit in @p ms or is killed.
 *  @return its exit status (below 126). */
int prog_run(const char *path, const char *const *argv, const struct ident *as, const char *out, const char *err,
	     int ms);

/** The pinshmd to run: $PINSHMD, else daemon/pinshmd. */
const char *pinshmd_path(void);

/** $PINSHMD_WRAPPER, or NULL when unset or empty. */
const char *pinshmd_wrapper(void);

/** The value of field @p key (e.g. "VmLck:") of /proc/PID/status, in kB,
 * or -1 when the field is missing.  Fails the test if the file cannot be read. */
long proc_status_value_kb(pid_t pid, const char *key);
/* Whether the daemon @p pid sleeps in epoll without a timeout: its loop
 * found nothing due (no timer, no step of work in slices) and waits for a
 * peer.  Reads /proc/PID/syscall (the test's own daemon: ptrace access). */
bool daemon_waits_forever(pid_t pid);

/* VmLck of pinshmd @p pid, kB, once it is @p kb or less, or after
 * DAEMON_STOP_MS: a destroyed channel's segment is unlocked slice by slice,
 * a few turns of the daemon's loop after the channel is gone. */
long daemon_locked_kb_at_most(pid_t pid, long kb);

/** The descriptors process @p pid has open (entries of /proc/PID/fd); fails
 * the test if they cannot be read. */
unsigned proc_fd_count(pid_t pid);

/** How many of process @p pid's descriptors are pidfds. */
unsigned proc_pidfd_count(pid_t pid);

/** Entries of /dev/shm whose name says pinshm (0 if it cannot be read). */
unsigned shm_pinshm_entries(void);

/** In a child process: connect to @p sock and open @p name as @p role, or
 * fail the child (tu_child_fail). */
pinshm_channel_t *child_connect_open(const char *sock, const char *name, pinshm_role_t role, pinshm_client_t **c);

/** In a child process: connect to @p sock, open @p name as a producer and
 * send it the 5 bytes "first" (waiting @p ms at most), or fail the child. */
pinshm_channel_t *child_open_send_first(const char *sock, const char *name, int ms, pinshm_client_t **c);

/** In a child process: sleep until killed, @p ms at the most.
 * @return 1, an exit status that says it was not killed. */
int child_sleep_until_killed(int ms);

/** Whether the daemon of @p c lists a channel @p name: its entry into @p out,
 * and how many it lists into @p total (either may be NULL). */
bool list_find(pinshm_client_t *c, const char *name, pinshm_list_entry_t *out, size_t *total);

/* A daemon, a queue on it, and child processes of the test that use the
 * queue and report to the test (the tests of killed clients). */
struct scene {
	struct daemon d;
	pinshm_client_t *c;    /* it created the queue */
	struct tu_reporter rep; /* the children report here */
	struct tu_procs ps;
};

/** Start @p s: a daemon, the queue @p name made by connect_create_small(),
 * the reporter open, no children yet. */
void scene_start(struct scene *s, const char *name);

/** End @p s (its children waited for): close the reporter, disconnect,
 * daemon_stop_ok(). */
void scene_end(struct scene *s);

/** A client connected to @p d that created @p name, a queue of 64 KiB for one
 * producer and one consumer, mode 0600; or fail the test. */
pinshm_client_t *connect_create_small(const struct daemon *d, const char *name);

/** Kill the daemon with SIGKILL and reap it (d->pid 0 after: daemon_stop() only cleans up). */
void daemon_kill9(struct daemon *d);

/** Whether the daemon's log file (daemon_opts.log) holds @p what. */
bool daemon_log_has(const struct daemon *d, const char *what);

/** How many lines of the daemon's log file (daemon_opts.log) hold @p what. */
unsigned daemon_log_count(const struct daemon *d, const char *what);

/** Wait until @p n lines of the daemon's log file hold @p what,
 *  DAEMON_LOG_MS at most, or fail the test. */
void daemon_wait_log(const struct daemon *d, const char *what, unsigned n);

/** Wait until STAT of channel @p name has state bit @p bit (PINSHM_LIST_*)
 *  set (@p set) or clear, @p limit_ms at most, or fail the test. */
void wait_channel_state(pinshm_client_t *c, const char *name, uint32_t bit, bool set, unsigned limit_ms);

/** Fail the test if the daemon uses more than a tenth of a core over @p ms
 * (a loop that spins instead of waiting). */
void daemon_assert_idle(const struct daemon *d, unsigned ms, const char *while_what);

/** Whether something accepts on the socket @p path. */
bool accepts(const char *path);

/** The daemon's folder and paths, before it starts (a config to write there). */
void daemon_prepare(struct daemon *d, const struct daemon_opts *o);

/** Fork and exec pinshmd -f on @p d->sock, as @p o says.  Does not wait. */
void daemon_spawn(struct daemon *d, const struct daemon_opts *o);

/** Wait until the daemon accepts on d->sock, failing the test if it exits. */
void daemon_wait_ready(struct daemon *d);

/** daemon_prepare(), daemon_spawn(), daemon_wait_ready(). */
void daemon_start_opts(struct daemon *d, const struct daemon_opts *o);

/** Write d->conf whole from @p fmt (renamed into place: a reload never
 *  reads half of it). */
void daemon_write_config(const struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** daemon_prepare(), the config @p fmt (o->config must be set), daemon_spawn(),
 *  daemon_wait_ready(). */
void daemon_start_config(struct daemon *d, const struct daemon_opts *o, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** daemon_start_opts() with the defaults: pinshmd -f --user -s DIR/sock. */
void daemon_start(struct daemon *d);

/** Wait for the daemon to exit, up to @p ms. @return its wait status, or -1. */
int daemon_wait_exit(struct daemon *d, int ms);

/** Remove the daemon's folder and what it and the tests leave there. */
void daemon_cleanup_dir(struct daemon *d);

/** SIGTERM, and check that it exits 0 in time (SIGKILL otherwise; d->pid 0
 * after either way).  Its folder is kept: the test goes on with it. */
void daemon_term_ok(struct daemon *d);

/** daemon_term_ok(), then check that it removed its socket; then
 * daemon_cleanup_dir().  The daemon must run. */
void daemon_stop_ok(struct daemon *d);

/** As daemon_stop_ok(), but a daemon already waited for (pid 0) is only
 * cleaned up, and its socket is not looked at. */
void daemon_stop(struct daemon *d);

/* The ordinary user the tests run daemons and clients as. */
#define TEST_USER "pinshm-test-a"

/** TEST_USER, created if missing; false (and a note) when it cannot be (not root). */
bool daemon_test_user(uid_t *uid, gid_t *gid);

/** A client connected to @p d, or fail the test. */
pinshm_client_t *connect_ok(const struct daemon *d);

/** The wake-up descriptor of consumer @p cons of client @p c (the handle's
 *  own), or fail the test. */
int notify_fd(pinshm_client_t *c, pinshm_channel_t *cons);

/* Fail the test unless a call on client @p c returns @p want. */
#define CLIENT_RC(c, expr, want)                                                                              \
	do {                                                                                                  \
		int crc_ = (expr);                                                                            \
		int cwant_ = (want);                                                                          \
		ck_assert_msg(crc_ == cwant_, "%s: got %d (%s), want %d (%s); daemon says: %s", #expr, crc_,  \
			      pinshm_strerror(crc_), cwant_, pinshm_strerror(cwant_), pinshm_client_error(c)); \
	} while (0)

#endif
