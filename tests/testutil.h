/*
 * testutil.h - helpers shared by the Check tests of pinshm.
 *
 * - channels: make a channel from an attr (memfd), attach or fail the test,
 *   map a segment to look at or corrupt it;
 * - a self-checking message format for the stress tests: a header
 *   {producer, reserved, seq, checksum} then filler bytes derived from
 *   (producer, seq), of a length derived from (producer, seq);
 * - byte patterns for messages of any length (0 included);
 * - a pipe on which forked children report results to the test process;
 * - fork N children that die with their parent, and wait for them all with
 *   a deadline (killing them and failing the test on timeout).
 *
 * Children never call ck_assert (a failed assertion in a grandchild of the
 * Check runner would be reported as the test's own result): they print why
 * with tu_child_fail()/tu_msg_check() and exit with a non-zero status.
 */
#ifndef PINSHM_TESTUTIL_H
#define PINSHM_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pinshm.h"

/* Sanitizers slow everything down: the stress tests divide their message
 * counts by TU_SLOWDOWN. */
#if defined(__SANITIZE_THREAD__)
#define TU_SLOWDOWN 10
#elif defined(__SANITIZE_ADDRESS__)
#define TU_SLOWDOWN 3
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_SLOWDOWN 10
#elif __has_feature(address_sanitizer)
#define TU_SLOWDOWN 3
#endif
#endif
#ifndef TU_SLOWDOWN
#define TU_SLOWDOWN 1
#endif

/** Fail the test unless @p expr evaluates to @p want (an int, often a negative errno). */
#define TU_RC(expr, want)                                                                                     \
	do {                                                                                                  \
		int tu_rc_ = (expr);                                                                          \
		int tu_want_ = (want);                                                                        \
		ck_assert_msg(tu_rc_ == tu_want_, "%s: got %d (%s), want %d (%s)", #expr, tu_rc_,             \
			      tu_rc_ < 0 ? pinshm_strerror(tu_rc_) : "ok", tu_want_,                          \
			      tu_want_ < 0 ? pinshm_strerror(tu_want_) : "ok");                               \
	} while (0)

/* ---- clocks ------------------------------------------------------------ */

/** @return CLOCK_MONOTONIC in milliseconds. */
uint64_t tu_now_ms(void);
/** Sleep @p ms milliseconds (restarting on EINTR). */
void tu_sleep_ms(unsigned ms);
/** Whether eventfd @p efd reads a write within @p ms (and clears it). */
bool tu_efd_written(int efd, int ms);

/* ---- channels ---------------------------------------------------------- */

/**
 * Fill @p attr: pinshm_channel_attr_init(), then kind, capacity, counts and
 * max_message = capacity / 2 - 32 (the largest allowed).
 */
void tu_attr(pinshm_channel_attr_t *attr, pinshm_kind_t kind, uint64_t capacity, unsigned producers,
	     unsigned consumers);


/** Run every test of @p s (in forked children; with @p force_fork even
 * where CK_FORK=no asks otherwise) and free it.
 * @return the number of tests that failed. */
int tu_run_suite(Suite *s, bool force_fork);
/** pinshm_segment_create() or fail the test. @return the descriptor. */
int tu_create(const pinshm_channel_attr_t *attr);

/** tu_attr() + tu_create(). */
int tu_channel(pinshm_kind_t kind, uint64_t capacity, unsigned producers, unsigned consumers);

/** pinshm_channel_attach() or fail the test. */
pinshm_channel_t *tu_attach(int fd, pinshm_role_t role);

/** Map the whole of segment @p fd (read-write, shared); fail the test on error. */
void *tu_map(int fd, size_t *size);
/** The size of the file behind @p fd (fails the test on error). */
size_t tu_fd_size(int fd);

/** The largest payload of a channel of @p capacity (capacity / 2 - 32). */
static inline size_t tu_max_message(uint64_t capacity) { return (size_t)(capacity / 2 - 32); }

/* ---- huge pages (root) ------------------------------------------------- */

/** Field @p key of /proc/meminfo ("HugePages_Free:", "Shmem:"), in its own
 *  unit (pages, kB); fails the test where there is none. */
long tu_meminfo(const char *key);

/**
 * Take the huge pages of the machine for this process (its children
 * included) until tu_huge_end(): a lock on vm.nr_hugepages (flock of its
 * /proc/sys file, which every test of pinshm that changes it takes: make
 * check runs them side by side) and its value, to be put back.  Call it
 * from an unchecked fixture, in the runner's process: a test that fails,
 * or times out, is then cleaned up after all the same; a process of its
 * own session puts the value back if the runner itself is killed.  @return false
 * where it cannot (not root): then nothing is changed.
 */
bool tu_huge_begin(void);

/** Set vm.nr_hugepages to @p nr (after tu_huge_begin()).  @return whether
 *  the kernel took the value (it may reserve fewer: see HugePages_Total). */
bool tu_huge_set(long nr);

/** Raise vm.nr_hugepages until @p pages huge pages are free, as far as
 *  the kernel can (after tu_huge_begin()), and touch them once (a virtual
 *  machine's first touch of a page is its host's cost, not the tested
 *  code's).  @return whether they are free. */
bool tu_huge_reserve(long pages);

