/*
 * check_isolation.c - what one user, or one container, can do to another
 * through pinshmd.
 *
 * Needs root (the program exits 77, "skipped", otherwise): it makes the
 * users pinshm-iso-a, pinshm-iso-b and pinshm-iso-c and the group
 * pinshm-iso (a and b members) when they are missing, runs a system-mode
 * pinshmd with a pinshmd.conf of its own, and runs clients as those users
 * in forked children:
 *
 *   permissions  b and c cannot open, unlink, or map (no descriptor, not
 *                through /proc either) what a's modes forbid them; b gets
 *                what the group lets it through its supplementary group;
 *                listing is public (pinshm-stat(3)), but a user that [access]
 *                does not admit cannot even list;
 *   limits       a user cannot go over its quota, its connection limit, nor
 *                all users together over the pinned budget (the daemon's
 *                accounting and VmLck stay under it);
 *   ipc/mount    a client in its own IPC and mount namespaces, with its own
 *                /dev/shm (a fresh tmpfs) and no view of the host's IPC
 *                objects, exchanges messages with a host process through
 *                channels it reaches only through the socket (a container
 *                without --ipc=host);
 *   user ns      a client that is root in its own user namespace is its
 *                real outer uid to the daemon (pinshm_clients, channel
 *                owner) and gets none of root's powers (shutdown, other
 *                users' channels);
 *   squatting    the user-mode folder of a uid, made first by someone else
 *                (another owner, writable by others, a symbolic link), is
 *                neither connected to nor started in by that uid's library,
 *                which says why and tries the system socket; its own
 *                daemon's folder serves it;
 *   names        b cannot create a name that [names] reserves to a, nor
 *                one of a's owned form @UID_A.NAME; a asking for its own
 *                channel (pinshm_open_owned(), or pinshm_open() of an
 *                owned name) does not open b's or root's; with
 *                shared_names = no (a reload), only owned names and those
 *                reserved to the user or its group.
 *
 * Where the kernel or a sandbox refuses a namespace, that test says so and
 * passes without checking it.
 */
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
#include <sys/ipc.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemonutil.h"
#include "pinshm.h"
#include "protocol.h"
#include "testutil.h"

#define KiB 1024u
#define WAIT_MS 60000
#define CALL_MS 20000
#define GROUP "pinshm-iso"
#define EXIT_NS_REFUSED 77 /* a child that could not make its namespaces */
#define ECHOES 2000u

enum user { USER_A, USER_B, USER_C, USERS };
static const char *const user_name[USERS] = {"pinshm-iso-a", "pinshm-iso-b", "pinshm-iso-c"};

/* The test's users: a runs with the shared group as its primary group (its
 * channels belong to it), b has it as a supplementary group, c does not. */
struct iso {
	struct daemon d;
	uid_t uid[USERS];
	gid_t home_gid[USERS]; /* primary group of the passwd entry */
	gid_t group;           /* pinshm-iso */
	size_t seg;            /* segment bytes of the channels of the limits test */
	int step;              /* what a child does, test-defined */
	uid_t outer_uid;       /* user ns: who the child is outside */
};

static void ensure_users(struct iso *x)
{
	struct group *gr = getgrnam(GROUP);
	int rc;

	if (!gr) {
		rc = system("groupadd " GROUP " >/dev/null 2>&1");
		(void)rc;
		gr = getgrnam(GROUP);
	}
	ck_assert_msg(gr != NULL, "cannot create the group %s", GROUP);
	x->group = gr->gr_gid;
	for (int u = 0; u < USERS; u++) {
		struct passwd *pw = getpwnam(user_name[u]);
		if (!pw) {
			char cmd[160];
			snprintf(cmd, sizeof(cmd), "useradd -M -N %s %s >/dev/null 2>&1", u == USER_C ? "" : "-G " GROUP,
				 user_name[u]);
			rc = system(cmd);
			(void)rc;
			pw = getpwnam(user_name[u]);
		}
		ck_assert_msg(pw != NULL, "cannot create the user %s", user_name[u]);
		ck_assert_uint_ne(pw->pw_uid, 0);
		x->uid[u] = pw->pw_uid;
		x->home_gid[u] = pw->pw_gid;
	}
	ck_assert_msg(x->uid[USER_A] != x->uid[USER_B] && x->uid[USER_B] != x->uid[USER_C], "the users share a uid");
}

/* In a child: become user @p u (groups from /etc/group), or fail. */
static void become(const struct iso *x, enum user u)
{
	gid_t gid = u == USER_A ? x->group : x->home_gid[u];

	if (initgroups(user_name[u], x->home_gid[u]) != 0)
		tu_child_fail(100, "initgroups %s: %s", user_name[u], strerror(errno));
	if (u != USER_C) {
		/* useradd -G made it a member; make sure of it whatever /etc/group says */
		gid_t groups[64];
		int n = getgroups(64, groups);
		bool has = false;
		for (int i = 0; i < n; i++)
			has |= groups[i] == x->group;
		if (!has && n >= 0 && n < 64) {
			groups[n++] = x->group;
			if (setgroups((size_t)n, groups) != 0)
				tu_child_fail(100, "setgroups: %s", strerror(errno));
		}
	}
	if (setgid(gid) != 0 || setuid(x->uid[u]) != 0)
		tu_child_fail(100, "become %s: %s", user_name[u], strerror(errno));
	if (getuid() != x->uid[u] || geteuid() != x->uid[u] || setuid(0) == 0)
		tu_child_fail(100, "still root after becoming %s", user_name[u]);
}

