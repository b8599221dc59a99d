/*
 * testutil.c - helpers shared by the Check tests of pinshm (see testutil.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "testutil.h"
#include "protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- clocks ------------------------------------------------------------ */

uint64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void tu_sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

bool tu_efd_written(int efd, int ms)
{
	struct pollfd p = {.fd = efd, .events = POLLIN};
	uint64_t n;

	if (poll(&p, 1, ms) != 1)
		return false;
	ck_assert_int_eq(read(efd, &n, sizeof(n)), sizeof(n));
	return true;
}

/* ---- huge pages (root) ------------------------------------------------- */

#define TU_NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static int huge_lock_fd = -1; /* TU_NR_HUGEPAGES, flocked */
static long huge_saved = -1;
static int huge_watch_fd = -1; /* the write end of the watcher's pipe */
static pid_t huge_watcher = -1;

/* A process of its own session that puts vm.nr_hugepages back to @p saved
 * once the pipe's last write end closes: at tu_huge_end(), or when this
 * process dies, killed with its process group (a test run's timeout, or
 * Ctrl-C), before its teardown could run. */
static void huge_watch(long saved)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) != 0)
		return;
	huge_watcher = fork();
	if (huge_watcher == 0) {
		char buf[32], c;
		int n = snprintf(buf, sizeof(buf), "%ld\n", saved);

		setsid();
		close(huge_lock_fd); /* the flock lives while any of its descriptors does */
		close(p[1]);
		while (read(p[0], &c, 1) != 0 && errno == EINTR)
			;
		int fd = open(TU_NR_HUGEPAGES, O_WRONLY);
		if (fd >= 0 && write(fd, buf, (size_t)n) != n)
			_exit(1);
		_exit(0);
	}
	close(p[0]);
	if (huge_watcher < 0)
		close(p[1]);
	else
		huge_watch_fd = p[1];
}

long tu_meminfo(const char *key)
{
	char line[128];
	long v = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	ck_assert_msg(f != NULL, "/proc/meminfo: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0)
			v = strtol(line + strlen(key), NULL, 10);
	fclose(f);
	ck_assert_msg(v >= 0, "no %s line in /proc/meminfo", key);
	return v;
}

/* vm.nr_hugepages, or -1. */
static long huge_nr(void)
{
	char buf[32] = "";

	if (huge_lock_fd < 0 || pread(huge_lock_fd, buf, sizeof(buf) - 1, 0) <= 0)
		return -1;
	return strtol(buf, NULL, 10);
}

bool tu_huge_begin(void)
{
	if (getuid() != 0 || huge_lock_fd >= 0)
		return false;
	huge_lock_fd = open(TU_NR_HUGEPAGES, O_RDWR | O_CLOEXEC);
	if (huge_lock_fd < 0)
		return false;
	while (flock(huge_lock_fd, LOCK_EX) != 0 && errno == EINTR)
		;
	huge_saved = huge_nr();
	if (huge_saved < 0) {
		tu_huge_end();
		return false;
	}
	huge_watch(huge_saved);
	return true;
}

bool tu_huge_set(long nr)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", nr);

	return huge_lock_fd >= 0 && pwrite(huge_lock_fd, buf, (size_t)n, 0) == n;
}

/* Touch @p pages free huge pages once (a memfd of them, a byte a page,
 * closed): a guest's first touch of memory that its host has not backed
 * yet costs it 10 to 50 ms a huge page, the host's time, which a test of
 * the daemon's own should not measure. */
static void huge_warm(long pages)
{
	size_t page = (size_t)tu_meminfo("Hugepagesize:") * 1024, size = (size_t)pages * page;
	int fd = memfd_create("pinshm-check-warm", MFD_CLOEXEC | MFD_HUGETLB);
	char *p = fd >= 0 && ftruncate(fd, (off_t)size) == 0
			  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
			  : MAP_FAILED;

	if (p != MAP_FAILED) {
		for (size_t off = 0; off < size; off += page)
			p[off] = 1;
		munmap(p, size);
	}
	if (fd >= 0)
		close(fd);
}

bool tu_huge_reserve(long pages)
{
	long total = tu_meminfo("HugePages_Total:"), nfree = tu_meminfo("HugePages_Free:");

	if (nfree < pages)
		(void)tu_huge_set(total + pages - nfree);
	if (tu_meminfo("HugePages_Free:") < pages)
		return false;
	huge_warm(pages);
	return true;
}

