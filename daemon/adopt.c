/*
 * adopt.c - the descriptor store: names written, names read, segments
 * checked and adopted.
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
#include "seg.h"
#include "fdstore.h"
#include "log.h"

#define ADOPT_KEEPER_ID UINT64_MAX /* the grace's pseudo-connection */

#ifndef F_SEAL_SHRINK
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif

/* Set by adopt_fini(): the channels destroyed at a stop stay in the store,
 * for the next start (systemd empties it when the unit stops for good). */
static bool stopping;

/* In service mode only: systemd (or what stands in for it) listens. */
static bool service_mode(void)
{
	const char *s = getenv("NOTIFY_SOCKET");

	return s && s[0] && !stopping;
}

/* The mode of a segment whose channel left the store (adopt_unstore()). */
#define REMOVED_MODE 0

#define RECORD_V1 "pinshm.1."  /* an older daemon's: no PINIDLE (the configured default) */
#define RECORD_V2 "pinshm.2."  /* this daemon's */
#define RECORD_NODE_MAX 1023   /* libnuma's most */

/* "pinshm.2.INO.UID.GID.MODE.FLAGS.KIND.GFLAGS.CAPACITY.MAXMSG.PROD.CONS.NODE.PINIDLE.NAME"
 * of @p ch into @p buf. */