static pinshm_client_t *child_connect(const struct iso *x)
{
	pinshm_client_t *c;
	int rc = pinshm_connect(x->d.sock, &c);

	if (rc)
		tu_child_fail(101, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	return c;
}

/* In a child: fail unless @p expr returns @p want. */
#define CHILD_RC(c, expr, want)                                                                               \
	do {                                                                                                  \
		int crc_ = (expr);                                                                            \
		int cwant_ = (want);                                                                          \
		if (crc_ != cwant_)                                                                           \
			tu_child_fail(102, "line %d: %s: got %s, want %s (daemon: %s)", __LINE__, #expr,      \
				      pinshm_strerror(crc_), pinshm_strerror(cwant_), pinshm_client_error(c)); \
	} while (0)

/* In a child: open @p name as @p role and expect @p want (closing what opened). */
static void child_open(pinshm_client_t *c, const char *name, pinshm_role_t role, int want)
{
	pinshm_channel_t *ch = NULL;
	int rc = pinshm_open(c, name, role, &ch);

	if (rc != want)
		tu_child_fail(103, "open %s as %s: got %s, want %s (daemon: %s)", name,
			      role == PINSHM_PRODUCER ? "producer" : "consumer", pinshm_strerror(rc),
			      pinshm_strerror(want), pinshm_client_error(c));
	if (rc == 0)
		pinshm_channel_close(ch);
}

static void attr_small(pinshm_channel_attr_t *a)
{
	tu_attr(a, PINSHM_QUEUE, 64 * KiB, 1, 1);
}

/* Run @p fn as a child, and fail the test unless it exits 0; @return its
 * exit status when it is EXIT_NS_REFUSED (and 0 otherwise). */
static int run_child(const char *name, int (*fn)(void *, int), struct iso *x, int idx)
{
	struct tu_procs ps;
	char st[48];

	tu_procs_init(&ps);
	tu_spawn(&ps, name, fn, x, idx);
	ck_assert_int_eq(tu_wait_all(&ps, WAIT_MS), 0);
	if (WIFEXITED(ps.status[0]) && WEXITSTATUS(ps.status[0]) == EXIT_NS_REFUSED)
		return EXIT_NS_REFUSED;
	ck_assert_msg(WIFEXITED(ps.status[0]) && WEXITSTATUS(ps.status[0]) == 0, "%s: %s", name,
		      tu_status_str(ps.status[0], st, sizeof(st)));
	return 0;
}

/* A system-mode daemon with pinshmd.conf @p conf; its stderr to its log
 * file where @p log. */
static void start_daemon_log(struct iso *x, const char *conf, bool log)
{
	struct daemon_opts o = {.system_mode = true, .config = true, .log = log};

	ensure_users(x);
	daemon_start_config(&x->d, &o, "%s", conf);
}

static void start_daemon(struct iso *x, const char *conf)
{
	start_daemon_log(x, conf, false);
}

/* ======================================================================== */
/* permissions                                                               */
/* ======================================================================== */

static const struct {
	const char *name;
	mode_t mode;
	int b_consumer, b_producer; /* b: in the channel's group */
	int c_consumer, c_producer; /* c: other */
} perm_channels[] = {
	{"a-private", 0600, -EACCES, -EACCES, -EACCES, -EACCES},
	{"a-group-r", 0640, 0, -EACCES, -EACCES, -EACCES},
	{"a-group-rw", 0660, 0, 0, -EACCES, -EACCES},
	/* b is in the group: the group bits apply to it, not the others' (as for files) */
	{"a-world-r", 0604, -EACCES, -EACCES, 0, -EACCES},
	{"a-world-w", 0602, -EACCES, -EACCES, -EACCES, 0},
};
#define PERM_CHANNELS (sizeof(perm_channels) / sizeof(perm_channels[0]))

/* Descriptors of process @p pid that a caller may open through /proc:
 * fd/ and map_files/.  @return how many opened (each is a leak). */
static unsigned proc_fds_opened(pid_t pid, char *what, size_t whatlen)
{
	static const char *const dirs[] = {"fd", "map_files"};
	unsigned opened = 0;

	for (unsigned i = 0; i < 2; i++) {
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, dirs[i]);
		DIR *d = opendir(path);
		if (!d)
			continue; /* refused: the whole folder is closed */
		for (struct dirent *e; (e = readdir(d));) {
			if (e->d_name[0] == '.')
				continue;
			char p[sizeof(path) + sizeof(e->d_name) + 1];
			snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			if (fd >= 0) {
				snprintf(what, whatlen, "%s", p);
				opened++;
				close(fd);
			}
		}
		closedir(d);
	}
	return opened;
}

