/*
 * fdstore.h - what the daemon tells systemd's descriptor store, in order:
 * FDSTORE=1 (keep a descriptor under a name) and FDSTOREREMOVE=1 (drop
 * every descriptor of a name), over notify.h.
 *
 * A removal that cannot be sent (the manager's queue full: notify.h) is
 * not dropped: lost, its record would stay, and the next start would adopt
 * an unlinked channel again, or keep an eventfd the daemon had forgotten.
 * It waits in a list, in order, and is sent again before the next
 * notification to the store, by the event loop every FDSTORE_RETRY_MS
 * (fdstore_retry(): never waiting), and at a clean stop, before STOPPING=1
 * (fdstore_stop()); logged when it goes through at last.  A SIGKILL loses
 * the list, as it would have lost the removal.
 *
 * A store that cannot be sent is given up, as before (the caller logs it:
 * the store lacks a record, the channel comes back only by hand-back),
 * except behind something of its own name that waits: sent first, it
 * would be taken by that removal when it goes.  It waits behind it, with a
 * duplicate of its descriptor, and a removal of its name that comes while
 * it waits takes it out of the list instead.  A channel's record names its
 * segment's inode, so a channel created again under the name of one
 * unlinked has a record of another name; an eventfd's names its endpoint
 * only, so the eventfd a consumer gives in place of another bears its name.
 *
 * At most FDSTORE_PENDING_MAX wait: past that a removal is given up and
 * logged (the next start finds the record), and so is a store that would
 * wait.
 */
#ifndef PINSHMD_FDSTORE_H
#define PINSHMD_FDSTORE_H

#include <stdint.h>

#define FDSTORE_PENDING_MAX 64
#define FDSTORE_RETRY_MS 1000 /* $PINSHMD_TEST_STORE_RETRY_MS, for the tests, changes it */
#define FDSTORE_NAME_MAX 300  /* an FDNAME's bytes, with its NUL */

/**
 * Keep @p fd in the store as @p fdname (what waits sent first).
 * @return 0 sent, or waiting behind a removal of its name; or -errno,
 *         given up (-ETIMEDOUT: the queue full; -ENOBUFS: it would wait and
 *         the list is full; -ENAMETOOLONG), for the caller to log.
 */
int fdstore_put(const char *fdname, int fd);

/** Drop @p fdname from the store (what waits sent first), or keep the
 *  removal to send again (logged). */
void fdstore_remove(const char *fdname);

/** For the event loop's timers: when fdstore_retry() is due (CLOCK_MONOTONIC
 *  ms), 0: nothing waits. */
uint64_t fdstore_due(void);

/** Send what waits, in order, up to the first that cannot go, without
 *  waiting. */
void fdstore_retry(void);

/** The daemon stops: send what waits (as any notification is sent, so
 *  once waiting NOTIFY_SEND_LIMIT_MS at most), and log what cannot go. */
void fdstore_stop(void);

#endif /* PINSHMD_FDSTORE_H */
