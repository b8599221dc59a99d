/*
 * record.c - the daemon's records in the descriptor store, written and
 * parsed (formats: adopt.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fdstore.h"
#include "log.h"
#include "protocol.h"
#include "record.h"

/* Set by record_stop(). */
static bool stopping;

#define RECORD_V1 "pinshm.1."  /* an older daemon's: no PINIDLE (the configured default) */
#define RECORD_V2 "pinshm.2."  /* this daemon's */
#define RECORD_NODE_MAX 1023   /* libnuma's most */
#define RECORD_WAKEUP "pinshm-efd.2." /* a consumer's wake-up socket: DEV.INO.ENDPOINT.NAME follow */

/* The mode of a segment whose channel left the store (record_remove()). */
#define REMOVED_MODE 0

bool record_service(void)
{
	const char *s = getenv("NOTIFY_SOCKET"); /* systemd (or what stands in for it) listens */

	return s && s[0] && !stopping;
}

void record_stop(void)
{
	stopping = true;
}

bool record_removed(unsigned mode)
{
	return (mode & 07777) == REMOVED_MODE;
}

/* "pinshm.2.INO.UID.GID.MODE.FLAGS.KIND.GFLAGS.CAPACITY.MAXMSG.PROD.CONS.NODE.PINIDLE.NAME" */
void record_name(const struct record *rec, int segfd, char *buf, size_t len)
{
	struct stat st;
	unsigned long long ino = fstat(segfd, &st) == 0 ? (unsigned long long)st.st_ino : 0;

	snprintf(buf, len, RECORD_V2 "%llu.%u.%u.%o.%u.%u.%u.%" PRIu64 ".%u.%u.%u.%d.%u.%s", ino, rec->uid,
		 rec->gid, rec->mode, rec->flags, (unsigned)rec->attr.kind, rec->attr.flags, rec->attr.capacity,
		 rec->attr.max_message, rec->attr.max_producers, rec->attr.max_consumers, rec->node, rec->pin_idle,
		 rec->name);
}

bool record_put(const struct record *rec, int segfd)
{
	char name[FDSTORE_NAME_MAX];

	if (!record_service())
		return false;
	record_name(rec, segfd, name, sizeof(name));
	int rc = fdstore_put(name, segfd);
	if (rc < 0)
		log_warn("channel '%s': not kept in the descriptor store: %s", rec->name, strerror(-rc));
	return rc >= 0;
}

void record_remove(const struct record *rec, int segfd, bool stored)
{
	char name[FDSTORE_NAME_MAX];

	if (!record_service())
		return;
	/* Its removal from the store may wait (the manager's queue full) and
	 * be lost with this daemon (kill -9): the file itself says it was
	 * removed, with a mode no segment has otherwise (REMOVED_MODE), which
	 * only its owner, this daemon's user, may change.  The next start
	 * drops a record of such a file (adopt.c).  Only a segment of the
	 * daemon's own that it stored: one a client handed back may be any
	 * file the client could open, another user's too. */
	if (stored && fchmod(segfd, REMOVED_MODE) != 0)
		log_warn("channel '%s': cannot mark its segment removed: %s", rec->name, strerror(errno));
	record_name(rec, segfd, name, sizeof(name));
	fdstore_remove(name);
}

void record_drop(const char *fdname)
{
	if (record_service())
		fdstore_remove(fdname);
}

/* "pinshm-efd.2.DEV.INO.ENDPOINT.NAME" of endpoint @p endpoint of channel
 * @p name into @p buf: the channel's name and its segment's device and
 * inode, so that it names that channel and no other. */
static void wakeup_name(const char *name, int segfd, unsigned endpoint, char *buf, size_t len)
{
	struct stat st;
	bool ok = fstat(segfd, &st) == 0;

	snprintf(buf, len, RECORD_WAKEUP "%llu.%llu.%u.%s", ok ? (unsigned long long)st.st_dev : 0,
		 ok ? (unsigned long long)st.st_ino : 0, endpoint, name);
}

void record_wakeup_put(const char *name, int segfd, unsigned endpoint, int fd)
{
	char fdname[100];

	if (!record_service())
		return;
	wakeup_name(name, segfd, endpoint, fdname, sizeof(fdname));
	int rc = fdstore_put(fdname, fd);
	if (rc < 0)
		log_warn("channel '%s': endpoint %u's eventfd not kept in the descriptor store: %s", name, endpoint,
			 strerror(-rc));
}

void record_wakeup_remove(const char *name, int segfd, unsigned endpoint)
{
	char fdname[100];

	if (!record_service())
		return;
	wakeup_name(name, segfd, endpoint, fdname, sizeof(fdname));
	fdstore_remove(fdname);
}

bool record_wakeup_parse(const char *s, unsigned long long *dev, unsigned long long *ino, unsigned *endpoint,
			 const char **name)
{
	const char *p = s + strlen(RECORD_WAKEUP);
	int end = -1;

	if (strncmp(s, RECORD_WAKEUP, strlen(RECORD_WAKEUP)) != 0 ||
	    sscanf(p, "%llu.%llu.%u.%n", dev, ino, endpoint, &end) != 3 || end < 0 || !proto_name_valid(p + end))
		return false;
	*name = p + end;
	return true;
}

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
int record_parse(const char *s, struct record *r, char *why, size_t whylen)
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