static int perm_child(void *arg, int u)
{
	struct iso *x = arg;
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t *e;
	size_t n;

	become(x, (enum user)u);
	pinshm_client_t *c = child_connect(x);
	attr_small(&attr);
	if (u == USER_A) {
		for (unsigned i = 0; i < PERM_CHANNELS; i++)
			CHILD_RC(c, pinshm_create(c, perm_channels[i].name, &attr, perm_channels[i].mode,
						  PINSHM_PERSISTENT),
				 0);
		pinshm_disconnect(c);
		return 0;
	}
	for (unsigned i = 0; i < PERM_CHANNELS; i++) {
		child_open(c, perm_channels[i].name, PINSHM_CONSUMER,
			   u == USER_B ? perm_channels[i].b_consumer : perm_channels[i].c_consumer);
		child_open(c, perm_channels[i].name, PINSHM_PRODUCER,
			   u == USER_B ? perm_channels[i].b_producer : perm_channels[i].c_producer);
		CHILD_RC(c, pinshm_unlink(c, perm_channels[i].name), -EPERM);
	}
	/* Public metadata (pinshm-stat(3)): every channel listed, a's, with its mode. */
	CHILD_RC(c, pinshm_list(c, &e, &n), 0);
	if (n != PERM_CHANNELS)
		tu_child_fail(104, "listed %zu channels, want %zu", n, PERM_CHANNELS);
	for (size_t i = 0; i < n; i++)
		if (e[i].uid != x->uid[USER_A] || e[i].gid != x->group || e[i].mode != perm_channels[i].mode)
			tu_child_fail(105, "%s listed as uid %u gid %u mode %o", e[i].name, e[i].uid, e[i].gid,
				      e[i].mode);
	free(e);
	/* No segment to map by another way: not in /dev/shm, not through the
	 * daemon's descriptors or mappings. */
	char what[400] = "";
	unsigned opened = proc_fds_opened(x->d.pid, what, sizeof(what));
	if (opened)
		tu_child_fail(106, "%u of pinshmd's descriptors or mappings opened through /proc (%s)", opened, what);
	DIR *shm = opendir("/dev/shm");
	if (shm) {
		for (struct dirent *d; (d = readdir(shm));) {
			char p[sizeof(d->d_name) + 16];
			snprintf(p, sizeof(p), "/dev/shm/%s", d->d_name);
			int fd = strstr(d->d_name, "pinshm") ? open(p, O_RDWR | O_CLOEXEC) : -1;
			if (fd >= 0)
				tu_child_fail(107, "%s opened read-write", p);
		}
		closedir(shm);
	}
	CHILD_RC(c, pinshm_daemon_shutdown(c), -EPERM);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_permissions)
{
	struct iso x = {0};

	start_daemon(&x, "[daemon]\npool_segments = 0\n");
	run_child("user a", perm_child, &x, USER_A);
	run_child("user b", perm_child, &x, USER_B);
	run_child("user c", perm_child, &x, USER_C);
	/* Root (the owner's peer with CAP_FOWNER-like rights) removes them. */
	pinshm_client_t *c = connect_ok(&x.d);
	for (unsigned i = 0; i < PERM_CHANNELS; i++)
		CLIENT_RC(c, pinshm_unlink(c, perm_channels[i].name), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&x.d);
}
END_TEST

/* [access]: c, outside the group, is refused at connect: it cannot list. */
static int access_child(void *arg, int u)
{
	struct iso *x = arg;
	pinshm_client_t *c = NULL;
	int rc;

	become(x, (enum user)u);
	rc = pinshm_connect(x->d.sock, &c);
	if (u == USER_C) {
		if (rc != -EACCES)
			tu_child_fail(110, "connect of a user outside [access]: %s", pinshm_strerror(rc));
		return 0;
	}
	if (rc)
		tu_child_fail(111, "connect: %s (%s)", pinshm_strerror(rc), pinshm_client_error(NULL));
	pinshm_list_entry_t *e;
	size_t n;
	CHILD_RC(c, pinshm_list(c, &e, &n), 0);
	free(e);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_access)
{
	struct iso x = {0};

	start_daemon(&x, "[daemon]\npool_segments = 0\n[access]\nallow_groups = " GROUP "\n");
	run_child("user a", access_child, &x, USER_A);
	run_child("user b", access_child, &x, USER_B);
	run_child("user c", access_child, &x, USER_C);
	daemon_stop_ok(&x.d);
}
END_TEST

/* ======================================================================== */
/* limits: quota, connections, budget                                        */
/* ======================================================================== */

/* step 0: a fills its quota and its connections; step 1: b meets the
 * budget; step 2: b again, once root freed one of a's channels; step 3: c
 * meets the budget. */
static int limits_child(void *arg, int u)
{
	struct iso *x = arg;
	pinshm_channel_attr_t attr, big;

	become(x, (enum user)u);
	pinshm_client_t *c = child_connect(x);
	attr_small(&attr);
	tu_attr(&big, PINSHM_QUEUE, 4096 * KiB, 1, 1);
	switch (x->step) {
	case 0: {
		CHILD_RC(c, pinshm_create(c, "a0", &attr, 0600, PINSHM_PERSISTENT), 0);
		CHILD_RC(c, pinshm_create(c, "a1", &attr, 0600, PINSHM_PERSISTENT), 0);
		CHILD_RC(c, pinshm_create(c, "a2", &attr, 0600, PINSHM_PERSISTENT), -EDQUOT);
		CHILD_RC(c, pinshm_create(c, "a-big", &big, 0600, 0), -EDQUOT);
		/* max_connections_per_user = 4: this one and three more. */
		pinshm_client_t *more[4] = {0};
		for (int i = 0; i < 3; i++)
			if (pinshm_connect(x->d.sock, &more[i]) != 0)
				tu_child_fail(120, "connection %d: %s", i + 2, pinshm_client_error(NULL));
		int rc = pinshm_connect(x->d.sock, &more[3]);
		if (rc != -EUSERS)
			tu_child_fail(121, "fifth connection: %s, want EUSERS", pinshm_strerror(rc));
		for (int i = 0; i < 3; i++)
			pinshm_disconnect(more[i]);
		break;
	}
	case 1:
		/* a holds two segments, the budget is three and a half. */
		CHILD_RC(c, pinshm_create(c, "b0", &attr, 0600, PINSHM_PERSISTENT), 0);
		CHILD_RC(c, pinshm_create(c, "b1", &attr, 0600, PINSHM_PERSISTENT), -ENOSPC);
		break;
	case 2:
		CHILD_RC(c, pinshm_create(c, "b1", &attr, 0600, PINSHM_PERSISTENT), 0);
		break;
	case 3:
		/* c is far under its quota, the machine is not under its budget */
		CHILD_RC(c, pinshm_create(c, "c0", &attr, 0600, PINSHM_PERSISTENT), -ENOSPC);
		break;
	default:
		break;
	}
	pinshm_disconnect(c);
	return 0;
}

/* The daemon's pinned bytes, and its locked memory, within the budget. */
static void check_under_budget(struct iso *x, pinshm_client_t *c, uint64_t budget, uint64_t want_pinned)
{
	pinshm_status_t st;
	long locked = proc_status_value_kb(x->d.pid, "VmLck:");

	CLIENT_RC(c, pinshm_status(c, &st, NULL, NULL), 0);
	ck_assert_uint_eq(st.budget, budget);
	ck_assert_msg(st.pinned == want_pinned, "pinned %llu, want %llu", (unsigned long long)st.pinned,
		      (unsigned long long)want_pinned);
	ck_assert_msg(st.pinned <= budget, "pinned %llu over the budget %llu", (unsigned long long)st.pinned,
		      (unsigned long long)budget);
	ck_assert_msg(locked >= 0 && (uint64_t)locked * 1024 <= budget, "pinshmd VmLck %ld kB, budget %llu", locked,
		      (unsigned long long)budget);
}

