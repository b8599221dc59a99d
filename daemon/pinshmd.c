/*
 * pinshmd.c - the pinshm daemon: main() is its lifecycle.
 *
 *   systemd's descriptors -> options -> log -> config -> signals -> (detach)
 *   -> descriptor limit -> socket -> accounts -> registry -> adopted
 *   channels -> loop -> ready -> serve
 *   -> teardown in reverse
 *
 * See pinshmd(8).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "account.h"
#include "adopt.h"
#include "config.h"
#include "fdstore.h"
#include "listen.h"
#include "log.h"
#include "loop.h"
#include "notify.h"
#include "numa.h"
#include "pool.h"
#include "protocol.h"
#include "registry.h"
#include "watch.h"

/* Descriptors wanted: channels, connections and their pidfds, the
 * consumers' eventfds, the pidfds of the processes watched for adopted
 * channels, and the pool's ready segments, with room to spare. */
#define WANTED_NOFILE                                                                                         \
	(REGISTRY_MAX_CHANNELS + 2 * LOOP_MAX_CONNECTIONS + REGISTRY_MAX_NOTIFY_FDS + REGISTRY_MAX_WATCH_PIDFDS + \
	 CONFIG_POOL_MAX_SIZES * CONFIG_POOL_MAX_SEGMENTS + 64)

#define MAX_EXIT_IDLE 86400u /* seconds */

struct options {
	bool foreground;
	bool user_mode;
	int verbose;
	unsigned exit_idle; /* seconds, 0: never */
	const char *socket_path; /* NULL: the config's, or the default of the mode */
	const char *config_path; /* NULL: CONFIG_SYSTEM_FILE if it exists in system mode, else none */
};

/* What a reload needs. */
struct daemon_config {
	char *path;          /* absolute (the daemon changes folder), NULL: no file */
	struct config *cfg;  /* in force */
	struct account *acct;
	struct pool *pool;
	struct dying **dying; /* where a reload's drained pool segments go (the registry's) */
	bool user_mode;
	const char *socket;  /* listened on */
};

/* Size the pool as @p cfg says: by default none in user mode, where
 * RLIMIT_MEMLOCK leaves little to lock. */
static void pool_apply(struct daemon_config *dc, const struct config *cfg)
{
	unsigned n = cfg->pool_segments_set || !dc->user_mode ? cfg->pool_segments : 0;

	if (pool_configure(dc->pool, cfg->pool_sizes, cfg->npool_sizes, n, dc->dying) != 0)
		log_err("pool: out of memory; no pool");
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: pinshmd [OPTION]...\n"
		"The pinshm daemon: creates, pins and hands out shared-memory channels.\n"
		"\n"
		"  -c, --config FILE  read the configuration FILE (default: %s in\n"
		"                     system mode if it exists, none in user mode)\n"
		"      --exit-idle SECONDS  exit once no client has been connected and no\n"
		"                     channel alive for SECONDS (a daemon started by a client)\n"
		"  -f, --foreground   stay in the foreground and log to stderr (default:\n"
		"                     detach and log to syslog)\n"
		"  -s, --socket PATH  listen on PATH (default: %s, or in user\n"
		"                     mode $XDG_RUNTIME_DIR/pinshm/socket or /tmp/pinshm-UID/socket)\n"
		"      --user         user mode: run as the invoking user, socket in its own folder;\n"
		"                     channels beyond RLIMIT_MEMLOCK are created unpinned\n"
		"  -v, --verbose      log more (twice: debug)\n"
		"      --version      print the versions and exit\n"
		"  -h, --help         print this help and exit\n"
		"SIGHUP reloads the configuration file; SIGTERM and SIGINT stop the daemon.\n",
		CONFIG_SYSTEM_FILE, PROTO_SYSTEM_SOCKET);
}

static void parse_options(int argc, char **argv, struct options *opt)
{
	enum { OPT_USER = 256, OPT_VERSION, OPT_EXIT_IDLE };
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"exit-idle", required_argument, NULL, OPT_EXIT_IDLE},
		{"foreground", no_argument, NULL, 'f'},
		{"socket", required_argument, NULL, 's'},
		{"user", no_argument, NULL, OPT_USER},
		{"verbose", no_argument, NULL, 'v'},
		{"version", no_argument, NULL, OPT_VERSION},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	*opt = (struct options){0};
	while ((c = getopt_long(argc, argv, "c:fs:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			opt->config_path = optarg;
			break;
		case 'f':
			opt->foreground = true;
			break;
		case 's':
			opt->socket_path = optarg;
			break;
		case OPT_USER:
			opt->user_mode = true;
			break;
		case OPT_EXIT_IDLE: {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v == 0 || v > MAX_EXIT_IDLE) {
				fprintf(stderr, "pinshmd: --exit-idle: '%s' is not a number of seconds 1..%u\n", optarg,
					MAX_EXIT_IDLE);
				exit(EXIT_FAILURE);
			}
			opt->exit_idle = (unsigned)v;
			break;
		}
		case 'v':
			opt->verbose++;
			break;
		case OPT_VERSION:
			printf("pinshmd %s (protocol %u, segment layout %u)\n", pinshm_version(),
			       PINSHM_PROTOCOL_VERSION, PINSHM_LAYOUT_VERSION);
			exit(EXIT_SUCCESS);
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		default:
			usage(stderr);
			exit(EXIT_FAILURE);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pinshmd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		exit(EXIT_FAILURE);
	}
}