void tu_huge_end(void)
{
	if (huge_lock_fd < 0)
		return;
	if (huge_saved >= 0)
		(void)tu_huge_set(huge_saved);
	if (huge_watch_fd >= 0) {
		close(huge_watch_fd); /* the watcher writes the same value, and ends */
		waitpid(huge_watcher, NULL, 0);
		huge_watch_fd = -1;
		huge_watcher = -1;
	}
	close(huge_lock_fd); /* unlocks */
	huge_lock_fd = -1;
	huge_saved = -1;
}

/* ---- channels ---------------------------------------------------------- */

void tu_attr(pinshm_channel_attr_t *attr, pinshm_kind_t kind, uint64_t capacity, unsigned producers,
	     unsigned consumers)
{
	pinshm_channel_attr_init(attr);
	attr->kind = kind;
	attr->capacity = capacity;
	attr->max_message = (uint32_t)tu_max_message(capacity);
	attr->max_producers = producers;
	attr->max_consumers = consumers;
}

int tu_create(const pinshm_channel_attr_t *attr)
{
	int fd = -1;
	int rc = pinshm_segment_create(attr, &fd);

	ck_assert_msg(rc == 0, "pinshm_segment_create: %d (%s)", rc, pinshm_strerror(rc));
	ck_assert_int_ge(fd, 0);
	return fd;
}

int tu_channel(pinshm_kind_t kind, uint64_t capacity, unsigned producers, unsigned consumers)
{
	pinshm_channel_attr_t attr;

	tu_attr(&attr, kind, capacity, producers, consumers);
	return tu_create(&attr);
}

pinshm_channel_t *tu_attach(int fd, pinshm_role_t role)
{
	pinshm_channel_t *ch = NULL;
	int rc = pinshm_channel_attach(fd, role, &ch);

	ck_assert_msg(rc == 0, "pinshm_channel_attach(%s): %d (%s)", role == PINSHM_PRODUCER ? "producer" : "consumer",
		      rc, pinshm_strerror(rc));
	ck_assert_ptr_nonnull(ch);
	return ch;
}

size_t tu_fd_size(int fd)
{
	struct stat st;

	ck_assert_msg(fstat(fd, &st) == 0, "fstat: %s", strerror(errno));
	return (size_t)st.st_size;
}

void *tu_map(int fd, size_t *size)
{
	size_t sz = tu_fd_size(fd);
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
	*size = sz;
	return p;
}

/* ---- byte patterns ----------------------------------------------------- */

uint64_t tu_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Byte i of the stream seeded with @seed: 8 bytes per splitmix64 step. */
static void stream_fill(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;

	while (i < len) {
		uint64_t w = tu_mix(s++);
		for (unsigned k = 0; k < 8 && i < len; k++, i++)
			p[i] = (uint8_t)(w >> (8 * k));
	}
}

static long stream_bad(const uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;

	while (i < len) {
		uint64_t w = tu_mix(s++);
		for (unsigned k = 0; k < 8 && i < len; k++, i++)
			if (p[i] != (uint8_t)(w >> (8 * k)))
				return (long)i;
	}
	return -1;
}

void tu_pattern(void *buf, size_t len, uint64_t seed) { stream_fill(buf, len, tu_mix(seed ^ 0x5a5a5a5a5a5a5a5aull) ^ len); }

long tu_pattern_bad(const void *buf, size_t len, uint64_t seed)
{
	return stream_bad(buf, len, tu_mix(seed ^ 0x5a5a5a5a5a5a5a5aull) ^ len);
}

/* ---- stress message format -------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t msg_key(uint32_t producer, uint64_t seq) { return tu_mix(((uint64_t)producer << 48) ^ seq); }

size_t tu_msg_len(uint32_t producer, uint64_t seq, size_t max_len)
{
	uint64_t r = tu_mix(msg_key(producer, seq) ^ 0x1234567ull);
	size_t extra = max_len > TU_MSG_MIN ? max_len - TU_MSG_MIN : 0;
	size_t small = extra < 200 ? extra : 200;

	if (r % 61 == 0)
		return TU_MSG_MIN + extra; /* the largest */
	if (r % 5 == 0)
		return TU_MSG_MIN; /* no filler */
	if (r % 7 == 0)
		return TU_MSG_MIN + (size_t)((r >> 20) % (extra + 1)); /* anything */
	return TU_MSG_MIN + (size_t)((r >> 20) % (small + 1));
}