START_TEST(test_limits)
{
	struct iso x = {0};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t *e;
	size_t n;
	char conf[256];

	attr_small(&attr);
	TU_RC(pinshm_segment_size(&attr, &x.seg), 0);
	x.seg = (x.seg + 4095) & ~(size_t)4095;
	uint64_t budget = 3 * x.seg + x.seg / 2;
	snprintf(conf, sizeof(conf),
		 "[daemon]\npool_segments = 0\nbudget = %llu\ndefault_user_quota = %zu\nmax_connections_per_user = 4\n",
		 (unsigned long long)budget, 2 * x.seg + x.seg / 2);
	start_daemon(&x, conf);
	pinshm_client_t *c = connect_ok(&x.d);

	x.step = 0;
	run_child("user a", limits_child, &x, USER_A);
	CLIENT_RC(c, pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_msg(e[0].size == x.seg && (e[0].state & PINSHM_LIST_PINNED), "a0: %llu bytes, state %#x",
		      (unsigned long long)e[0].size, e[0].state);
	free(e);
	check_under_budget(&x, c, budget, 2 * x.seg);
	x.step = 1;
	run_child("user b", limits_child, &x, USER_B);
	check_under_budget(&x, c, budget, 3 * x.seg);
	/* Root frees one of a's: b may take its place, and no more. */
	CLIENT_RC(c, pinshm_unlink(c, "a0"), 0);
	check_under_budget(&x, c, budget, 2 * x.seg);
	x.step = 2;
	run_child("user b", limits_child, &x, USER_B);
	check_under_budget(&x, c, budget, 3 * x.seg);
	x.step = 3;
	run_child("user c", limits_child, &x, USER_C);
	check_under_budget(&x, c, budget, 3 * x.seg);
	CLIENT_RC(c, pinshm_unlink(c, "a1"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "b0"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "b1"), 0);
	check_under_budget(&x, c, budget, 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&x.d);
}
END_TEST

/* ======================================================================== */
/* a client in its own IPC and mount namespaces                              */
/* ======================================================================== */

#define SYSV_KEY_BASE 0x70690000

/* Echo every message of "to-ns" back on "from-ns", checked, as user a. */
static int container_child(void *arg, int idx)
{
	struct iso *x = arg;
	char marker[64];
	pinshm_channel_t *in, *out;
	uint8_t buf[1024];
	char why[200];

	(void)idx;
	if (unshare(CLONE_NEWIPC | CLONE_NEWNS) != 0) {
		fprintf(stderr, "note: unshare(CLONE_NEWIPC | CLONE_NEWNS): %s\n", strerror(errno));
		_exit(EXIT_NS_REFUSED);
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=1777") != 0) {
		fprintf(stderr, "note: a private /dev/shm: %s\n", strerror(errno));
		_exit(EXIT_NS_REFUSED);
	}
	/* The host's /dev/shm and SysV objects are out of sight. */
	snprintf(marker, sizeof(marker), "/dev/shm/iso-marker-%d", (int)getppid());
	if (access(marker, F_OK) == 0)
		tu_child_fail(130, "the host's %s is visible", marker);
	if (shmget((key_t)(SYSV_KEY_BASE + (getppid() & 0xffff)), 0, 0) >= 0 || errno != ENOENT)
		tu_child_fail(131, "the host's SysV segment is visible (%s)", strerror(errno));
	become(x, USER_A);
	pinshm_client_t *c = child_connect(x);
	CHILD_RC(c, pinshm_open(c, "to-ns", PINSHM_CONSUMER, &in), 0);
	CHILD_RC(c, pinshm_open(c, "from-ns", PINSHM_PRODUCER, &out), 0);
	for (uint64_t s = 0; s < ECHOES; s++) {
		size_t len;
		uint32_t w;
		uint64_t got;
		int rc = pinshm_recv(in, buf, sizeof(buf), &len, CALL_MS);
		if (rc)
			tu_child_fail(132, "recv %llu: %s", (unsigned long long)s, pinshm_strerror(rc));
		if (tu_msg_check(buf, len, 1000, &w, &got, why, sizeof(why)) || w != 0 || got != s)
			tu_child_fail(133, "message %llu: %s (got %u, %llu)", (unsigned long long)s, why, w,
				      (unsigned long long)got);
		len = tu_msg_len(1, s, 1000);
		tu_msg_fill(buf, len, 1, s);
		rc = pinshm_send(out, buf, len, CALL_MS);
		if (rc)
			tu_child_fail(134, "send %llu: %s", (unsigned long long)s, pinshm_strerror(rc));
	}
	pinshm_channel_close(in);
	pinshm_channel_close(out);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_ipc_mount_namespace)
{
	struct iso x = {0};
	pinshm_channel_attr_t attr;
	pinshm_channel_t *to, *from;
	struct tu_procs ps;
	uint8_t buf[1024];
	char marker[64], why[200], st[48];

	start_daemon(&x, "[daemon]\npool_segments = 0\n");
	pinshm_client_t *c = connect_ok(&x.d);
	tu_attr(&attr, PINSHM_QUEUE, 16 * KiB, 1, 1);
	CLIENT_RC(c, pinshm_create(c, "to-ns", &attr, 0666, 0), 0);
	CLIENT_RC(c, pinshm_create(c, "from-ns", &attr, 0666, 0), 0);
	CLIENT_RC(c, pinshm_open(c, "to-ns", PINSHM_PRODUCER, &to), 0);
	CLIENT_RC(c, pinshm_open(c, "from-ns", PINSHM_CONSUMER, &from), 0);
	/* Host objects the child must not see. */
	snprintf(marker, sizeof(marker), "/dev/shm/iso-marker-%d", (int)getpid());
	int mfd = open(marker, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ck_assert_int_ge(mfd, 0);
	close(mfd);
	int shmid = shmget((key_t)(SYSV_KEY_BASE + (getpid() & 0xffff)), 4096, IPC_CREAT | 0600);
	ck_assert_msg(shmid >= 0, "shmget: %s", strerror(errno));

	tu_procs_init(&ps);
	tu_spawn(&ps, "container", container_child, &x, 0);
	int rc = 0;
	for (uint64_t s = 0; s < ECHOES && rc == 0; s++) {
		size_t len = tu_msg_len(0, s, 1000);
		tu_msg_fill(buf, len, 0, s);
		rc = pinshm_send(to, buf, len, CALL_MS);
		if (rc == 0)
			rc = pinshm_recv(from, buf, sizeof(buf), &len, CALL_MS);
		if (rc == 0) {
			uint32_t w;
			uint64_t got;
			ck_assert_msg(tu_msg_check(buf, len, 1000, &w, &got, why, sizeof(why)) == 0, "%s", why);
			ck_assert_msg(w == 1 && got == s, "echo (%u, %llu), want (1, %llu)", w, (unsigned long long)got,
				      (unsigned long long)s);
		}
	}
	ck_assert_int_eq(tu_wait_all(&ps, WAIT_MS), 0);
	unlink(marker);
	shmctl(shmid, IPC_RMID, NULL);
	if (WIFEXITED(ps.status[0]) && WEXITSTATUS(ps.status[0]) == EXIT_NS_REFUSED) {
		fprintf(stderr, "note: no IPC and mount namespaces here: the container test is skipped\n");
	} else {
		ck_assert_msg(WIFEXITED(ps.status[0]) && WEXITSTATUS(ps.status[0]) == 0, "container: %s",
			      tu_status_str(ps.status[0], st, sizeof(st)));
		TU_RC(rc, 0);
	}
	pinshm_channel_close(to);
	pinshm_channel_close(from);
	pinshm_disconnect(c);
	daemon_stop_ok(&x.d);
}
END_TEST

/* ======================================================================== */
/* a client that is root in its own user namespace                           */
/* ======================================================================== */

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = -1;

	if (fd >= 0) {
		n = write(fd, text, strlen(text));
		close(fd);
	}
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* As user b: unshare(CLONE_NEWUSER), map ourselves to root inside, then
 * try root's powers on the daemon. */
static int userns_child(void *arg, int idx)
{
	struct iso *x = arg;
	uid_t outer = x->uid[USER_B];
	gid_t outer_gid = x->home_gid[USER_B];
	char map[64];
	pinshm_channel_attr_t attr;
	pinshm_client_info_t *ci;
	pinshm_list_entry_t *e;
	size_t n;

	(void)idx;
	become(x, USER_B);
	/* setuid() made us undumpable, which gives /proc/self to root: back,
	 * so that we may write our own maps. */
	prctl(PR_SET_DUMPABLE, 1);
	if (unshare(CLONE_NEWUSER) != 0) {
		fprintf(stderr, "note: unshare(CLONE_NEWUSER) as %s: %s\n", user_name[USER_B], strerror(errno));
		_exit(EXIT_NS_REFUSED);
	}
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)outer);
	if (write_file("/proc/self/setgroups", "deny") != 0 || write_file("/proc/self/uid_map", map) != 0)
		tu_child_fail(140, "uid_map: %s", strerror(errno));
	snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)outer_gid);
	if (write_file("/proc/self/gid_map", map) != 0)
		tu_child_fail(141, "gid_map: %s", strerror(errno));
	if (getuid() != 0 || geteuid() != 0)
		tu_child_fail(142, "not root inside the namespace: uid %u", (unsigned)getuid());

	pinshm_client_t *c = child_connect(x);
	/* The daemon sees b, not root. */
	CHILD_RC(c, pinshm_clients(c, &ci, &n), 0);
	bool found = false;
	for (size_t i = 0; i < n; i++)
		if (ci[i].pid == (uint32_t)getpid()) {
			found = true;
			if (ci[i].uid != outer)
				tu_child_fail(143, "the daemon sees uid %u, want the outer uid %u", ci[i].uid,
					      (unsigned)outer);
		}
	free(ci);
	if (!found)
		tu_child_fail(144, "our connection (pid %d) is not listed", (int)getpid());
	/* None of root's powers. */
	CHILD_RC(c, pinshm_daemon_shutdown(c), -EPERM);
	CHILD_RC(c, pinshm_unlink(c, "root-secret"), -EPERM);
	CHILD_RC(c, pinshm_unlink(c, "a-secret"), -EPERM);
	child_open(c, "root-secret", PINSHM_CONSUMER, -EACCES);
	child_open(c, "root-secret", PINSHM_PRODUCER, -EACCES);
	child_open(c, "a-secret", PINSHM_CONSUMER, -EACCES);
	child_open(c, "root-open", PINSHM_PRODUCER, 0);
	/* What it creates belongs to b. */
	attr_small(&attr);
	CHILD_RC(c, pinshm_create(c, "ns-made", &attr, 0600, PINSHM_PERSISTENT), 0);
	CHILD_RC(c, pinshm_list(c, &e, &n), 0);
	for (size_t i = 0; i < n; i++)
		if (strcmp(e[i].name, "ns-made") == 0 && e[i].uid != outer)
			tu_child_fail(145, "ns-made owned by uid %u, want %u", e[i].uid, (unsigned)outer);
	free(e);
	pinshm_disconnect(c);
	return 0;
}