/* SIGPIPE ignored (sends use MSG_NOSIGNAL anyway); the signals that the loop
 * reads from its signalfd blocked. */
static int setup_signals(void)
{
	sigset_t mask;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	return sigprocmask(SIG_BLOCK, &mask, NULL) == 0 ? 0 : -errno;
}

/*
 * Detach from the terminal: the parent waits until the daemon says it is
 * serving (one byte 0 on a pipe) and exits 0, or exits 1 when it fails
 * (its reason went to syslog and the terminal).
 * @return the pipe's write end, for daemon_ready().
 */
static int daemonize(void)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) != 0) {
		log_err("pipe: %s", strerror(errno));
		exit(EXIT_FAILURE);
	}
	pid_t pid = fork();
	if (pid < 0) {
		log_err("fork: %s", strerror(errno));
		exit(EXIT_FAILURE);
	}
	if (pid > 0) {
		char status = 1;
		close(p[1]);
		while (read(p[0], &status, 1) < 0 && errno == EINTR)
			;
		_exit(status == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
	}
	close(p[0]);
	if (setsid() < 0 || (pid = fork()) < 0) {
		log_err("setsid/fork: %s", strerror(errno));
		exit(EXIT_FAILURE);
	}
	if (pid > 0)
		_exit(EXIT_SUCCESS); /* the session leader goes; the daemon can never get a terminal */
	if (chdir("/") != 0)
		log_warn("chdir /: %s", strerror(errno));
	umask(022);
	return p[1];
}

/* Tell the waiting parent that we serve, and let go of the terminal. */
static void daemon_ready(int ready_fd)
{
	char ok = 0;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		if (null > STDERR_FILENO)
			close(null);
	}
	log_to_stderr_too(false);
	if (write(ready_fd, &ok, 1) != 1)
		log_warn("telling the parent that we are ready: %s", strerror(errno));
	close(ready_fd);
}

/* Room for a descriptor per channel and per connection; one warning when
 * the hard limit (the unit's LimitNOFILE, ulimit -n) leaves less. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= WANTED_NOFILE)
		return;
	rl.rlim_cur = rl.rlim_max < WANTED_NOFILE ? rl.rlim_max : WANTED_NOFILE;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
		log_warn("cannot raise the descriptor limit to %llu: %s", (unsigned long long)rl.rlim_cur,
			 strerror(errno));
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < WANTED_NOFILE)
		log_warn("descriptor limit %llu, below the %u this daemon wants (channels, connections and their "
			 "pidfds, eventfds, watches, the pool): past it connections are dropped and creates fail; "
			 "raise LimitNOFILE or ulimit -n",
			 (unsigned long long)rl.rlim_cur, (unsigned)WANTED_NOFILE);
}

/* "N MiB" or "unlimited", for the log. */
static const char *mib(uint64_t v, char *buf, size_t len)
{
	if (v == CONFIG_UNLIMITED)
		return "unlimited";
	snprintf(buf, len, "%llu MiB", (unsigned long long)(v >> 20));
	return buf;
}

static void log_config(const char *what, const struct config *cfg)
{
	char b1[32], b2[32], b3[32];

	log_notice("%s%s%s: pin budget %s, default user quota %s, max segment %s, %u [user] section%s%s", what,
		   cfg->path ? " " : "", cfg->path ? cfg->path : " (no configuration file)",
		   mib(cfg->budget, b1, sizeof(b1)), mib(cfg->user_default.quota, b2, sizeof(b2)),
		   mib(cfg->max_segment_size, b3, sizeof(b3)), cfg->nusers, cfg->nusers == 1 ? "" : "s",
		   cfg->access_set ? ", access lists" : "");
}

/*
 * The configuration file: -c FILE, else CONFIG_SYSTEM_FILE where it exists
 * in system mode, else none.  Its path is made absolute for reloads (a
 * detached daemon works in /).  @return 0 or -errno, logged.
 */
static int config_open(const struct options *opt, struct daemon_config *dc)
{
	const char *path = opt->config_path;
	char why[512];

	if (!path && !opt->user_mode && access(CONFIG_SYSTEM_FILE, F_OK) == 0)
		path = CONFIG_SYSTEM_FILE;
	if (path) {
		dc->path = realpath(path, NULL);
		if (!dc->path) {
			int err = errno;
			log_err("%s: %s", path, strerror(err));
			return -err;
		}
	}
	int rc = config_load(dc->path, &dc->cfg, why, sizeof(why));
	if (rc != 0) {
		log_err("%s", why);
		free(dc->path);
		dc->path = NULL;
	}
	return rc;
}

