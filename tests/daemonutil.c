/*
 * daemonutil.c - a real pinshmd for the Check tests that talk to one.
 */
#include "daemonutil.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

const char *pinshmd_path(void)
{
	const char *p = getenv("PINSHMD");

	return p && p[0] ? p : "daemon/pinshmd";
}

const char *pinshmd_wrapper(void)
{
	const char *w = getenv("PINSHMD_WRAPPER");

	return w && w[strspn(w, " \t")] ? w : NULL;
}

/* DAEMON_START_MS or DAEMON_STOP_MS, longer under a wrapper. */
static uint64_t daemon_time_ms(unsigned ms)
{
	return (uint64_t)ms * (pinshmd_wrapper() ? DAEMON_WRAPPER_SLOWDOWN : 1);
}

unsigned shm_pinshm_entries(void)
{
	DIR *d = opendir("/dev/shm");
	unsigned n = 0;

	if (!d)
		return 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strstr(e->d_name, "pinshm") != NULL;
	closedir(d);
	return n;
}

long proc_status_value_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	long v = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0)
			v = strtol(line + strlen(key), NULL, 10);
	fclose(f);
	return v;
}

bool daemon_waits_forever(pid_t pid)
{
	char path[64], line[256];
	long nr;
	unsigned long a[4];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	bool got = fgets(line, sizeof(line), f) != NULL;
	fclose(f);
	if (!got || sscanf(line, "%ld %lx %lx %lx %lx", &nr, &a[0], &a[1], &a[2], &a[3]) != 5)
		return false; /* running */
#ifdef SYS_epoll_wait
	if (nr == SYS_epoll_wait)
		return (int)(unsigned)a[3] == -1;
#endif
	return nr == SYS_epoll_pwait && (int)(unsigned)a[3] == -1;
}

long daemon_locked_kb_at_most(pid_t pid, long kb)
{
	uint64_t deadline = tu_now_ms() + daemon_time_ms(DAEMON_STOP_MS);
	long v;

	while ((v = proc_status_value_kb(pid, "VmLck:")) > kb && tu_now_ms() < deadline)
		tu_sleep_ms(10);
	return v;
}

/* The descriptors of process @p pid, or those of them whose link reads
 * @p target (NULL: all); fails the test if they cannot be read. */
static unsigned proc_fds_matching(pid_t pid, const char *target)
{
	char path[64], link[64 + sizeof(((struct dirent *)0)->d_name)], got[64];
	unsigned n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	ck_assert_msg(d != NULL, "%s: %s", path, strerror(errno));
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		if (!target) {
			n++;
			continue;
		}
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t len = readlink(link, got, sizeof(got) - 1);
		if (len <= 0)
			continue; /* closed meanwhile */
		got[len] = '\0';
		n += strcmp(got, target) == 0;
	}
	closedir(d);
	return n;
}

unsigned proc_fd_count(pid_t pid)
{
	return proc_fds_matching(pid, NULL);
}

unsigned proc_pidfd_count(pid_t pid)
{
	return proc_fds_matching(pid, "anon_inode:[pidfd]");
}