/* As a: make a private channel of a's. */
static int userns_owner(void *arg, int idx)
{
	struct iso *x = arg;
	pinshm_channel_attr_t attr;

	(void)idx;
	become(x, USER_A);
	pinshm_client_t *c = child_connect(x);
	attr_small(&attr);
	CHILD_RC(c, pinshm_create(c, "a-secret", &attr, 0600, PINSHM_PERSISTENT), 0);
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_user_namespace)
{
	struct iso x = {0};
	pinshm_channel_attr_t attr;
	pinshm_list_entry_t *all;
	size_t n, found = 0;

	start_daemon(&x, "[daemon]\npool_segments = 0\n");
	pinshm_client_t *c = connect_ok(&x.d);
	attr_small(&attr);
	CLIENT_RC(c, pinshm_create(c, "root-secret", &attr, 0600, PINSHM_PERSISTENT), 0);
	CLIENT_RC(c, pinshm_create(c, "root-open", &attr, 0666, PINSHM_PERSISTENT), 0);
	run_child("user a", userns_owner, &x, 0);
	if (run_child("user b, root in its user namespace", userns_child, &x, 0) == EXIT_NS_REFUSED) {
		fprintf(stderr, "note: no user namespaces here: the user-namespace test is skipped\n");
	} else {
		/* Everything still there, ns-made b's. */
		CLIENT_RC(c, pinshm_list(c, &all, &n), 0);
		for (size_t i = 0; i < n; i++) {
			if (strcmp(all[i].name, "root-secret") == 0 || strcmp(all[i].name, "a-secret") == 0)
				found++;
			else if (strcmp(all[i].name, "ns-made") == 0) {
				ck_assert_uint_eq(all[i].uid, x.uid[USER_B]);
				found++;
			}
		}
		free(all);
		ck_assert_uint_eq(found, 3);
		CLIENT_RC(c, pinshm_unlink(c, "ns-made"), 0);
	}
	CLIENT_RC(c, pinshm_unlink(c, "a-secret"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "root-secret"), 0);
	CLIENT_RC(c, pinshm_unlink(c, "root-open"), 0);
	pinshm_disconnect(c);
	daemon_stop_ok(&x.d); /* still running: the shutdown was refused */
}
END_TEST

