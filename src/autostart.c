/*
 * autostart.c - the start lock, the spawn and the wait (autostart.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "autostart.h"
#include "pinshm.h"
#include "protocol.h"
#include "wait.h"

#ifndef PINSHM_SBINDIR
#define PINSHM_SBINDIR "/usr/local/sbin"
#endif

#define POLL_MS 10u       /* between two looks at the lock or the socket */
#define MAX_SPAWNS 20u    /* daemons started by one call, at most */

extern char **environ;

bool autostart_allowed(unsigned flags)
{
	const char *env = getenv("PINSHM_AUTOSTART");

	if (env && strcmp(env, "0") == 0)
		return false;
	if (env && strcmp(env, "1") == 0)
		return true;
	return flags & PINSHM_CONNECT_AUTOSTART;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Whether something listens on @p path (a full backlog counts). */
static bool answers(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	int err = errno;
	close(fd);
	return rc == 0 || err == EAGAIN;
}

/* The folder of the default path: made 0700 if missing, and safe. */
static int prepare_dir(const char *path, char *why, size_t whylen)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)], reason[sizeof(dir) + 64];

	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int err = errno;
		snprintf(why, whylen, "cannot make %s to start pinshmd: %s", dir, strerror(err));
		return -err;
	}
	if (proto_dir_check(dir, reason, sizeof(reason)) != 0) {
		snprintf(why, whylen, "not starting pinshmd: %s", reason);
		return -EPERM;
	}
	return 0;
}

/* Take the start lock on @p lock_path before @p deadline. @return its descriptor or -errno. */
static int lock_start(const char *lock_path, uint64_t deadline, char *why, size_t whylen)
{
	int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0) {
		int err = errno;
		snprintf(why, whylen, "cannot open the start lock %s: %s", lock_path, strerror(err));
		return -err;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int err = errno;
		if (err == EINTR)
			continue;
		if (err != EWOULDBLOCK || wait_now_ms() >= deadline) {
			snprintf(why, whylen, "cannot take the start lock %s: %s", lock_path,
				 err == EWOULDBLOCK ? "another client holds it for too long" : strerror(err));
			close(fd);
			return err == EWOULDBLOCK ? -ETIMEDOUT : -err;
		}
		sleep_ms(POLL_MS);
	}
	return fd;
}

/* The daemon's environment: the caller's without LD_PRELOAD, which names
 * libraries meant for the caller, not for the daemon (an MPI rank preloads
 * the pinshm plugin, and with it the MPI library), and without the
 * daemon's test hooks (PINSHMD_TEST_*), which no client may set.  NULL
 * without memory. */
static char **daemon_environ(void)
{
	size_t n = 0, kept = 0;
	while (environ[n])
		n++;
	char **env = malloc((n + 1) * sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", strlen("LD_PRELOAD=")) != 0 &&
		    strncmp(environ[i], "PINSHMD_TEST_", strlen("PINSHMD_TEST_")) != 0)
			env[kept++] = environ[i];
	env[kept] = NULL;
	return env;
}

/* Start pinshmd; it detaches, and its first process exits once it serves. */
static int spawn_daemon(const char *path, bool default_path, pid_t *pid)
{
	const char *bin = getenv("PINSHMD");
	char idle[16];
	const char *env_idle = getenv("PINSHM_AUTOSTART_IDLE");
	char *end;
	unsigned long v = env_idle ? strtoul(env_idle, &end, 10) : 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;

	if (!bin || !bin[0])
		bin = PINSHM_SBINDIR "/pinshmd";
	if (!env_idle || end == env_idle || *end || v == 0 || v > 86400)
		v = AUTOSTART_IDLE_S;
	snprintf(idle, sizeof(idle), "%lu", v);
	char *argv[] = {(char *)bin, "--user", "--exit-idle", idle, "-s", (char *)path, NULL};
	if (default_path)
		argv[4] = NULL;
	char **env = daemon_environ();
	if (!env)
		return -ENOMEM;

	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
	posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
#endif
#endif
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	int rc = posix_spawn(pid, bin, &fa, &attr, argv, env);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	return -rc;
}

int autostart_daemon(const char *path, bool default_path, char *why, size_t whylen)
{
	char lock_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
	uint64_t deadline = wait_now_ms() + PINSHM_AUTOSTART_TIMEOUT_MS;
	pid_t child = -1;
	unsigned spawns = 0;
	int status = 0, rc;

	char abs_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char cwd[sizeof(abs_path)];

	if (path[0] != '/') { /* the daemon works in / */
		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(abs_path, sizeof(abs_path), "%s/%s", cwd, path) >= sizeof(abs_path)) {
			snprintf(why, whylen, "socket path '%s' too long", path);
			return -ENAMETOOLONG;
		}
		path = abs_path;
	}
	if (strlen(path) >= sizeof(abs_path)) {
		snprintf(why, whylen, "socket path '%s' too long", path);
		return -ENAMETOOLONG;
	}
	if (default_path && (rc = prepare_dir(path, why, whylen)) != 0)
		return rc;
	snprintf(lock_path, sizeof(lock_path), "%s.start", path);
	int lock = lock_start(lock_path, deadline, why, whylen);
	if (lock < 0)
		return lock;

	rc = -ETIMEDOUT;
	for (;;) {
		if (answers(path)) {
			rc = 0;
			break;
		}
		if (child > 0) { /* the first process exits once the daemon serves, or fails */
			pid_t w = waitpid(child, &status, WNOHANG);
			if (w == child || (w < 0 && errno == ECHILD))
				child = -1; /* a failure (another daemon exiting holds the path): again */
		}
		if (child < 0 && spawns < MAX_SPAWNS) {
			rc = spawn_daemon(path, default_path, &child);
			spawns++;
			if (rc != 0) {
				snprintf(why, whylen, "cannot start %s: %s", getenv("PINSHMD") ? getenv("PINSHMD")
												 : PINSHM_SBINDIR "/pinshmd",
					 strerror(-rc));
				break;
			}
			rc = -ETIMEDOUT;
		}
		if (wait_now_ms() >= deadline) {
			snprintf(why, whylen, "pinshmd started for %s does not answer after %u ms%s", path,
				 PINSHM_AUTOSTART_TIMEOUT_MS,
				 WIFEXITED(status) && WEXITSTATUS(status) ? " (it failed: see syslog)" : "");
			break;
		}
		sleep_ms(POLL_MS);
	}
	/* It serves: its first process is exiting (else it stays a zombie). */
	for (unsigned i = 0; child > 0 && i < 1000 / POLL_MS; i++) {
		pid_t w = waitpid(child, NULL, WNOHANG);
		if (w == child || w < 0)
			break;
		sleep_ms(POLL_MS);
	}
	close(lock);
	return rc;
}
