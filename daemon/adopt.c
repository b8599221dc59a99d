/*
 * adopt.c - restart adoption: the channels (and their consumers' wake-up
 * sockets) that the descriptor store hands a daemon that starts, checked
 * and adopted.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "adopt.h"
#include "watch.h"
#include "seg.h"
#include "fdstore.h"
#include "record.h"
#include "log.h"

#define ADOPT_KEEPER_ID UINT64_MAX /* the grace's pseudo-connection */

unsigned adopt_take_listen_fds(struct adopt *a)
{
	const char *pid = getenv("LISTEN_PID"), *nfds = getenv("LISTEN_FDS"), *names = getenv("LISTEN_FDNAMES");
	char *end;

	*a = (struct adopt){0};
	if (!pid || !nfds || strtol(pid, &end, 10) != (long)getpid() || *end)
		goto out;
	unsigned long n = strtoul(nfds, &end, 10);
	if (*end || n == 0 || n > ADOPT_MAX_FDS)
		goto out;
	a->fds = calloc(n, sizeof(*a->fds));
	if (!a->fds)
		goto out;
	const char *p = names ? names : "";
	for (unsigned i = 0; i < n; i++) {
		int fd = 3 + (int)i;
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
			continue; /* not open after all */
		a->fds[a->nfds].fd = fd;
		a->fds[a->nfds].name = strndup(p, len);
		if (!a->fds[a->nfds].name) {
			close(fd);
			continue;
		}
		a->nfds++;
		p = colon ? colon + 1 : p + len;
	}
out:
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return a->nfds;
}


/* Reference @p chan from the grace's pseudo-connection. */
static int keep_ref(struct adopt *a, struct channel *chan)
{
	struct reg_client *k = &a->keep;

	if (k->nrefs == k->cap) {
		unsigned cap = k->cap ? k->cap * 2 : 16;
		struct channel **refs = realloc(k->refs, cap * sizeof(*refs));
		if (!refs)
			return -ENOMEM;
		k->refs = refs;
		k->cap = cap;
	}
	k->refs[k->nrefs++] = chan;
	chan->refs++;
	return 0;
}

/* Close @p fd, named @p fdname, a second record of the segment @p st of
 * @p chan, adopted from an earlier one: not a second channel, nor a second
 * charge.  Its record leaves the store; where it bears the name of @p chan's
 * own, that removal takes both (FDSTOREREMOVE drops every descriptor of a
 * name), so @p chan is stored again under it. */