/* ======================================================================== */
/* squatting                                                                 */
/* ======================================================================== */

/*
 * The user-mode folder /tmp/pinshm-UID of a victim (XDG_RUNTIME_DIR and
 * PINSHM_SOCKET unset), made first by someone else, with the squatter's
 * socket listening in it.  The victim and the squatter are uids no account
 * uses, so that the folder is the test's alone.
 */
enum squat_kind { SQUAT_OWNER, SQUAT_WRITABLE, SQUAT_SYMLINK, SQUATS };

struct squat {
	uid_t victim, other;
	char dir[64];    /* /tmp/pinshm-VICTIM */
	char target[64]; /* SQUAT_SYMLINK: the folder the link names */
	char sock[96];   /* where the squatter listens */
	char want[160];  /* the reason the connect error must give */
	int listen_fd;
};

/* A uid from @p from on that no account uses and that has no folder. */
static uid_t unused_uid(uid_t from)
{
	for (uid_t u = from;; u++) {
		char dir[64];
		struct stat st;
		snprintf(dir, sizeof(dir), "/tmp/pinshm-%u", (unsigned)u);
		if (!getpwuid(u) && lstat(dir, &st) != 0)
			return u;
	}
}

/* Make the squatted folder of kind @p k, a socket listening in it. */
static void squat_make(struct squat *q, enum squat_kind k)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *in = q->dir;

	switch (k) {
	case SQUAT_OWNER:
		ck_assert_int_eq(mkdir(q->dir, 0755), 0);
		ck_assert_int_eq(chown(q->dir, q->other, q->other), 0);
		snprintf(q->want, sizeof(q->want), "%s belongs to uid %u", q->dir, (unsigned)q->other);
		break;
	case SQUAT_WRITABLE:
		ck_assert_int_eq(mkdir(q->dir, 0700), 0);
		ck_assert_int_eq(chown(q->dir, q->victim, q->victim), 0);
		ck_assert_int_eq(chmod(q->dir, 0777), 0);
		snprintf(q->want, sizeof(q->want), "%s may be written by its group or others", q->dir);
		break;
	default:
		snprintf(q->target, sizeof(q->target), "/tmp/pinshm-squat-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(q->target));
		ck_assert_int_eq(chown(q->target, q->victim, q->victim), 0);
		ck_assert_int_eq(symlink(q->target, q->dir), 0);
		snprintf(q->want, sizeof(q->want), "%s is a symbolic link", q->dir);
		in = q->target;
		break;
	}
	snprintf(q->sock, sizeof(q->sock), "%s/socket", in);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", q->sock);
	q->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(q->listen_fd, 0);
	ck_assert_int_eq(bind(q->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(q->listen_fd, 8), 0);
	ck_assert_int_eq(chmod(q->sock, 0666), 0);
}

/* Nobody connected to the squatter, nothing was added to its folder; remove it. */
static void squat_check_remove(struct squat *q, enum squat_kind k)
{
	struct pollfd pfd = {.fd = q->listen_fd, .events = POLLIN};
	char start[128];
	struct stat st;

	ck_assert_msg(poll(&pfd, 1, 0) == 0, "case %d: the victim connected to the squatter's socket", k);
	snprintf(start, sizeof(start), "%s.start", q->sock);
	ck_assert_msg(lstat(start, &st) != 0, "case %d: autostart went into the squatted folder", k);
	close(q->listen_fd);
	ck_assert_int_eq(unlink(q->sock), 0);
	if (k == SQUAT_SYMLINK) {
		ck_assert_int_eq(unlink(q->dir), 0);
		ck_assert_int_eq(rmdir(q->target), 0);
	} else {
		ck_assert_int_eq(rmdir(q->dir), 0); /* nothing else in it */
	}
}

/* In a child: become the victim and connect where pinshm_connect(NULL) looks,
 * autostart allowed.  @p idx: the kind of squat, or SQUATS for the control
 * (the victim's own daemon serves its folder). */
static int squat_child(void *arg, int idx)
{
	const struct squat *q = arg;
	pinshm_client_t *c;

	if (setgroups(0, NULL) != 0 || setresgid(q->victim, q->victim, q->victim) != 0 ||
	    setresuid(q->victim, q->victim, q->victim) != 0)
		tu_child_fail(100, "becoming uid %u: %s", (unsigned)q->victim, strerror(errno));
	unsetenv("XDG_RUNTIME_DIR");
	unsetenv("PINSHM_SOCKET");
	setenv("PINSHM_AUTOSTART", "1", 1);
	setenv("PINSHMD", pinshmd_path(), 1);
	int rc = pinshm_connect(NULL, &c);
	const char *e = pinshm_client_error(NULL);
	if (idx == SQUATS) {
		if (rc != 0 || strstr(e, "ignoring"))
			tu_child_fail(101, "its own folder: %s (%s)", pinshm_strerror(rc), e);
		pinshm_disconnect(c);
		return 0;
	}
	/* A system daemon, where one runs, may answer: the detail says so too. */
	if (!strstr(e, "ignoring the user-mode socket folder") || !strstr(e, q->want) ||
	    !strstr(e, "the system socket " PROTO_SYSTEM_SOCKET) || (rc != 0 && !strstr(e, "no pinshmd is started")))
		tu_child_fail(102, "case %d: %s, detail '%s' (want '%s')", idx, pinshm_strerror(rc), e, q->want);
	if (rc == 0)
		pinshm_disconnect(c);
	return 0;
}

static void squat_run_child(struct squat *q, int idx)
{
	struct tu_procs ps;
	char st[48];

	tu_procs_init(&ps);
	tu_spawn(&ps, "victim", squat_child, q, idx);
	ck_assert_int_eq(tu_wait_all(&ps, WAIT_MS), 0);
	ck_assert_msg(WIFEXITED(ps.status[0]) && WEXITSTATUS(ps.status[0]) == 0, "case %d: %s", idx,
		      tu_status_str(ps.status[0], st, sizeof(st)));
}

START_TEST(test_squatted_folder)
{
	struct squat q = {0};
	struct daemon d = {0};
	struct daemon_opts o = {.as_user = true, .no_socket = true};

	q.victim = unused_uid(3900000u + (uid_t)getpid() % 100000u);
	q.other = unused_uid(q.victim + 1);
	snprintf(q.dir, sizeof(q.dir), "/tmp/pinshm-%u", (unsigned)q.victim);
	unsetenv("XDG_RUNTIME_DIR"); /* for the victim's daemon below */
	unsetenv("PINSHM_SOCKET");
	for (int k = 0; k < SQUATS; k++) {
		squat_make(&q, k);
		squat_run_child(&q, k);
		if (k == SQUAT_OWNER) { /* the victim's own daemon will not listen there either */
			o.uid = o.gid = q.victim;
			snprintf(d.sock, sizeof(d.sock), "%s/socket", q.dir);
			daemon_spawn(&d, &o);
			int st = daemon_wait_exit(&d, 10000);
			ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
				      "pinshmd --user started in a squatted folder");
		}
		squat_check_remove(&q, k);
	}

	/* The control: the folder its own daemon makes serves the victim. */
	o.uid = o.gid = q.victim;
	snprintf(d.dir, sizeof(d.dir), "%s", q.dir);
	snprintf(d.sock, sizeof(d.sock), "%s/socket", q.dir);
	daemon_spawn(&d, &o);
	daemon_wait_ready(&d);
	squat_run_child(&q, SQUATS);
	daemon_term_ok(&d);
	char lock[160];
	snprintf(lock, sizeof(lock), "%s.lock", d.sock);
	unlink(lock);
	unlink(d.sock);
	ck_assert_int_eq(rmdir(q.dir), 0);
}
END_TEST