bool accepts(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	bool ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* In the daemon's child: o->listen_fds at 3, 4, ... and the $LISTEN_*
 * variables, as systemd starts a unit.  @return 0, or -1 (exit then). */
static int pass_listen_fds(const struct daemon_opts *o)
{
	int high[64];
	char names[64 * 257] = "", num[32];

	if (o->nlisten > 64)
		return -1;
	/* Out of the way first: 3, 4, ... may be one of them. */
	for (unsigned i = 0; i < o->nlisten; i++)
		if ((high[i] = fcntl(o->listen_fds[i], F_DUPFD_CLOEXEC, 100)) < 0)
			return -1;
	for (unsigned i = 0; i < o->nlisten; i++) {
		if (dup2(high[i], 3 + (int)i) < 0 || strlen(names) + strlen(o->listen_names[i]) + 2 > sizeof(names))
			return -1;
		strcat(names, i ? ":" : "");
		strcat(names, o->listen_names[i]);
	}
	snprintf(num, sizeof(num), "%d", (int)getpid()); /* a wrapper such as valgrind keeps the pid */
	setenv("LISTEN_PID", num, 1);
	snprintf(num, sizeof(num), "%u", o->nlisten);
	setenv("LISTEN_FDS", num, 1);
	setenv("LISTEN_FDNAMES", names, 1);
	return 0;
}

/* A system daemon without daemon_opts.config reads an empty file of its
 * folder, not the machine's /etc/pinshm/pinshmd.conf: every default
 * applies, whatever the machine's configuration.  @return its path. */
static const char *empty_config(const struct daemon *d, const struct daemon_opts *o, char *path, size_t len)
{
	snprintf(path, len, "%s/empty.conf", d->dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	close(fd);
	if (o->as_user)
		ck_assert_int_eq(chown(path, o->uid, o->gid), 0);
	return path;
}

void daemon_spawn(struct daemon *d, const struct daemon_opts *o)
{
	pid_t parent = getpid();
	char empty[sizeof(d->dir) + 16];
	const char *config = o->config ? d->conf : o->system_mode ? empty_config(d, o, empty, sizeof(empty)) : NULL;

	int own_ns = -1;

	fflush(stdout);
	fflush(stderr);
	if (o->own_pid_ns) {
		/* The child goes into a new PID namespace; this process's next
		 * children come back to its own. */
		own_ns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
		ck_assert_msg(own_ns >= 0 && unshare(CLONE_NEWPID) == 0, "a PID namespace: %s", strerror(errno));
	}
	d->pid = fork();
	ck_assert_msg(d->pid >= 0, "fork: %s", strerror(errno));
	if (d->pid > 0) {
		if (own_ns >= 0) {
			ck_assert_msg(setns(own_ns, CLONE_NEWPID) == 0, "setns: %s", strerror(errno));
			close(own_ns);
		}
		return;
	}
	if (o->memlock) {
		struct rlimit rl = {.rlim_cur = o->memlock, .rlim_max = o->memlock};
		if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
			_exit(126);
	}
	if (o->nofile) {
		/* A wrapper (valgrind) keeps a few descriptors of the daemon's
		 * process for itself: give them back. */
		rlim_t n = o->nofile + (pinshmd_wrapper() ? DAEMON_WRAPPER_FDS : 0);
		struct rlimit rl = {.rlim_cur = n, .rlim_max = n};
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(126);
	}
	if (o->log) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(126);
	}
	if (o->numa_env) {
		if (o->numa_nodes)
			setenv("PINSHMD_TEST_NUMA_NODES", o->numa_nodes, 1);
		else
			unsetenv("PINSHMD_TEST_NUMA_NODES");
	}
	if (o->as_user && (setgroups(0, NULL) != 0 || setgid(o->gid) != 0 || setuid(o->uid) != 0))
		_exit(126);
	/* After the credentials changed, which clears it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (o->own_pid_ns ? 0 : parent)) /* its parent is in no namespace it sees */
		_exit(126);
	if (o->nlisten && pass_listen_fds(o) != 0)
		_exit(126);
	/* The wrapper's words, then the daemon's (at most 10). */
	char wrapper[512];
	const char *argv[64 + 10];
	int n = 0;
	const char *w = pinshmd_wrapper();
	if (w) {
		snprintf(wrapper, sizeof(wrapper), "%s", w);
		for (char *save = NULL, *word = strtok_r(wrapper, " \t", &save); word && n < 64;
		     word = strtok_r(NULL, " \t", &save))
			argv[n++] = word;
		argv[n++] = pinshmd_path();
	} else {
		argv[n++] = "pinshmd";
	}
	argv[n++] = "-f";
	if (o->verbose)
		argv[n++] = "-vv";
	if (config) {
		argv[n++] = "-c";
		argv[n++] = config;
	}
	if (!o->system_mode)
		argv[n++] = "--user";
	if (!o->no_socket) {
		argv[n++] = "-s";
		argv[n++] = d->sock;
	}
	argv[n] = NULL;
	if (w)
		execvp(argv[0], (char *const *)argv);
	else
		execv(pinshmd_path(), (char *const *)argv);
	fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

void daemon_wait_ready(struct daemon *d)
{
	uint64_t deadline = tu_now_ms() + daemon_time_ms(DAEMON_START_MS);

	while (!accepts(d->sock)) {
		int st;
		pid_t r = waitpid(d->pid, &st, WNOHANG);
		char buf[32];
		if (r == d->pid) {
			d->pid = 0;
			ck_abort_msg("pinshmd exited at start: %s", tu_status_str(st, buf, sizeof(buf)));
		}
		ck_assert_msg(tu_now_ms() < deadline, "pinshmd does not accept on %s", d->sock);
		tu_sleep_ms(10);
	}
}

void daemon_prepare(struct daemon *d, const struct daemon_opts *o)
{
	snprintf(d->dir, sizeof(d->dir), "%s", o->tmpl ? o->tmpl : "/tmp/pinshm-check-XXXXXX");
	ck_assert_msg(mkdtemp(d->dir) != NULL, "mkdtemp: %s", strerror(errno));
	if (o->as_user)
		ck_assert_int_eq(chown(d->dir, o->uid, o->gid), 0);
	if (o->system_mode)
		ck_assert_int_eq(chmod(d->dir, 0755), 0); /* others reach the 0666 socket */
	snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%s/pinshmd.conf", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/pinshmd.log", d->dir);
}

void daemon_start_opts(struct daemon *d, const struct daemon_opts *o)
{
	daemon_prepare(d, o);
	daemon_spawn(d, o);
	daemon_wait_ready(d);
}

void daemon_start(struct daemon *d)
{
	struct daemon_opts o = {0};

	daemon_start_opts(d, &o);
}

int daemon_wait_exit(struct daemon *d, int ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)ms;
	int st;

	while (tu_now_ms() < deadline) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return st;
		}
		tu_sleep_ms(5);
	}
	return -1;
}