static void adopt_duplicate(struct channel *chan, int fd, const char *fdname, const struct stat *st)
{
	char own[FDSTORE_NAME_MAX];
	struct record rec;

	log_warn("descriptor store: '%.300s' is a second record of the segment of channel '%s' (device %llu, "
		 "inode %llu): closed, not adopted twice",
		 fdname, chan->name, (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
	close(fd);
	if (!record_service())
		return;
	record_drop(fdname);
	registry_record(chan, &rec);
	record_name(&rec, chan->seg.fd, own, sizeof(own));
	if (strcmp(own, fdname) == 0)
		registry_store(chan);
}

/* The channel that record @p rec describes, its geometry @p g: named and
 * in the store already. */
static void channel_from_record(struct channel *chan, const struct record *rec, const struct seg_geometry *g,
				uint32_t default_pin_idle)
{
	snprintf(chan->name, sizeof(chan->name), "%s", rec->name);
	chan->persistent = rec->flags & PINSHM_PERSISTENT;
	chan->uid = rec->uid;
	chan->gid = rec->gid;
	chan->mode = rec->mode;
	chan->attr = rec->attr;
	chan->g = *g;
	/* A record of version 1 (an older daemon's) has no pin_idle: the
	 * configured default, as a create that gives none. */
	chan->pin_idle = rec->version >= 2 ? rec->pin_idle : default_pin_idle;
	chan->named = true;
	chan->stored = true; /* its record is there already */
}

static void log_adopted(const struct channel *chan, unsigned version)
{
	char idle[64] = "always locked";

	if (chan->pin_idle)
		snprintf(idle, sizeof(idle), "unlocked after %u s unused", chan->pin_idle);
	log_notice("channel '%s' adopted from the descriptor store: uid %u, %zu bytes, to be locked, %s%s", chan->name,
		   (unsigned)chan->uid, chan->seg.size, idle,
		   version < 2 ? " (an older daemon's record: the default pin_idle)" : "");
}

/* Adopt descriptor @p fd named @p fdname.  @return 0, or -errno (logged). */
static int adopt_one(struct adopt *a, int fd, const char *fdname)
{
	struct registry *r = a->reg;
	struct record rec;
	struct seg_geometry g;
	char why[256] = "";
	struct stat st;
	struct channel *chan = NULL;
	int rc = record_parse(fdname, &rec, why, sizeof(why));

	if (rc == 0 && seg_geometry_compute(&rec.attr, &g) != 0) {
		snprintf(why, sizeof(why), "an invalid geometry");
		rc = -EINVAL;
	}
	if (rc != 0) {
		log_warn("descriptor store: '%.300s' is not a channel's record (%s): closed", fdname, why);
		close(fd);
		goto unstore;
	}
	if (fstat(fd, &st) != 0 || (unsigned long long)st.st_ino != rec.ino) {
		snprintf(why, sizeof(why), "the record names inode %llu, not the descriptor's", rec.ino);
		rc = -EINVAL;
		goto fail;
	}
	if (record_removed(st.st_mode)) {
		log_notice("descriptor store: channel '%s' was unlinked before the last stop, its removal from the "
			   "store lost: not adopted again, its record removed",
			   rec.name);
		close(fd);
		rc = -ENOENT;
		goto unstore;
	}
	struct channel *first = registry_find_segment(r, &st);
	if (first) {
		adopt_duplicate(first, fd, fdname, &st);
		return -EEXIST;
	}
	chan = calloc(1, sizeof(*chan));
	if (chan)
		chan->holder = calloc(g.max_producers + g.max_consumers, sizeof(*chan->holder));
	if (!chan || !chan->holder) {
		rc = -ENOMEM;
		snprintf(why, sizeof(why), "out of memory");
		goto fail;
	}
	rc = segment_attach(fd, &g, rec.node, &chan->seg, why, sizeof(why));
	if (rc != 0)
		goto fail;
	fd = -1; /* the segment's now */
	rc = account_charge(r->acct, rec.uid, chan->seg.size, why, sizeof(why)); /* as a create */
	if (rc != 0)
		goto fail;
	channel_from_record(chan, &rec, &g, r->acct->cfg->pin_idle);
	rc = registry_insert(r, chan, why, sizeof(why));
	if (rc != 0) {
		account_release(r->acct, chan->uid, chan->seg.size, true); /* charged pinned, nothing locked */
		goto fail;
	}
	locking_add(&r->locking, r->acct, chan, &a->lock_at_once); /* then a slice a loop turn (locking.h) */
	if (rec.version < 2 && record_service()) {
		/* In the store again under this version's record, the old one
		 * removed first: systemd keeps a descriptor it has once, under
		 * its first name, and would ignore the new one. */
		record_drop(fdname);
		registry_store(chan);
	}
	if (!chan->persistent && keep_ref(a, chan) != 0)
		log_warn("channel '%s': no grace for its users to come back (out of memory)", chan->name);
	log_adopted(chan, rec.version);
	return 0; /* its endpoints judged once the eventfds are back (adopt_listen_fds()) */
fail:
	log_warn("descriptor store: channel '%s' not adopted: %s", rec.name, why);
	if (chan) {
		if (chan->seg.base)
			segment_destroy(&chan->seg);
		free(chan->holder);
		free(chan);
	}
	if (fd >= 0)
		close(fd);
unstore: /* Out of the store too: systemd would hand it back at every start. */
	record_drop(fdname);
	return rc;
}

/* Keep eventfd @p fd, named @p fdname, for its endpoint of a channel
 * adopted from the store: the record names the channel and its segment's
 * device and inode, all three must match (one lookup by name, one fstat).
 * A record of another version, of no such channel, or a second one for the
 * same endpoint (ambiguous: both dropped) is closed and out of the store. */
static void adopt_notify_fd(struct registry *r, int fd, const char *fdname)
{
	unsigned long long dev, ino;
	unsigned endpoint;
	const char *name;
	char why[160] = "no channel adopted from the store has that name, device and inode";
	struct stat st;

	if (!record_wakeup_parse(fdname, &dev, &ino, &endpoint, &name)) {
		snprintf(why, sizeof(why), "not an eventfd's record of this daemon's version");
	} else {
		struct channel *chan = registry_find(r, name);
		if (chan && chan->stored && fstat(chan->seg.fd, &st) == 0 && (unsigned long long)st.st_dev == dev &&
		    (unsigned long long)st.st_ino == ino) {
			if (endpoint >= chan->g.max_producers && endpoint < chan->g.max_producers + chan->g.max_consumers &&
			    chan->notify_fd && chan->notify_fd[endpoint - chan->g.max_producers] >= 0) {
				/* Which is the consumer's is unknown: neither is kept. */
				registry_forget_notify(r, chan, endpoint);
				snprintf(why, sizeof(why), "a second eventfd for endpoint %u of '%s': both dropped",
					 endpoint, chan->name);
			} else if (registry_keep_notify(r, chan, endpoint, &fd, why, sizeof(why)) == 0) {
				log_info("channel '%s': endpoint %u's eventfd back from the descriptor store",
					 chan->name, endpoint);
				return;
			}
		}
	}
	log_warn("descriptor store: '%s' not kept: %s", fdname, why);
	if (fd >= 0)
		close(fd);
	record_drop(fdname);
}

unsigned adopt_listen_fds(struct adopt *a, struct registry *reg)
{
	unsigned n = 0;

	a->reg = reg;
	a->lock_at_once = LOCKING_START_BYTES;
	a->keep.id = ADOPT_KEEPER_ID;
	/* The channels, then their consumers' eventfds, then the endpoints
	 * judged: a reap wakes the consumers armed on those eventfds. */
	for (unsigned i = 0; i < a->nfds; i++)
		if (strncmp(a->fds[i].name, RECORD_WAKEUP_PREFIX, strlen(RECORD_WAKEUP_PREFIX)) != 0)
			n += adopt_one(a, a->fds[i].fd, a->fds[i].name) == 0;
	for (unsigned i = 0; i < a->nfds; i++)
		if (strncmp(a->fds[i].name, RECORD_WAKEUP_PREFIX, strlen(RECORD_WAKEUP_PREFIX)) == 0)
			adopt_notify_fd(reg, a->fds[i].fd, a->fds[i].name);
	for (struct channel *chan = reg->first; chan; chan = chan->next)
		watch_judge_endpoints(reg, chan); /* no connection holds any yet */
	for (unsigned i = 0; i < a->nfds; i++)
		free(a->fds[i].name);
	free(a->fds);
	a->fds = NULL;
	a->nfds = 0;
	if (a->keep.nrefs) {
		/* A test hook shortens the grace. */
		const char *t = getenv("PINSHMD_TEST_ADOPT_GRACE_MS");
		unsigned long grace = t && t[0] ? strtoul(t, NULL, 10) : ADOPT_GRACE_MS;
		a->grace_end = clock_now_ms() + (grace ? grace : 1);
	}
	if (n)
		log_notice("%u channel%s adopted from the descriptor store", n, n == 1 ? "" : "s");
	return n;
}

uint64_t adopt_grace_due(const struct adopt *a)
{
	return a->grace_end;
}

void adopt_grace_end(struct adopt *a)
{
	a->grace_end = 0;
	if (a->reg && a->keep.nrefs)
		registry_client_gone(a->reg, &a->keep);
	registry_client_forget(&a->keep);
}

void adopt_fini(struct adopt *a)
{
	record_stop();
	for (unsigned i = 0; i < a->nfds; i++) {
		close(a->fds[i].fd);
		free(a->fds[i].name);
	}
	free(a->fds);
	a->fds = NULL;
	a->nfds = 0;
	a->grace_end = 0;
	registry_client_forget(&a->keep); /* the registry goes next, without reaping */
}
