/*
 * record.h - the daemon's records in systemd's descriptor store, written
 * and parsed: a channel's (its segment's descriptor, named by what the
 * daemon knows of it) and a consumer's wake-up socket's.  The formats and
 * the rules of what is stored when are adopt.h's; this unit knows nothing
 * of the registry: the registry tells it what to store or remove, with the
 * record's fields (record_put() and the others), and restart adoption
 * parses what the store gave back (record_parse(), record_wakeup_parse()).
 * Nothing is sent outside service mode ($NOTIFY_SOCKET set) or once the
 * daemon stops (record_stop()).
 */
#ifndef PINSHMD_RECORD_H
#define PINSHMD_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinshm.h"

#define RECORD_WAKEUP_PREFIX "pinshm-efd." /* any wake-up socket's record, this version's or not */

/* The daemon's record of a channel (an FDNAME of version 1 or 2). */
struct record {
	unsigned version;       /* 1 or 2 (parsed); written: 2 */
	unsigned long long ino; /* its segment's inode (parsed; written from the descriptor) */
	unsigned uid, gid, mode;
	unsigned flags;         /* PINSHM_PERSISTENT or 0 */
	pinshm_channel_attr_t attr;
	int node;               /* a node, PINSHM_NODE_ANY or PINSHM_NODE_CONSUMER */
	uint32_t pin_idle;      /* version 2 only */
	char name[PINSHM_NAME_MAX + 1];
};

/** Whether the store listens (service mode, not stopping). */
bool record_service(void);

/** The daemon stops: the channels destroyed from now on stay in the store,
 *  for the next start (systemd empties it when the unit stops for good). */
void record_stop(void);

/**
 * Put the channel of record @p rec, segment @p segfd, in the store (its
 * inode read from @p segfd).  @return whether it is there now (logged
 * where not).  False outside service mode.
 */
bool record_put(const struct record *rec, int segfd);

/**
 * Take the channel of record @p rec out of the store; where @p stored (the
 * daemon's own segment, which it stored), its file is first marked removed
 * (record_removed()), should the removal be lost.
 */
void record_remove(const struct record *rec, int segfd, bool stored);

/** Whether the segment file of mode @p mode was marked removed. */
bool record_removed(unsigned mode);

/** The FDNAME of @p rec, segment @p segfd, into @p buf. */
void record_name(const struct record *rec, int segfd, char *buf, size_t len);

/** Parse FDNAME @p s strictly (untrusted).  @return 0, or -EINVAL with the
 *  reason in @p why. */
int record_parse(const char *s, struct record *rec, char *why, size_t whylen);

/** Put the wake-up socket @p fd of endpoint @p endpoint of channel @p name,
 *  segment @p segfd, in the store (logged where it cannot be). */
void record_wakeup_put(const char *name, int segfd, unsigned endpoint, int fd);

/** Take the wake-up socket of endpoint @p endpoint of channel @p name,
 *  segment @p segfd, out of the store. */
void record_wakeup_remove(const char *name, int segfd, unsigned endpoint);

/**
 * Parse a wake-up socket's FDNAME @p s of this version: its segment's
 * device @p dev and inode @p ino, @p endpoint, and @p name pointing into
 * @p s.  @return whether it is one.
 */
bool record_wakeup_parse(const char *s, unsigned long long *dev, unsigned long long *ino, unsigned *endpoint,
			 const char **name);

/** Drop FDNAME @p fdname from the store, in service mode (a record not adopted). */
void record_drop(const char *fdname);

#endif /* PINSHMD_RECORD_H */
