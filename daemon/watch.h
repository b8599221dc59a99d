/*
 * watch.h - the processes of endpoints that no connection holds, watched
 * until they exit, and the judging of hand-backs (registry.h states the
 * rules; the state lives in struct registry).  watch.c calls the registry
 * (reaps, collects), never the other way: the event loop and main() call
 * what is here.
 */
#ifndef PINSHMD_WATCH_H
#define PINSHMD_WATCH_H

#include <stdint.h>
#include <sys/types.h>

#include "registry.h"

/** Before anything is watched (after registry_init()). */
void watch_init(struct registry *r);
/** The tick's look at watched processes and orphaned endpoints. */
void watch_tick(struct registry *r);
/** Forget what connection @p client's hand-backs left being judged. */
void watch_client_gone(struct registry *r, uint64_t client);
/** Forget every watch and judging (before registry_fini()). */
void watch_fini(struct registry *r);

/* The reply a hand-back waits for while its endpoints are judged. */
struct reg_judged {
	uint64_t client; /* the connection's id */
	uint64_t id;     /* the channel's number */
	uint32_t flags;  /* PROTO_HANDBACK_* */
};

/**
 * Judge the endpoints of @p chan, just adopted, that are attached and held by
 * no connection (the rules of registry.h): reap those whose process is gone, watch
 * the others until it exits where it can.  Logged.
 */
void watch_judge_endpoints(struct registry *r, struct channel *chan);

/**
 * watch_judge_endpoints() of @p chan, handed back by a client, in slices,
 * once its segment is locked (chan->locking, registry_step()): the maps of
 * the processes its endpoints name (and of the processes of nested PID
 * namespaces that have those pids there) are read REGISTRY_MAPS_SLICE
 * bytes a loop turn, in turn with the other hand-backs, within the same
 * budgets; then the endpoints are judged from what was read (a process
 * not read then, or exited since, is not taken for the one read).  Not
 * @p judge (a client of pid 0): the reply waits for the lock alone.  The
 * client (@p reply->client) makes no other request meanwhile and
 * references @p chan; if it goes (watch_client_gone()), the judging is
 * given up.
 * @return 0, or -ENOMEM (judge at once instead).
 */
int watch_judge_start(struct registry *r, struct channel *chan, const struct reg_judged *reply, bool judge);

/**
 * A slice of the oldest judging (watch_judge_start()), once a loop turn
 * while registry_busy().  @return true where it ended: its endpoints are
 * judged, and @p done is the reply to send.
 */
bool watch_judge_step(struct registry *r, struct reg_judged *done);

#endif /* PINSHMD_WATCH_H */