static uint64_t msg_sum(const struct tu_msg_head *h, const uint8_t *filler, size_t flen)
{
	uint64_t len = TU_MSG_MIN + flen;
	uint64_t s = 0xcbf29ce484222325ull;

	s = fnv1a(s, &len, sizeof(len));
	s = fnv1a(s, &h->producer, sizeof(h->producer));
	s = fnv1a(s, &h->reserved, sizeof(h->reserved));
	s = fnv1a(s, &h->seq, sizeof(h->seq));
	return fnv1a(s, filler, flen);
}

void tu_msg_fill(void *buf, size_t len, uint32_t producer, uint64_t seq)
{
	struct tu_msg_head h = {.producer = producer, .reserved = 0, .seq = seq, .checksum = 0};
	uint8_t *p = buf;

	stream_fill(p + TU_MSG_MIN, len - TU_MSG_MIN, msg_key(producer, seq));
	h.checksum = msg_sum(&h, p + TU_MSG_MIN, len - TU_MSG_MIN);
	memcpy(p, &h, sizeof(h));
}

int tu_msg_check(const void *buf, size_t len, size_t max_len, uint32_t *producer, uint64_t *seq, char *why,
		 size_t whylen)
{
	struct tu_msg_head h;
	const uint8_t *p = buf;
	long bad;

	if (len < TU_MSG_MIN) {
		snprintf(why, whylen, "message of %zu bytes, shorter than its header", len);
		return -1;
	}
	memcpy(&h, p, sizeof(h));
	if (h.reserved != 0 || msg_sum(&h, p + TU_MSG_MIN, len - TU_MSG_MIN) != h.checksum) {
		snprintf(why, whylen, "bad checksum: len %zu producer %u reserved %u seq %llu", len, h.producer,
			 h.reserved, (unsigned long long)h.seq);
		return -1;
	}
	bad = stream_bad(p + TU_MSG_MIN, len - TU_MSG_MIN, msg_key(h.producer, h.seq));
	if (bad >= 0) {
		snprintf(why, whylen, "bad filler byte %ld: producer %u seq %llu", bad, h.producer,
			 (unsigned long long)h.seq);
		return -1;
	}
	if (max_len && len != tu_msg_len(h.producer, h.seq, max_len)) {
		snprintf(why, whylen, "producer %u seq %llu: length %zu, expected %zu", h.producer,
			 (unsigned long long)h.seq, len, tu_msg_len(h.producer, h.seq, max_len));
		return -1;
	}
	*producer = h.producer;
	*seq = h.seq;
	return 0;
}

/* ---- results from children -------------------------------------------- */