/* ======================================================================== */
/* names: owned by form, reserved by pinshmd.conf, opened by owner           */
/* ======================================================================== */

#define NAMES_CONF_SHARED "[daemon]\npool_segments = 0\n[names]\nalice_ = user:pinshm-iso-a\n"
#define NAMES_CONF_CLOSED                                                                                      \
	"[daemon]\npool_segments = 0\nshared_names = no\n[names]\nalice_ = user:pinshm-iso-a\nteam_ = group:" GROUP \
	"\n"

/* The owned name "@UID.@p rest" of user @p u into @p buf. */
static const char *owned(const struct iso *x, enum user u, const char *rest, char *buf, size_t len)
{
	snprintf(buf, len, "@%u.%s", (unsigned)x->uid[u], rest);
	return buf;
}

/* In a child: fail unless the last refusal's text holds @p what. */
static void child_said(pinshm_client_t *c, const char *what)
{
	if (!strstr(pinshm_client_error(c), what))
		tu_child_fail(131, "the daemon said '%s', not '%s'", pinshm_client_error(c), what);
}

/* In a child: open @p name as a producer that must belong to @p owner, and
 * expect @p want. */
static void child_open_owned(pinshm_client_t *c, const char *name, uid_t owner, int want)
{
	pinshm_channel_t *ch = NULL;
	int rc = pinshm_open_owned(c, name, PINSHM_PRODUCER, owner, &ch);

	if (rc != want)
		tu_child_fail(130, "open %s owned by %d: got %s, want %s (daemon: %s)", name, (int)owner,
			      pinshm_strerror(rc), pinshm_strerror(want), pinshm_client_error(c));
	if (rc == 0)
		pinshm_channel_close(ch);
}

/* Step 0, shared names on: b squats nothing of a's, and what b made under a
 * shared name a does not open as its own.  Step 1, shared names off: only
 * owned and reserved names. */