/** Put vm.nr_hugepages back as tu_huge_begin() found it, and unlock it
 *  (nothing where tu_huge_begin() failed). */
void tu_huge_end(void);

/* ---- byte patterns (any length) --------------------------------------- */

/** Fill @p len bytes with a pattern derived from @p seed. */
void tu_pattern(void *buf, size_t len, uint64_t seed);
/** @return -1 if @p buf holds tu_pattern(len, seed), else the first bad index. */
long tu_pattern_bad(const void *buf, size_t len, uint64_t seed);

/* ---- stress message format -------------------------------------------- */

struct tu_msg_head {
	uint32_t producer;
	uint32_t reserved; /* 0 */
	uint64_t seq;
	uint64_t checksum; /* FNV-1a 64 over len, producer, reserved, seq and the filler */
};
#define TU_MSG_MIN ((size_t)sizeof(struct tu_msg_head))

/** A 64-bit mix (splitmix64 finaliser). */
uint64_t tu_mix(uint64_t x);

/**
 * The length of message @p seq of @p producer: at least TU_MSG_MIN, at most
 * @p max_len, mostly small, sometimes exactly TU_MSG_MIN (no filler) and
 * sometimes @p max_len.
 */
size_t tu_msg_len(uint32_t producer, uint64_t seq, size_t max_len);

/** Write message (@p producer, @p seq) of @p len bytes (>= TU_MSG_MIN) into @p buf. */
void tu_msg_fill(void *buf, size_t len, uint32_t producer, uint64_t seq);

/**
 * Check a received message.  @p max_len, if not 0, also checks that its
 * length is tu_msg_len(producer, seq, max_len).
 * @return 0 and set *producer, *seq; or -1 and describe the fault in @p why.
 */
int tu_msg_check(const void *buf, size_t len, size_t max_len, uint32_t *producer, uint64_t *seq, char *why,
		 size_t whylen);

/* ---- results from children -------------------------------------------- */

struct tu_report {
	int32_t who;    /* the child's index */
	int32_t status; /* 0: ok */
	uint64_t v[6];  /* test-defined values */
	char text[400]; /* test-defined text */
};

struct tu_reporter {
	int rfd, wfd;
};

/** Open the pipe (before forking). */
void tu_reporter_open(struct tu_reporter *r);
/** Child side: send one report (one atomic write). @return 0 or -errno. */
int tu_report(struct tu_reporter *r, const struct tu_report *rep);
/** Child side: shorthand for a report with a status and up to two values. */
int tu_report_vals(struct tu_reporter *r, int who, int status, uint64_t v0, uint64_t v1);
/**
 * Parent side: read one report, waiting at most @p timeout_ms.
 * @return 0, or -ETIMEDOUT / -EPIPE (every writer gone) / -errno.
 */
int tu_collect(struct tu_reporter *r, struct tu_report *rep, int timeout_ms);
void tu_reporter_close(struct tu_reporter *r);

/* ---- child processes --------------------------------------------------- */

#define TU_MAX_PROCS 32

struct tu_procs {
	int n;
	pid_t pid[TU_MAX_PROCS];
	int status[TU_MAX_PROCS];
	bool done[TU_MAX_PROCS];
	char name[TU_MAX_PROCS][32];
};

void tu_procs_init(struct tu_procs *ps);

/**
 * Fork a child that runs fn(arg, idx) and _exit()s with its return value.
 * The child gets SIGKILL if the test process dies.  Fails the test if fork
 * fails.  @return the child's index in @p ps.
 */
int tu_spawn(struct tu_procs *ps, const char *name, int (*fn)(void *arg, int idx), void *arg, int idx);

/**
 * Wait for child @p i until @p timeout_ms passes.
 * @return 0 (ps->status[i] set), or -ETIMEDOUT (the child is left running).
 */
int tu_wait_one(struct tu_procs *ps, int i, int timeout_ms);

/**
 * Wait for every child until @p timeout_ms passes; on timeout kill those
 * still running (SIGKILL) and reap them.  @return 0, or -ETIMEDOUT.
 */
int tu_wait_all(struct tu_procs *ps, int timeout_ms);

/** tu_wait_all(), then fail the test unless every child exited with status 0. */
void tu_wait_all_ok(struct tu_procs *ps, int timeout_ms);

/** Kill (SIGKILL) and reap every child still running. */
void tu_kill_all(struct tu_procs *ps);

/** Describe a wait status ("exit 3", "signal 9") into @p buf. */
const char *tu_status_str(int status, char *buf, size_t len);

/** Read the file @p path into @p buf (at most @p len - 1 bytes, NUL-terminated); fail the test if it cannot be opened. */
void tu_read_file(const char *path, char *buf, size_t len);

/** In a child: print "why" to stderr and _exit(code). */
void tu_child_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/** @return true if @p rc is 0 or one of the negative errnos listed (terminated by 0). */
bool tu_rc_in(int rc, const int *allowed);

/**
 * Hide the machine's system daemon from this process and its children to
 * come: a private mount namespace with an empty tmpfs on the folder of
 * the system socket (/run/pinshm), so that pinshm_connect(NULL) finds no
 * daemon there, whatever runs on the machine (root only).
 * @return 0, or -errno where no namespace could be made (nothing changed).
 */
int tu_hide_system_daemon(void);

#endif /* PINSHM_TESTUTIL_H */