void tu_reporter_open(struct tu_reporter *r)
{
	int p[2];

	ck_assert_msg(pipe2(p, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
	r->rfd = p[0];
	r->wfd = p[1];
}

int tu_report(struct tu_reporter *r, const struct tu_report *rep)
{
	ssize_t n;

	do
		n = write(r->wfd, rep, sizeof(*rep));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(*rep) ? 0 : -EIO;
}

int tu_report_vals(struct tu_reporter *r, int who, int status, uint64_t v0, uint64_t v1)
{
	struct tu_report rep;

	memset(&rep, 0, sizeof(rep));
	rep.who = who;
	rep.status = status;
	rep.v[0] = v0;
	rep.v[1] = v1;
	return tu_report(r, &rep);
}

int tu_collect(struct tu_reporter *r, struct tu_report *rep, int timeout_ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;
	size_t got = 0;

	while (got < sizeof(*rep)) {
		uint64_t now = tu_now_ms();
		struct pollfd pfd = {.fd = r->rfd, .events = POLLIN};
		int prc;
		ssize_t n;

		if (now >= deadline)
			return -ETIMEDOUT;
		prc = poll(&pfd, 1, (int)(deadline - now));
		if (prc < 0 && errno == EINTR)
			continue;
		if (prc < 0)
			return -errno;
		if (prc == 0)
			return -ETIMEDOUT;
		n = read(r->rfd, (char *)rep + got, sizeof(*rep) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		got += (size_t)n;
	}
	return 0;
}

void tu_reporter_close(struct tu_reporter *r)
{
	if (r->rfd >= 0)
		close(r->rfd);
	if (r->wfd >= 0)
		close(r->wfd);
	r->rfd = r->wfd = -1;
}

/* ---- child processes --------------------------------------------------- */

void tu_procs_init(struct tu_procs *ps) { memset(ps, 0, sizeof(*ps)); }

int tu_spawn(struct tu_procs *ps, const char *name, int (*fn)(void *arg, int idx), void *arg, int idx)
{
	pid_t parent = getpid();
	pid_t pid;
	int i;

	ck_assert_int_lt(ps->n, TU_MAX_PROCS);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int rc;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(120);
		rc = fn(arg, idx);
		_exit(rc & 0xff);
	}
	i = ps->n++;
	ps->pid[i] = pid;
	ps->status[i] = 0;
	ps->done[i] = false;
	snprintf(ps->name[i], sizeof(ps->name[i]), "%s", name);
	return i;
}

int tu_wait_one(struct tu_procs *ps, int i, int timeout_ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;
	unsigned nap = 1;

	while (!ps->done[i]) {
		int st;
		pid_t r = waitpid(ps->pid[i], &st, WNOHANG);

		if (r == ps->pid[i]) {
			ps->status[i] = st;
			ps->done[i] = true;
			break;
		}
		if (r < 0 && errno != EINTR) {
			ps->status[i] = -1;
			ps->done[i] = true;
			break;
		}
		if (tu_now_ms() >= deadline)
			return -ETIMEDOUT;
		tu_sleep_ms(nap);
		if (nap < 20)
			nap *= 2;
	}
	return 0;
}

void tu_kill_all(struct tu_procs *ps)
{
	for (int i = 0; i < ps->n; i++)
		if (!ps->done[i])
			kill(ps->pid[i], SIGKILL);
	for (int i = 0; i < ps->n; i++) {
		if (!ps->done[i]) {
			int st;

			while (waitpid(ps->pid[i], &st, 0) < 0 && errno == EINTR)
				;
			ps->status[i] = st;
			ps->done[i] = true;
		}
	}
}

int tu_wait_all(struct tu_procs *ps, int timeout_ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;

	for (int i = 0; i < ps->n; i++) {
		uint64_t now = tu_now_ms();
		int left = now >= deadline ? 0 : (int)(deadline - now);

		if (tu_wait_one(ps, i, left) != 0) {
			tu_kill_all(ps);
			return -ETIMEDOUT;
		}
	}
	return 0;
}

const char *tu_status_str(int status, char *buf, size_t len)
{
	if (status == -1)
		snprintf(buf, len, "lost (waitpid failed)");
	else if (WIFEXITED(status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "status 0x%x", status);
	return buf;
}

void tu_wait_all_ok(struct tu_procs *ps, int timeout_ms)
{
	int rc = tu_wait_all(ps, timeout_ms);
	char desc[TU_MAX_PROCS * 48 + 1] = "";
	size_t off = 0;
	bool ok = true;

	for (int i = 0; i < ps->n; i++) {
		char s[40];

		if (ps->done[i] && WIFEXITED(ps->status[i]) && WEXITSTATUS(ps->status[i]) == 0)
			continue;
		ok = false;
		if (off < sizeof(desc) - 1)
			off += (size_t)snprintf(desc + off, sizeof(desc) - off, " %s:%s", ps->name[i],
						tu_status_str(ps->status[i], s, sizeof(s)));
	}
	ck_assert_msg(rc == 0, "children did not finish within %d ms (killed):%s", timeout_ms, desc);
	ck_assert_msg(ok, "children failed:%s", desc);
}

void tu_child_fail(int code, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[child %d] %s\n", (int)getpid(), buf);
	fflush(stderr);
	_exit(code ? code : 1);
}

bool tu_rc_in(int rc, const int *allowed)
{
	if (rc == 0)
		return true;
	for (const int *a = allowed; *a; a++)
		if (rc == *a)
			return true;
	return false;
}

int tu_run_suite(Suite *s, bool force_fork)
{
	SRunner *sr = srunner_create(s);

	if (force_fork)
		srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed;
}

void tu_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	for (;;) {
		ssize_t r = read(fd, buf + n, len - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
}

int tu_hide_system_daemon(void)
{
	char dir[] = PROTO_SYSTEM_SOCKET;
	struct stat st;

	dirname(dir);
	if (unshare(CLONE_NEWNS) != 0)
		return -errno;
	/* Mounts made here must not reach the machine's namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return -errno;
	if (stat(dir, &st) != 0)
		return errno == ENOENT ? 0 : -errno; /* no folder: no socket either */
	return mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") == 0 ? 0 : -errno;
}
