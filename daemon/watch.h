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

#endif /* PINSHMD_WATCH_H */