static void record_name(const struct channel *ch, char *buf, size_t len)
{
	struct stat st;
	unsigned long long ino = fstat(ch->seg.fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;

	snprintf(buf, len, RECORD_V2 "%llu.%u.%u.%o.%u.%u.%u.%" PRIu64 ".%u.%u.%u.%d.%u.%s", ino, (unsigned)ch->uid,
		 (unsigned)ch->gid, ch->mode, ch->persistent ? PINSHM_PERSISTENT : 0u, (unsigned)ch->attr.kind,
		 ch->attr.flags, ch->attr.capacity, ch->attr.max_message, ch->attr.max_producers,
		 ch->attr.max_consumers, ch->seg.at_consumer ? PINSHM_NODE_CONSUMER : ch->seg.node, ch->pin_idle,
		 ch->name);
}

bool adopt_store(const struct channel *ch)
{
	char name[FDSTORE_NAME_MAX];

	if (!service_mode())
		return false;
	record_name(ch, name, sizeof(name));
	int rc = fdstore_put(name, ch->seg.fd);
	if (rc < 0)
		log_warn("channel '%s': not kept in the descriptor store: %s", ch->name, strerror(-rc));
	return rc >= 0;
}

void adopt_unstore(const struct channel *ch)
{
	char name[FDSTORE_NAME_MAX];

	if (!service_mode())
		return;
	/* Its removal from the store may wait (the manager's queue full) and
	 * be lost with this daemon (kill -9): the file itself says it was
	 * removed, with a mode no segment has otherwise (REMOVED_MODE), which
	 * only its owner, this daemon's user, may change.  The next start
	 * drops a record of such a file (adopt_one()).  Only a segment of the
	 * daemon's own that it stored: one a client handed back (ADOPT) may
	 * be any file the client could open, another user's too. */
	if (ch->stored && fchmod(ch->seg.fd, REMOVED_MODE) != 0)
		log_warn("channel '%s': cannot mark its segment removed: %s", ch->name, strerror(errno));
	record_name(ch, name, sizeof(name));
	fdstore_remove(name);
}

#define NOTIFY_PREFIX "pinshm-efd."   /* any eventfd record, this version's or not */
#define NOTIFY_RECORD "pinshm-efd.2." /* a consumer's eventfd: DEV.INO.ENDPOINT.NAME follow */

/* "pinshm-efd.2.DEV.INO.ENDPOINT.NAME" of endpoint @p endpoint of @p ch
 * into @p buf: the channel's name and its segment's device and inode, so
 * that it names that channel and no other. */
static void notify_record_name(const struct channel *ch, unsigned endpoint, char *buf, size_t len)
{
	struct stat st;
	bool ok = fstat(ch->seg.fd, &st) == 0;

	snprintf(buf, len, NOTIFY_RECORD "%llu.%llu.%u.%s", ok ? (unsigned long long)st.st_dev : 0,
		 ok ? (unsigned long long)st.st_ino : 0, endpoint, ch->name);
}

void adopt_store_notify(const struct channel *ch, unsigned endpoint)
{
	char name[100];

	if (!service_mode() || !ch->stored)
		return; /* only beside its channel's record: a channel handed back is not there */
	notify_record_name(ch, endpoint, name, sizeof(name));
	int rc = fdstore_put(name, ch->notify_fd[endpoint - ch->g.max_producers]);
	if (rc < 0)
		log_warn("channel '%s': endpoint %u's eventfd not kept in the descriptor store: %s", ch->name,
			 endpoint, strerror(-rc));
}

void adopt_unstore_notify(const struct channel *ch, unsigned endpoint)
{
	char name[100];

	if (!service_mode() || !ch->stored)
		return;
	notify_record_name(ch, endpoint, name, sizeof(name));
	fdstore_remove(name);
}

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

/* The daemon's record, from an FDNAME. */
struct record {
	unsigned version; /* 1 or 2 */
	unsigned long long ino;
	unsigned uid, gid, mode, flags;
	pinshm_channel_attr_t attr;
	int node;
	uint32_t pin_idle; /* version 2 only */
	char name[PINSHM_NAME_MAX + 1];
};

/* The numbers of a record, in order after its version, and the most each
 * may be: anything else (a sign, a space, a leading zero, a number past
 * its field) is not a record this daemon or an older one wrote. */
enum { F_INO, F_UID, F_GID, F_MODE, F_FLAGS, F_KIND, F_GFLAGS, F_CAPACITY, F_MAXMSG, F_PROD, F_CONS, F_NODE,
       F_PIN_IDLE, F_COUNT };
static const struct {
	const char *what;
	unsigned long long max;
} record_fields[F_COUNT] = {
	[F_INO] = {"inode", UINT64_MAX},
	[F_UID] = {"uid", UINT32_MAX - 1}, /* (uid_t)-1 is no user */
	[F_GID] = {"gid", UINT32_MAX - 1},
	[F_MODE] = {"mode", 0777},
	[F_FLAGS] = {"flags", PINSHM_PERSISTENT},
	[F_KIND] = {"kind", UINT32_MAX},
	[F_GFLAGS] = {"channel flags", UINT32_MAX},
	[F_CAPACITY] = {"capacity", UINT64_MAX},
	[F_MAXMSG] = {"max_message", UINT32_MAX},
	[F_PROD] = {"max_producers", UINT32_MAX},
	[F_CONS] = {"max_consumers", UINT32_MAX},
	[F_NODE] = {"node", RECORD_NODE_MAX}, /* or -1 (none), -3 (at the consumer) */
	[F_PIN_IDLE] = {"pin_idle", PINSHM_PIN_IDLE_MAX},
};

/* Read the number at *@p p (octal where @p octal), at most @p max, and the
 * dot after it; move *@p p past both.  @return whether it was one. */
static bool record_number(const char **p, bool octal, unsigned long long max, unsigned long long *out)
{
	const char *s = *p;
	unsigned base = octal ? 8 : 10;
	unsigned long long v = 0;

	if (s[0] == '0' && s[1] != '.')
		return false; /* a leading zero: not as written */
	for (; *s >= '0' && *s < (char)('0' + base); s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > max / base || d > max - v * base)
			return false;
		v = v * base + d;
	}
	if (s == *p || *s != '.')
		return false;
	*out = v;
	*p = s + 1;
	return true;
}

/* Parse record @p s strictly (its names come from systemd, which keeps
 * what a unit sent: taken as untrusted).  @return 0, or -EINVAL with the
 * reason in @p why. */