void daemon_cleanup_dir(struct daemon *d)
{
	/* d->conf and d->log may be unset: rebuilt from d->dir. */
	static const char *const files[] = {"sock", "sock.lock", "pinshmd.conf", "pinshmd.log", "out", "err"};
	char path[192];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", d->dir, files[i]);
		unlink(path);
	}
	rmdir(d->dir);
}

void daemon_term_ok(struct daemon *d)
{
	char buf[32];

	kill(d->pid, SIGTERM);
	int st = daemon_wait_exit(d, (int)daemon_time_ms(DAEMON_STOP_MS));
	if (st == -1) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, &st, 0);
		d->pid = 0;
		ck_abort_msg("pinshmd did not stop on SIGTERM");
	}
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinshmd: %s", tu_status_str(st, buf, sizeof(buf)));
}

void daemon_stop_ok(struct daemon *d)
{
	struct stat sb;

	ck_assert_int_gt(d->pid, 0);
	daemon_term_ok(d);
	ck_assert_msg(lstat(d->sock, &sb) != 0, "pinshmd left its socket behind");
	daemon_cleanup_dir(d);
}

void daemon_kill9(struct daemon *d)
{
	ck_assert_int_eq(kill(d->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(d->pid, NULL, 0), d->pid);
	d->pid = 0;
}

void daemon_stop(struct daemon *d)
{
	if (d->pid > 0)
		daemon_term_ok(d);
	daemon_cleanup_dir(d);
}

pinshm_client_t *connect_ok(const struct daemon *d)
{
	pinshm_client_t *c = NULL;
	int rc = pinshm_connect(d->sock, &c);

	ck_assert_msg(rc == 0, "pinshm_connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	return c;
}

int notify_fd(pinshm_client_t *c, pinshm_channel_t *cons)
{
	int fd = pinshm_channel_notify_fd(cons);

	ck_assert_msg(fd >= 0, "pinshm_channel_notify_fd: %s (%s)", pinshm_strerror(fd), pinshm_client_error(c));
	return fd;
}

bool list_find(pinshm_client_t *c, const char *name, pinshm_list_entry_t *out, size_t *total)
{
	pinshm_list_entry_t *e;
	size_t n;
	bool found = false;

	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(e[i].name, name) == 0) {
			if (out)
				*out = e[i];
			found = true;
		}
	if (total)
		*total = n;
	free(e);
	return found;
}

pinshm_client_t *connect_create_small(const struct daemon *d, const char *name)
{
	pinshm_client_t *c = connect_ok(d);
	pinshm_channel_attr_t attr;

	tu_attr(&attr, PINSHM_QUEUE, 64 * 1024, 1, 1);
	CLIENT_RC(c, pinshm_create(c, name, &attr, 0600, 0), 0);
	return c;
}

void scene_start(struct scene *s, const char *name)
{
	daemon_start(&s->d);
	s->c = connect_create_small(&s->d, name);
	tu_reporter_open(&s->rep);
	tu_procs_init(&s->ps);
}

void scene_end(struct scene *s)
{
	tu_reporter_close(&s->rep);
	pinshm_disconnect(s->c);
	daemon_stop_ok(&s->d);
}

/* CPU time (user + system) that process @p pid used, in clock ticks. */
static long proc_cpu_ticks(pid_t pid)
{
	char path[64], line[1024];
	unsigned long utime = 0, stime = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert(fgets(line, sizeof(line), f) != NULL);
	fclose(f);
	/* After the command name: state, then fields 4..13, then utime, stime. */
	const char *p = strrchr(line, ')');
	ck_assert(p != NULL);
	ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
	return (long)(utime + stime);
}

/* Fail the test if pinshmd uses more than a tenth of a core over @p ms. */
void daemon_assert_idle(const struct daemon *d, unsigned ms, const char *while_what)
{
	long hz = sysconf(_SC_CLK_TCK);
	long before = proc_cpu_ticks(d->pid);

	tu_sleep_ms(ms);
	long used = proc_cpu_ticks(d->pid) - before;
	ck_assert_msg(used * 1000 <= hz * (long)ms / 10, "pinshmd used %ld ms of CPU in %u ms %s", used * 1000 / hz,
		      ms, while_what);
}

unsigned daemon_log_count(const struct daemon *d, const char *what)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

void daemon_wait_log(const struct daemon *d, const char *what, unsigned n)
{
	uint64_t deadline = tu_now_ms() + DAEMON_LOG_MS;

	while (daemon_log_count(d, what) < n) {
		ck_assert_msg(tu_now_ms() < deadline, "the daemon's log has %u of %u lines with '%s' after %u ms",
			      daemon_log_count(d, what), n, what, DAEMON_LOG_MS);
		tu_sleep_ms(5);
	}
}

bool daemon_log_has(const struct daemon *d, const char *what)
{
	return daemon_log_count(d, what) > 0;
}

void wait_channel_state(pinshm_client_t *c, const char *name, uint32_t bit, bool set, unsigned limit_ms)
{
	uint64_t deadline = tu_now_ms() + limit_ms;
	pinshm_list_entry_t e;

	for (;;) {
		CLIENT_RC(c, pinshm_stat(c, name, &e), 0);
		if (((e.state & bit) != 0) == set)
			return;
		ck_assert_msg(tu_now_ms() < deadline, "'%s': state %#x never %s %#x", name, e.state,
			      set ? "got" : "lost", bit);
		tu_sleep_ms(20);
	}
}

pinshm_channel_t *child_connect_open(const char *sock, const char *name, pinshm_role_t role, pinshm_client_t **c)
{
	pinshm_channel_t *ch;
	int rc = pinshm_connect(sock, c);

	if (rc != 0)
		tu_child_fail(2, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	rc = pinshm_open(*c, name, role, &ch);
	if (rc != 0)
		tu_child_fail(3, "open %s: %s (%s)", name, pinshm_strerror(rc), pinshm_client_error(*c));
	return ch;
}

pinshm_channel_t *child_open_send_first(const char *sock, const char *name, int ms, pinshm_client_t **c)
{
	pinshm_channel_t *ch = child_connect_open(sock, name, PINSHM_PRODUCER, c);
	int rc = pinshm_send(ch, "first", 5, ms);

	if (rc != 0)
		tu_child_fail(4, "send: %s", pinshm_strerror(rc));
	return ch;
}

int child_sleep_until_killed(int ms)
{
	for (int i = 0; i < ms / 100; i++)
		tu_sleep_ms(100);
	return 1;
}

/* The test user, created if missing; false (and a note) when it cannot be. */
bool daemon_test_user(uid_t *uid, gid_t *gid)
{
	if (geteuid() != 0) {
		fprintf(stderr, "note: not root: a test that needs another user is skipped\n");
		return false;
	}
	struct passwd *pw = getpwnam(TEST_USER);
	if (!pw) {
		int rc = system("useradd -M -N " TEST_USER " >/dev/null 2>&1");
		(void)rc;
		pw = getpwnam(TEST_USER);
	}
	if (!pw) {
		fprintf(stderr, "note: cannot create the user %s: the test is skipped\n", TEST_USER);
		return false;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	ck_assert_uint_ne(*uid, 0);
	return true;
}

int prog_run(const char *path, const char *const *argv, const struct ident *as, const char *out, const char *err,
	     int ms)
{
	char buf[32], said[1024] = "";
	int st;

	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int efd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (ofd < 0 || efd < 0 || dup2(ofd, 1) < 0 || dup2(efd, 2) < 0)
			_exit(126);
		if (as && (setgroups(0, NULL) != 0 || setgid(as->gid) != 0 || setuid(as->uid) != 0))
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid, which clears it */
		execv(path, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	uint64_t deadline = tu_now_ms() + (uint64_t)ms;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (tu_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("%s %s did not exit in %d ms", argv[0], argv[1], ms);
		}
		tu_sleep_ms(2);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) >= 126) {
		if (access(err, R_OK) == 0)
			tu_read_file(err, said, sizeof(said));
		ck_abort_msg("%s %s: %s\n%s", argv[0], argv[1], tu_status_str(st, buf, sizeof(buf)), said);
	}
	return WEXITSTATUS(st);
}

static void vwrite_config(const struct daemon *d, const char *fmt, va_list ap)
{
	char tmp[160];

	snprintf(tmp, sizeof(tmp), "%s.new", d->conf);
	FILE *f = fopen(tmp, "w");
	ck_assert_msg(f != NULL, "%s: %s", tmp, strerror(errno));
	vfprintf(f, fmt, ap);
	ck_assert_int_eq(fchmod(fileno(f), 0644), 0);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(rename(tmp, d->conf), 0);
}

void daemon_write_config(const struct daemon *d, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vwrite_config(d, fmt, ap);
	va_end(ap);
}

void daemon_start_config(struct daemon *d, const struct daemon_opts *o, const char *fmt, ...)
{
	va_list ap;

	ck_assert(o->config);
	daemon_prepare(d, o);
	va_start(ap, fmt);
	vwrite_config(d, fmt, ap);
	va_end(ap);
	daemon_spawn(d, o);
	daemon_wait_ready(d);
}
