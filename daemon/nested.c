/*
 * nested.c - the processes of nested PID namespaces, found by a scan of
 * /proc in slices (nested.h).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "nested.h"

bool nested_pid(pid_t pid, uint32_t *inner)
{
	char path[64], line[512];

	*inner = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT || errno == ESRCH;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		unsigned n = 0;
		char *p = line + 6, *end;
		for (unsigned long v; (v = strtoul(p, &end, 10)), end != p; p = end, n++)
			*inner = v <= UINT32_MAX ? (uint32_t)v : 0;
		if (n < 2)
			*inner = 0;
		break;
	}
	fclose(f);
	return true;
}

/* Keep process @p here, pid @p inner in its own namespace, in @p np.
 * @return false past REGISTRY_NESTED_MAX, or short of memory. */
static bool nested_add(struct nested_procs *np, uint32_t inner, pid_t here)
{
	if (np->n == np->cap) {
		unsigned cap = np->cap ? np->cap * 2 : 16;
		struct nested_proc *p = cap <= REGISTRY_NESTED_MAX ? realloc(np->p, cap * sizeof(*p)) : NULL;
		if (!p)
			return false;
		np->p = p;
		np->cap = cap;
	}
	np->p[np->n++] = (struct nested_proc){.inner = inner, .here = here};
	return true;
}

bool nested_scan_step(struct nested_procs *np, unsigned max)
{
	if (!np->dir) {
		np->started = clock_now_ms();
		if (np->started < np->fresh_until)
			return true;
		np->n = 0;
		np->dir = opendir("/proc");
		np->truncated = np->dir == NULL;
	}
	for (unsigned k = 0; np->dir && !np->truncated;) {
		if (k == max)
			return false;
		errno = 0;
		struct dirent *e = readdir(np->dir);
		if (!e) {
			np->truncated = errno != 0;
			break;
		}
		char *end;
		long here = strtol(e->d_name, &end, 10);
		uint32_t inner;
		if (*end != '\0' || here <= 0 || here > INT_MAX)
			continue;
		k++;
		np->truncated = !nested_pid((pid_t)here, &inner) || (inner && !nested_add(np, inner, (pid_t)here));
	}
	if (np->dir)
		closedir(np->dir);
	np->dir = NULL;
	uint64_t now = clock_now_ms(), took = now - np->started;
	np->fresh_until = now + (took * 50 > REGISTRY_NESTED_SCAN_MS ? took * 50 : REGISTRY_NESTED_SCAN_MS);
	log_debug("scanned /proc for processes of nested PID namespaces: %u found%s, in %llu ms", np->n,
		  np->truncated ? " (stopped there: a status unread, or the most kept)" : "", (unsigned long long)took);
	return true;
}