static int parse_record(const char *s, struct record *r, char *why, size_t whylen)
{
	unsigned long long v[F_COUNT] = {0};
	bool node_negative = false;
	const char *p = s;

	*r = (struct record){0};
	if (strncmp(p, RECORD_V2, strlen(RECORD_V2)) == 0) {
		r->version = 2;
	} else if (strncmp(p, RECORD_V1, strlen(RECORD_V1)) == 0) {
		r->version = 1;
	} else {
		snprintf(why, whylen, "not a record of version 1 or 2");
		return -EINVAL;
	}
	p += strlen(RECORD_V2);
	for (unsigned i = 0; i < F_COUNT; i++) {
		if (i == F_PIN_IDLE && r->version == 1)
			continue;
		bool ok;
		if (i == F_NODE && *p == '-') {
			node_negative = true;
			p++;
			ok = record_number(&p, false, 3, &v[i]) && (v[i] == 1 || v[i] == 3);
		} else {
			ok = record_number(&p, i == F_MODE, record_fields[i].max, &v[i]);
		}
		if (!ok && i == F_MODE) {
			snprintf(why, whylen, "field %u (mode) is not an octal number of 0 to 777", i + 1);
			return -EINVAL;
		}
		if (!ok) {
			snprintf(why, whylen, "field %u (%s) is not a number of 0 to %llu%s", i + 1, record_fields[i].what,
				 record_fields[i].max, i == F_NODE ? ", -1 or -3" : "");
			return -EINVAL;
		}
	}
	if (!proto_name_valid(p)) {
		snprintf(why, whylen, "no valid channel name");
		return -EINVAL;
	}
	r->ino = v[F_INO];
	r->uid = (unsigned)v[F_UID];
	r->gid = (unsigned)v[F_GID];
	r->mode = (unsigned)v[F_MODE];
	r->flags = (unsigned)v[F_FLAGS];
	r->attr = (pinshm_channel_attr_t){.kind = (pinshm_kind_t)v[F_KIND], .flags = (uint32_t)v[F_GFLAGS],
					  .capacity = v[F_CAPACITY], .max_message = (uint32_t)v[F_MAXMSG],
					  .max_producers = (uint32_t)v[F_PROD], .max_consumers = (uint32_t)v[F_CONS]};
	r->node = node_negative ? -(int)v[F_NODE] : (int)v[F_NODE];
	r->pin_idle = (uint32_t)v[F_PIN_IDLE];
	snprintf(r->name, sizeof(r->name), "%s", p);
	return 0;
}

/* segment_access(): the header matches the record's geometry. */
static int header_matches(void *base, void *arg)
{
	const struct seg_geometry *want = arg;
	struct seg_geometry g;
	int rc = seg_geometry_read(base, want->size, &g);

	if (rc != 0)
		return rc;
	return memcmp(&g, want, sizeof(g)) == 0 ? 0 : -EBADMSG;
}

/* Map, check and lock the segment @p fd of geometry @p g into @p s. */
static int adopt_segment(int fd, const struct seg_geometry *g, int node, struct segment *s, char *why, size_t len)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	*s = (struct segment){.fd = fd, .node = node, .at_consumer = node == PINSHM_NODE_CONSUMER};
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, len, "not a shared memory file");
		return -EINVAL;
	}
	if ((uint64_t)st.st_size < g->size || (uint64_t)st.st_size > SIZE_MAX) {
		snprintf(why, len, "a file of %lld bytes for a geometry of %zu", (long long)st.st_size, g->size);
		return -EINVAL;
	}
	s->size = (size_t)st.st_size;
	s->sealed = seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW);
	s->backend = s->sealed ? PINSHM_BACKEND_MEMFD : PINSHM_BACKEND_SHM;
	s->hugepages = st.st_blksize >= (1 << 21); /* hugetlbfs: its page size */
	s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->base == MAP_FAILED) {
		s->base = NULL;
		snprintf(why, len, "mmap: %s", strerror(errno));
		return -EINVAL;
	}
	int rc = segment_access(s, header_matches, (void *)g);
	if (rc != 0) {
		snprintf(why, len, "its header does not match the daemon's record (%s)", pinshm_strerror(rc));
		munmap(s->base, s->size);
		s->base = NULL;
		return rc;
	}
	return 0;
}

/* segment_access(): clear the header's `unlocked`, the note that a
 * previous daemon may have left there (working-set pinning).  Relaxed, as
 * the daemon's other writes of it: a hint to clients, never trusted. */
