/*
 * handback.h - a channel handed back by a client that reconnects to a
 * daemon that does not know it (pinshm_reconnect(3), a HANDBACK request
 * with the segment's descriptor): what the daemon checks, and what it
 * trusts (the rule is adopt.h's: a client proves only that it holds the
 * segment).
 */
#ifndef PINSHMD_HANDBACK_H
#define PINSHMD_HANDBACK_H

#include <stddef.h>
#include <stdint.h>

#include "registry.h"

/* What a client says of a channel it hands back (a HANDBACK request). */
struct handback_request {
	const char *name;             /* valid */
	pinshm_channel_attr_t attr;   /* the geometry it attached with */
	uint32_t role, endpoint;      /* the endpoint it is attached to */
};

/**
 * Client @p c hands back the segment @p *fd of a channel it has open.
 * The segment is checked as one from the store (a regular file at least
 * as large as the geometry, a header that matches it).  Where the daemon
 * has that segment already (same st_dev and st_ino: adopted from the
 * store, or handed back by another client), it is that channel, with its
 * record; else it becomes a new channel whose record is what the daemon
 * can trust: owner @p c's uid and gid, mode 0600, not persistent, the
 * configured pin_idle, named @p q->name where that name is free (else
 * unnamed), charged to @p c's user as a create.  Either way @p c references it, and the endpoint is
 * claimed for @p c again where the segment marks it attached for @p c's
 * process, no connection holds it and no reap of it is under way.
 * A channel new to the daemon is locked a slice a loop turn (locking.h)
 * and has its other endpoints judged (registry.h) in slices, but for a
 * client of pid 0 (its PID namespace not nested in the daemon's): its
 * endpoints are not judged.  @return -EINPROGRESS, the reply
 * (watch_judge_step()) once it is locked and they are judged.
 * @return 0 with @p id (the channel's number) and @p flags (PROTO_HANDBACK_*),
 *         @p *fd set to -1 where the channel took it; -EINPROGRESS (the
 *         same, judged in slices); or -EINVAL (bad
 *         geometry, endpoint or segment), -EPROTO/-EBADMSG (its header),
 *         the errors of account_charge(), -ENFILE, -EMFILE, -ENOMEM.
 */
int handback(struct registry *r, struct reg_client *c, const struct handback_request *q, int *fd, uint64_t *id,
	     uint32_t *flags, char *why, size_t whylen);


#endif /* PINSHMD_HANDBACK_H */