/* SIGHUP: read the file again; the new limits apply to the requests that
 * follow.  A file with an error changes nothing. */
static void config_reload(void *arg)
{
	struct daemon_config *dc = arg;
	struct config *next;
	char why[512];

	if (!dc->path) {
		log_notice("SIGHUP: no configuration file to reload");
		return;
	}
	if (notify_systemd("RELOADING=1") < 0)
		log_warn("SIGHUP: the service manager was not told of the reload");
	int rc = config_load(dc->path, &next, why, sizeof(why));
	if (rc != 0) {
		log_err("SIGHUP: %s: keeping the configuration in force", why);
	} else {
		if (next->socket && strcmp(next->socket, dc->socket) != 0)
			log_warn("SIGHUP: the socket stays %s until a restart", dc->socket);
		account_set_config(dc->acct, next);
		pool_apply(dc, next);
		config_free(dc->cfg);
		dc->cfg = next;
		log_config("SIGHUP: reloaded", next);
	}
	if (notify_systemd("READY=1") < 0)
		log_warn("SIGHUP: the service manager was not told that the reload is over");
}

int main(int argc, char **argv)
{
	struct options opt;
	struct listener ln;
	struct registry reg;
	struct account acct;
	struct loop loop;
	struct pool pool;
	struct adopt adopt;
	struct daemon_config dc = {.acct = &acct, .pool = &pool, .dying = &reg.dying};
	char why[640];
	int ready_fd = -1;
	int rc;

	adopt_take_listen_fds(&adopt); /* before anything opens a descriptor */
	parse_options(argc, argv, &opt);
	log_open(opt.foreground, opt.verbose);
	if (!opt.foreground)
		log_to_stderr_too(true); /* until ready: startup errors reach the terminal */
	if (config_open(&opt, &dc) != 0)
		return EXIT_FAILURE;
	dc.user_mode = opt.user_mode;
	if (numa_setup(why, sizeof(why)) != 0) {
		log_err("%s", why);
		config_free(dc.cfg);
		free(dc.path);
		return EXIT_FAILURE;
	}
	if (!opt.socket_path)
		opt.socket_path = dc.cfg->socket;
	if (!opt.foreground)
		ready_fd = daemonize();
	rc = setup_signals();
	if (rc != 0) {
		log_err("signals: %s", strerror(-rc));
		config_free(dc.cfg);
		free(dc.path);
		return EXIT_FAILURE;
	}
	raise_nofile();

	rc = listener_open(&ln, opt.socket_path, opt.user_mode, why, sizeof(why));
	if (rc != 0) {
		log_err("%s", why);
		config_free(dc.cfg);
		free(dc.path);
		return EXIT_FAILURE;
	}
	dc.socket = ln.path;
	account_init(&acct, dc.cfg);
	registry_init(&reg, &acct);
	watch_init(&reg);
	pool_init(&pool, &acct);
	pool_apply(&dc, dc.cfg);
	reg.pool = &pool;
	adopt_listen_fds(&adopt, &reg);
	rc = loop_init(&loop, ln.fd, &reg, &acct, opt.user_mode, config_reload, &dc);
	if (rc != 0) {
		log_err("event loop: %s", strerror(-rc));
		listener_close(&ln);
		config_free(dc.cfg);
		free(dc.path);
		return EXIT_FAILURE;
	}
	loop.exit_idle_ms = (uint64_t)opt.exit_idle * 1000u;
	loop.adopt = &adopt;
	log_notice("pinshmd %s listening on %s (%s mode, protocol %u, layout %u)", pinshm_version(), ln.path,
		   opt.user_mode ? "user" : "system", PINSHM_PROTOCOL_VERSION, PINSHM_LAYOUT_VERSION);
	log_config("configuration", dc.cfg);
	if (ready_fd >= 0)
		daemon_ready(ready_fd);
	rc = notify_systemd("READY=1");
	if (rc < 0)
		log_warn("cannot notify systemd ($NOTIFY_SOCKET): %s", strerror(-rc));

	rc = loop_run(&loop);

	fdstore_stop(); /* the removals not sent yet, before the manager is told */
	if (notify_systemd("STOPPING=1") < 0)
		log_warn("the service manager was not told that the daemon stops");
	loop_fini(&loop);
	adopt_fini(&adopt);
	watch_fini(&reg);
	registry_fini(&reg);
	pool_fini(&pool);
	account_fini(&acct);
	listener_close(&ln);
	config_free(dc.cfg);
	free(dc.path);
	log_notice("stopped");
	log_close();
	return rc == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