static int clear_unlocked(void *base, void *arg)
{
	struct seg_header *h = base;

	(void)arg;
	atomic_store_explicit(&h->unlocked, 0, memory_order_relaxed);
	return 0;
}

/* Lock @p s in RAM, as segment_alloc() would have (mlock2: sanitizer
 * runtimes make mlock() a no-op).  Whatever the previous daemon did, it is
 * locked again (or not pinned at all), never left unlocked for want of
 * use: the header says so. */
static void adopt_pin(struct segment *s)
{
	segment_access(s, clear_unlocked, NULL);
	if (mlock2(s->base, s->size, 0) == 0) {
		s->pinned = true;
		return;
	}
	int err = errno;
	syscall(SYS_munlock, s->base, s->size); /* it may have locked a part; not munlock(): sanitizers no-op it */
	snprintf(s->pin_error, sizeof(s->pin_error), "mlock: %s%s", strerror(err),
		 err == ENOMEM || err == EPERM ? " (RLIMIT_MEMLOCK)" : "");
}

/* Reference @p ch from the grace's pseudo-connection. */
static int keep_ref(struct adopt *a, struct channel *ch)
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
	k->refs[k->nrefs++] = ch;
	ch->refs++;
	return 0;
}

/* The channel whose segment is the file @p st, if the registry has it. */
static struct channel *find_segment(struct registry *r, const struct stat *st)
{
	struct stat other;

	/* The size first: an fstat() only for the channels of the same size. */
	for (struct channel *ch = r->first; ch; ch = ch->next)
		if ((off_t)ch->seg.size == st->st_size && fstat(ch->seg.fd, &other) == 0 && other.st_dev == st->st_dev &&
		    other.st_ino == st->st_ino)
			return ch;
	return NULL;
}

/* Close @p fd, named @p fdname, a second record of the segment @p st of
 * @p ch, adopted from an earlier one: not a second channel, nor a second
 * charge.  Its record leaves the store; where it bears the name of @p ch's
 * own, that removal takes both (FDSTOREREMOVE drops every descriptor of a
 * name), so @p ch is stored again under it. */
