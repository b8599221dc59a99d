/*
 * nested.h - the processes of nested PID namespaces (containers): a
 * client there records its own pids in a segment, which the daemon finds
 * by their NSpid lines (registry.h states what is judged from them).
 */
#ifndef PINSHMD_NESTED_H
#define PINSHMD_NESTED_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define REGISTRY_NESTED_MAX 65536u    /* processes of nested PID namespaces one scan of /proc keeps */
#define REGISTRY_NESTED_SCAN_MS 1000u /* a scan of /proc is reused for so long, and 50 times its own time */

/* The processes of nested PID namespaces (their NSpid lines), found by one
 * scan of /proc and reused by the adoptions that follow it for a while:
 * a client may record any pid of any of them for an endpoint. */
struct nested_procs {
	uint64_t fresh_until;    /* ms: reused until then (0: never scanned) */
	uint64_t started;        /* ms: when the scan under way, or the last, began */
	DIR *dir;                /* /proc, while a scan is under way (a slice a turn), else NULL */
	bool truncated;          /* stopped (a status unread, REGISTRY_NESTED_MAX kept): others unknown */
	unsigned n, cap;
	struct nested_proc {
		uint32_t inner;  /* its pid in its own namespace */
		pid_t here;      /* in the daemon's */
	} *p;
};

/**
 * The processes of nested PID namespaces, in @p np: /proc scanned again
 * once the last scan is no longer fresh, the status of at most @p max
 * processes read by this call (a scan may take several, np->dir open
 * meanwhile).  A process started since the scan is missed there (an owner
 * that started so late is taken for gone).  A scan stops, truncated, where
 * it cannot read on (/proc, a process's status) or keep more: a pid looked
 * for in it is then not judged.  @return whether the scan is complete
 * (fresh).
 */
bool nested_scan_step(struct nested_procs *np, unsigned max);

/**
 * The pid that process @p pid has in its own PID namespace, where that is
 * not the daemon's (its NSpid line has more than one), else 0, in
 * *@p inner.  @return false where its status could not be read though the
 * process may live (not ENOENT or ESRCH: it is gone).
 */
bool nested_pid(pid_t pid, uint32_t *inner);

#endif /* PINSHMD_NESTED_H */
