/*
 * fdstore.c - the descriptor store's notifications, in order, with the
 * removals that could not be sent yet.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "fdstore.h"
#include "log.h"
#include "notify.h"

/* A notification that waits to be sent. */
struct pending {
	char name[FDSTORE_NAME_MAX];
	int fd;         /* a store's duplicate of its descriptor; -1: a removal */
	uint64_t since; /* when it was first not sent, ms */
};

static struct pending pending[FDSTORE_PENDING_MAX]; /* in the order to send */
static unsigned npending;
static uint64_t retry_at; /* fdstore_retry() due */

static uint64_t retry_ms(void)
{
	const char *t = getenv("PINSHMD_TEST_STORE_RETRY_MS");

	return t && t[0] ? strtoull(t, NULL, 10) : FDSTORE_RETRY_MS;
}

static int send_one(const char *fdname, int fd, bool may_wait)
{
	char state[FDSTORE_NAME_MAX + 32];

	snprintf(state, sizeof(state), "%s\nFDNAME=%s", fd >= 0 ? "FDSTORE=1" : "FDSTOREREMOVE=1", fdname);
	return may_wait ? notify_systemd_fd(state, fd) : notify_systemd_try(state, fd);
}

static void drop(unsigned i)
{
	if (pending[i].fd >= 0)
		close(pending[i].fd);
	memmove(&pending[i], &pending[i + 1], (npending - i - 1) * sizeof(pending[0]));
	npending--;
}

/* Whether anything of the name @p fdname waits. */
static bool waits(const char *fdname)
{
	for (unsigned i = 0; i < npending; i++)
		if (strcmp(pending[i].name, fdname) == 0)
			return true;
	return false;
}

/* Append (@p fd a store's duplicate, or -1); the caller checked the room. */
static void append(const char *fdname, int fd)
{
	struct pending *p = &pending[npending++];

	snprintf(p->name, sizeof(p->name), "%s", fdname);
	p->fd = fd;
	p->since = clock_now_ms();
	if (npending == 1)
		retry_at = p->since + retry_ms();
}

/* Send what waits, in order, up to the first that cannot go.  @return
 * whether nothing waits now. */
static bool flush(bool may_wait)
{
	while (npending) {
		struct pending *p = &pending[0];
		if (send_one(p->name, p->fd, may_wait) < 0) {
			retry_at = clock_now_ms() + retry_ms();
			return false;
		}
		log_notice("descriptor store: '%s' %s, %llu ms after it was held back", p->name,
			   p->fd >= 0 ? "kept at last (behind the removal of its name)" : "removed at last",
			   (unsigned long long)(clock_now_ms() - p->since));
		drop(0);
	}
	return true;
}

int fdstore_put(const char *fdname, int fd)
{
	if (strlen(fdname) >= FDSTORE_NAME_MAX)
		return -ENAMETOOLONG;
	if (flush(true) || !waits(fdname)) {
		int rc = send_one(fdname, fd, true);
		return rc < 0 ? rc : 0;
	}
	if (npending == FDSTORE_PENDING_MAX)
		return -ENOBUFS;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -errno;
	append(fdname, dup);
	return 0;
}

void fdstore_remove(const char *fdname)
{
	int rc = -EAGAIN; /* not tried: what waits before it goes first */

	if (strlen(fdname) >= FDSTORE_NAME_MAX) {
		log_warn("descriptor store: '%.64s...' not removed: %s", fdname, strerror(ENAMETOOLONG));
		return;
	}
	if (flush(true)) {
		rc = send_one(fdname, -1, true);
		if (rc >= 0)
			return;
	} else if (waits(fdname)) {
		/* A removal of it waits, or a store that went after one: the
		 * stores go, and that removal (sent or not) covers the rest. */
		for (unsigned i = npending; i-- > 0;)
			if (pending[i].fd >= 0 && strcmp(pending[i].name, fdname) == 0)
				drop(i);
		return;
	}
	if (npending == FDSTORE_PENDING_MAX) {
		log_warn("descriptor store: '%s' not removed: %u notifications wait to be sent, the most; the next "
			 "start will find the record",
			 fdname, npending);
		return;
	}
	append(fdname, -1);
	log_warn("descriptor store: '%s' not removed yet: %s; sent again once notifications get through", fdname,
		 rc == -EAGAIN ? "others wait before it" : strerror(-rc));
}

uint64_t fdstore_due(void)
{
	return npending ? retry_at : 0;
}

void fdstore_retry(void)
{
	flush(false);
}

void fdstore_stop(void)
{
	flush(true);
	for (unsigned i = 0; i < npending; i++)
		log_warn("descriptor store: '%s' not %s at the stop%s", pending[i].name,
			 pending[i].fd >= 0 ? "kept" : "removed",
			 pending[i].fd >= 0 ? "" : ": the next start will find the record");
	while (npending)
		drop(npending - 1);
}
