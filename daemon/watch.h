/*
 * watch.h - what registry.c and watch.c give each other (private to the
 * daemon's registry).  watch.c watches the processes of endpoints that no
 * connection holds and judges hand-backs; registry.c owns the channels.
 */
#ifndef PINSHMD_WATCH_H
#define PINSHMD_WATCH_H

#include <stdint.h>
#include <sys/types.h>

#include "registry.h"

/* watch.c */
void watch_init(struct registry *r);
/** The tick's look at watched processes and orphaned endpoints. */
void watch_tick(struct registry *r);
/** Forget what connection @p client's hand-backs left being judged. */
void watch_client_gone(struct registry *r, uint64_t client);
void watch_fini(struct registry *r);

/* registry.c */
/** Destroy @p ch if nothing keeps it any more. */
void registry_collect(struct registry *r, struct channel *ch);
/** Reap endpoint @p ep of @p ch, whose process @p pid is gone. */
void registry_reap_endpoint(struct registry *r, struct channel *ch, unsigned ep, pid_t pid);

#endif /* PINSHMD_WATCH_H */