static int names_child(void *arg, int u)
{
	struct iso *x = arg;
	pinshm_channel_attr_t attr;
	char n1[64], n2[64], want[96];

	become(x, (enum user)u);
	pinshm_client_t *c = child_connect(x);
	attr_small(&attr);
	switch (x->step * USERS + u) {
	case 0 * USERS + USER_B:
		CHILD_RC(c, pinshm_create(c, "alice_jobs", &attr, 0666, PINSHM_PERSISTENT), -EPERM);
		child_said(c, "reserved to uid");
		CHILD_RC(c, pinshm_create(c, owned(x, USER_A, "x", n1, sizeof(n1)), &attr, 0666, PINSHM_PERSISTENT),
			 -EPERM);
		child_said(c, "by its form");
		CHILD_RC(c, pinshm_create(c, "jobs", &attr, 0666, PINSHM_PERSISTENT), 0);
		CHILD_RC(c, pinshm_create(c, owned(x, USER_B, "x", n1, sizeof(n1)), &attr, 0666, PINSHM_PERSISTENT), 0);
		break;
	case 0 * USERS + USER_A:
		/* b's "jobs" is not a's: refused as a's, opened as b's or anyone's. */
		child_open_owned(c, "jobs", x->uid[USER_A], -EPERM);
		snprintf(want, sizeof(want), "belongs to uid %u, not to uid %u", (unsigned)x->uid[USER_B],
			 (unsigned)x->uid[USER_A]);
		child_said(c, want);
		child_open_owned(c, "jobs", x->uid[USER_B], 0);
		child_open(c, "jobs", PINSHM_PRODUCER, 0);
		CHILD_RC(c, pinshm_create(c, "alice_jobs", &attr, 0600, PINSHM_PERSISTENT), 0);
		/* Root made "@A.root" (root may): pinshm_open() of it checks the
		 * owner the name says, a, and refuses root's channel. */
		child_open(c, owned(x, USER_A, "root", n1, sizeof(n1)), PINSHM_PRODUCER, -EPERM);
		child_open_owned(c, n1, PINSHM_OWNER_ANY, -EPERM);
		child_open_owned(c, n1, 0, -EINVAL); /* not the owner its name says */
		child_open(c, owned(x, USER_B, "x", n2, sizeof(n2)), PINSHM_PRODUCER, 0);
		/* The library makes a's owned names. */
		CHILD_RC(c, pinshm_name_own(n2, sizeof(n2), "mine"), 0);
		if (strcmp(n2, owned(x, USER_A, "mine", n1, sizeof(n1))) != 0)
			tu_child_fail(132, "pinshm_name_own: '%s', want '%s'", n2, n1);
		CHILD_RC(c, pinshm_create(c, n2, &attr, 0600, 0), 0);
		child_open(c, n2, PINSHM_PRODUCER, 0);
		break;
	case 1 * USERS + USER_B:
		CHILD_RC(c, pinshm_create(c, "plain", &attr, 0600, 0), -EPERM);
		child_said(c, "shared names are off");
		CHILD_RC(c, pinshm_create(c, owned(x, USER_B, "y", n1, sizeof(n1)), &attr, 0600, 0), 0);
		CHILD_RC(c, pinshm_create(c, "team_b", &attr, 0600, 0), 0);
		CHILD_RC(c, pinshm_create(c, "alice_b", &attr, 0600, 0), -EPERM);
		CHILD_RC(c, pinshm_create(c, owned(x, USER_A, "y", n1, sizeof(n1)), &attr, 0600, 0), -EPERM);
		break;
	case 1 * USERS + USER_C:
		CHILD_RC(c, pinshm_create(c, "team_c", &attr, 0600, 0), -EPERM);
		CHILD_RC(c, pinshm_create(c, "plain", &attr, 0600, 0), -EPERM);
		CHILD_RC(c, pinshm_create(c, owned(x, USER_C, "z", n1, sizeof(n1)), &attr, 0600, 0), 0);
		break;
	default:
		break;
	}
	pinshm_disconnect(c);
	return 0;
}

START_TEST(test_names)
{
	struct iso x = {0};
	pinshm_channel_attr_t attr;
	char name[64];

	start_daemon_log(&x, NAMES_CONF_SHARED, true);
	pinshm_client_t *c = connect_ok(&x.d);
	attr_small(&attr);
	CLIENT_RC(c, pinshm_create(c, owned(&x, USER_A, "root", name, sizeof(name)), &attr, 0666, PINSHM_PERSISTENT),
		  0);
	run_child("user b", names_child, &x, USER_B);
	run_child("user a", names_child, &x, USER_A);
	pinshm_list_entry_t e;
	CLIENT_RC(c, pinshm_stat(c, "alice_jobs", &e), 0);
	ck_assert_uint_eq(e.uid, x.uid[USER_A]);

	/* A reload turns shared names off and reserves team_ to the group. */
	daemon_write_config(&x.d, "%s", NAMES_CONF_CLOSED);
	ck_assert_int_eq(kill(x.d.pid, SIGHUP), 0);
	daemon_wait_log(&x.d, "SIGHUP: reloaded", 1);
	x.step = 1;
	run_child("user b", names_child, &x, USER_B);
	run_child("user c", names_child, &x, USER_C);
	CLIENT_RC(c, pinshm_create(c, "plain", &attr, 0600, 0), 0); /* root may */
	pinshm_disconnect(c);
	daemon_stop_ok(&x.d);
}
END_TEST

static Suite *isolation_suite(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("users");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_permissions);
	tcase_add_test(tc, test_access);
	tcase_add_test(tc, test_limits);
	suite_add_tcase(s, tc);
	tc = tcase_create("namespaces");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ipc_mount_namespace);
	tcase_add_test(tc, test_user_namespace);
	suite_add_tcase(s, tc);
	tc = tcase_create("squatting");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_squatted_folder);
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	if (geteuid() != 0) {
		printf("check_isolation: SKIP: needs root (it makes users and namespaces)\n");
		return 77;
	}
	return tu_run_suite(isolation_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