static void adopt_duplicate(struct channel *ch, int fd, const char *fdname, const struct stat *st)
{
	char own[FDSTORE_NAME_MAX];

	log_warn("descriptor store: '%.300s' is a second record of the segment of channel '%s' (device %llu, "
		 "inode %llu): closed, not adopted twice",
		 fdname, ch->name, (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
	close(fd);
	if (!service_mode())
		return;
	fdstore_remove(fdname);
	record_name(ch, own, sizeof(own));
	if (strcmp(own, fdname) == 0)
		ch->stored = adopt_store(ch);
}

/* The channel that record @p rec describes, its geometry @p g: named and
 * in the store already. */
static void channel_from_record(struct channel *ch, const struct record *rec, const struct seg_geometry *g,
				uint32_t default_pin_idle)
{
	snprintf(ch->name, sizeof(ch->name), "%s", rec->name);
	ch->persistent = rec->flags & PINSHM_PERSISTENT;
	ch->uid = rec->uid;
	ch->gid = rec->gid;
	ch->mode = rec->mode;
	ch->attr = rec->attr;
	ch->g = *g;
	/* A record of version 1 (an older daemon's) has no pin_idle: the
	 * configured default, as a create that gives none. */
	ch->pin_idle = rec->version >= 2 ? rec->pin_idle : default_pin_idle;
	ch->named = true;
	ch->stored = true; /* its record is there already */
}

static void log_adopted(const struct channel *ch, unsigned version)
{
	char idle[64] = "always locked";

	if (ch->pin_idle)
		snprintf(idle, sizeof(idle), "unlocked after %u s unused", ch->pin_idle);
	log_notice("channel '%s' adopted from the descriptor store: uid %u, %zu bytes%s, %s%s", ch->name,
		   (unsigned)ch->uid, ch->seg.size, ch->seg.pinned ? ", pinned" : ", NOT pinned", idle,
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
	struct channel *ch = NULL;
	int rc = parse_record(fdname, &rec, why, sizeof(why));

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
	if ((st.st_mode & 07777) == REMOVED_MODE) {
		log_notice("descriptor store: channel '%s' was unlinked before the last stop, its removal from the "
			   "store lost: not adopted again, its record removed",
			   rec.name);
		close(fd);
		rc = -ENOENT;
		goto unstore;
	}
	struct channel *first = find_segment(r, &st);
	if (first) {
		adopt_duplicate(first, fd, fdname, &st);
		return -EEXIST;
	}
	ch = calloc(1, sizeof(*ch));
	if (ch)
		ch->holder = calloc(g.max_producers + g.max_consumers, sizeof(*ch->holder));
	if (!ch || !ch->holder) {
		rc = -ENOMEM;
		snprintf(why, sizeof(why), "out of memory");
		goto fail;
	}
	rc = adopt_segment(fd, &g, rec.node, &ch->seg, why, sizeof(why));
	if (rc != 0)
		goto fail;
	fd = -1; /* the segment's now */
	rc = account_charge(r->acct, rec.uid, ch->seg.size, why, sizeof(why)); /* as a create */
	if (rc != 0)
		goto fail;
	adopt_pin(&ch->seg);
	if (!ch->seg.pinned)
		account_unpinned(r->acct, rec.uid, ch->seg.size);
	channel_from_record(ch, &rec, &g, r->acct->cfg->pin_idle);
	rc = registry_insert(r, ch, why, sizeof(why));
	if (rc != 0) {
		account_release(r->acct, ch->uid, ch->seg.size, ch->seg.pinned);
		goto fail;
	}
	if (rec.version < 2 && service_mode()) {
		/* In the store again under this version's record, the old one
		 * removed first: systemd keeps a descriptor it has once, under
		 * its first name, and would ignore the new one. */
		fdstore_remove(fdname);
		ch->stored = adopt_store(ch);
	}
	if (!ch->persistent && keep_ref(a, ch) != 0)
		log_warn("channel '%s': no grace for its users to come back (out of memory)", ch->name);
	log_adopted(ch, rec.version);
	return 0; /* its endpoints judged once the eventfds are back (adopt_listen_fds()) */
fail:
	log_warn("descriptor store: channel '%s' not adopted: %s", rec.name, why);
	if (ch) {
		if (ch->seg.base)
			segment_destroy(&ch->seg);
		free(ch->holder);
		free(ch);
	}
	if (fd >= 0)
		close(fd);
unstore: /* Out of the store too: systemd would hand it back at every start. */
	if (service_mode())
		fdstore_remove(fdname);
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
	int end = -1;
	char why[160] = "no channel adopted from the store has that name, device and inode";
	struct stat st;
	const char *p = fdname + strlen(NOTIFY_RECORD);

	if (strncmp(fdname, NOTIFY_RECORD, strlen(NOTIFY_RECORD)) != 0 ||
	    sscanf(p, "%llu.%llu.%u.%n", &dev, &ino, &endpoint, &end) != 3 || end < 0 ||
	    !proto_name_valid(p + end)) {
		snprintf(why, sizeof(why), "not an eventfd's record of this daemon's version");
	} else {
		struct channel *ch = registry_find(r, p + end);
		if (ch && ch->stored && fstat(ch->seg.fd, &st) == 0 && (unsigned long long)st.st_dev == dev &&
		    (unsigned long long)st.st_ino == ino) {
			if (endpoint >= ch->g.max_producers && endpoint < ch->g.max_producers + ch->g.max_consumers &&
			    ch->notify_fd && ch->notify_fd[endpoint - ch->g.max_producers] >= 0) {
				/* Which is the consumer's is unknown: neither is kept. */
				registry_forget_notify(r, ch, endpoint);
				snprintf(why, sizeof(why), "a second eventfd for endpoint %u of '%s': both dropped",
					 endpoint, ch->name);
			} else if (registry_keep_notify(r, ch, endpoint, &fd, why, sizeof(why)) == 0) {
				log_info("channel '%s': endpoint %u's eventfd back from the descriptor store",
					 ch->name, endpoint);
				return;
			}
		}
	}
	log_warn("descriptor store: '%s' not kept: %s", fdname, why);
	if (fd >= 0)
		close(fd);
	if (service_mode())
		fdstore_remove(fdname);
}

unsigned adopt_listen_fds(struct adopt *a, struct registry *reg)
{
	unsigned n = 0;

	a->reg = reg;
	a->keep.id = ADOPT_KEEPER_ID;
	/* The channels, then their consumers' eventfds, then the endpoints
	 * judged: a reap wakes the consumers armed on those eventfds. */
	for (unsigned i = 0; i < a->nfds; i++)
		if (strncmp(a->fds[i].name, NOTIFY_PREFIX, strlen(NOTIFY_PREFIX)) != 0)
			n += adopt_one(a, a->fds[i].fd, a->fds[i].name) == 0;
	for (unsigned i = 0; i < a->nfds; i++)
		if (strncmp(a->fds[i].name, NOTIFY_PREFIX, strlen(NOTIFY_PREFIX)) == 0)
			adopt_notify_fd(reg, a->fds[i].fd, a->fds[i].name);
	for (struct channel *ch = reg->first; ch; ch = ch->next)
		registry_adopt_endpoints(reg, ch); /* no connection holds any yet */
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

int adopt_timeout(const struct adopt *a)
{
	if (!a->grace_end)
		return -1;
	uint64_t now = clock_now_ms();
	return now >= a->grace_end ? 0 : (int)(a->grace_end - now);
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
	stopping = true;
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

struct endpoint_check {
	const struct seg_geometry *g;
	unsigned endpoint;
	uint32_t pid;
};

/* segment_access(): the endpoint is attached, for that process. */
static int endpoint_attached(void *base, void *arg)
{
	const struct endpoint_check *e = arg;
	struct endpoint *ep = seg_endpoint(e->g, base, e->endpoint);

	return atomic_load_explicit(&ep->state, memory_order_relaxed) == EP_ACTIVE &&
			       atomic_load_explicit(&ep->pid, memory_order_relaxed) == e->pid
		       ? 0
		       : -ESRCH;
}

/* A new channel for the segment @p fd that @p c hands back (the trust rule
 * of adopt.h).  @return 0 and @p out, or -errno with @p why. */
static int adopt_new(struct registry *r, struct reg_client *c, const char *name, const pinshm_channel_attr_t *attr,
		     const struct seg_geometry *g, int fd, struct channel **out, char *why, size_t whylen)
{
	struct channel *ch = calloc(1, sizeof(*ch));
	int rc;

	if (ch)
		ch->holder = calloc(g->max_producers + g->max_consumers, sizeof(*ch->holder));
	if (!ch || !ch->holder) {
		free(ch);
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	rc = adopt_segment(fd, g, PINSHM_NODE_ANY, &ch->seg, why, whylen);
	if (rc == 0) {
		rc = account_charge(r->acct, c->cred.uid, ch->seg.size, why, whylen);
		if (rc != 0)
			munmap(ch->seg.base, ch->seg.size);
	}
	if (rc != 0) {
		free(ch->holder);
		free(ch);
		return rc;
	}
	adopt_pin(&ch->seg);
	if (!ch->seg.pinned)
		account_unpinned(r->acct, c->cred.uid, ch->seg.size);
	snprintf(ch->name, sizeof(ch->name), "%s", name);
	ch->uid = c->cred.uid;
	ch->gid = c->cred.gid;
	ch->mode = 0600;
	ch->attr = *attr;
	ch->attr.max_message = g->max_message;
	ch->g = *g;
	ch->pin_idle = r->acct->cfg->pin_idle; /* an ADOPT does not carry the channel's own: the default */
	/* A name the client may not create (names.h) is not given either. */
	ch->named = names_may_create(&r->acct->cfg->names, &c->cred, name, why, whylen) == 0;
	rc = registry_insert(r, ch, why, whylen);
	if (rc == -EEXIST) {
		ch->named = false; /* the name went to another channel: adopted unnamed */
		rc = registry_insert(r, ch, why, whylen);
	}
	if (rc != 0) {
		account_release(r->acct, ch->uid, ch->seg.size, ch->seg.pinned);
		ch->seg.fd = -1; /* the caller's still */
		segment_destroy(&ch->seg);
		free(ch->holder);
		free(ch);
		return rc;
	}
	*out = ch;
	return 0;
}

int adopt_client(struct registry *r, struct reg_client *c, const struct adopt_request *q, int *fd, uint64_t *id,
		 uint32_t *flags, char *why, size_t whylen)
{
	struct seg_geometry g;
	struct stat st;
	struct channel *ch;
	int rc;

	*flags = 0;
	if (seg_geometry_compute(&q->attr, &g) != 0) {
		snprintf(why, whylen, "invalid geometry");
		return -EINVAL;
	}
	bool producer = q->role == PINSHM_PRODUCER;
	if ((q->role != PINSHM_PRODUCER && q->role != PINSHM_CONSUMER) ||
	    (producer ? q->endpoint >= g.max_producers
		      : q->endpoint < g.max_producers || q->endpoint >= g.max_producers + g.max_consumers)) {
		snprintf(why, whylen, "endpoint %u is not a %s of this geometry", q->endpoint,
			 producer ? "producer" : "consumer");
		return -EINVAL;
	}
	if (fstat(*fd, &st) != 0) {
		snprintf(why, whylen, "fstat: %s", strerror(errno));
		return -EINVAL;
	}
	ch = find_segment(r, &st);
	if (ch) {
		if (memcmp(&ch->g, &g, sizeof(g)) != 0) {
			snprintf(why, whylen, "channel '%s' has another geometry", ch->name);
			return -EINVAL;
		}
		*flags |= PROTO_ADOPT_KNOWN;
	} else {
		rc = adopt_new(r, c, q->name, &q->attr, &g, *fd, &ch, why, whylen);
		if (rc != 0)
			return rc;
		*fd = -1; /* the channel's now */
		log_notice("channel '%s' handed back by pid %d uid %u: adopted%s, owner uid %u, mode 0600, %zu bytes%s, "
			   "default pin_idle %u",
			   ch->name, (int)c->cred.pid, (unsigned)c->cred.uid,
			   ch->named ? "" : " unnamed (name taken, or not its to create)",
			   (unsigned)ch->uid, ch->seg.size, ch->seg.pinned ? ", pinned" : ", NOT pinned", ch->pin_idle);
	}
	uint64_t chid = ch->id;
	rc = registry_ref(r, c, ch, why, whylen);
	if (rc != 0)
		return rc; /* ch may be gone */
	*flags |= ch->named ? PROTO_ADOPT_NAMED : 0;
	struct endpoint_check e = {.g = &ch->g, .endpoint = q->endpoint, .pid = (uint32_t)c->cred.pid};
	if (ch->holder[q->endpoint] == 0 && !registry_reaping(r, ch, q->endpoint) &&
	    segment_access(&ch->seg, endpoint_attached, &e) == 0) {
		ch->holder[q->endpoint] = c->id;
		*flags |= PROTO_ADOPT_ENDPOINT;
	}
	/* A channel new to this daemon: the endpoints of the others.  Not by
	 * a client the daemon cannot see (SO_PEERCRED pid 0: a PID namespace
	 * not nested in the daemon's), whose own pids mean nothing here: its
	 * live endpoints would be taken for gone. */
	if (!(*flags & PROTO_ADOPT_KNOWN) && c->cred.pid <= 0)
		log_notice("channel '%s': handed back by a process outside this daemon's PID namespaces (pid 0): "
			   "its endpoints are not judged",
			   ch->name);
	else if (!(*flags & PROTO_ADOPT_KNOWN) &&
		 registry_judge_start(r, ch, &(struct reg_judged){.client = c->id, .id = chid, .flags = *flags}) == 0)
		return -EINPROGRESS; /* the reply once judged (registry_judge_step()) */
	else if (!(*flags & PROTO_ADOPT_KNOWN))
		registry_adopt_endpoints(r, ch); /* out of memory to do it in slices */
	*id = chid;
	return 0;
}
