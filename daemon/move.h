/*
 * move.h - a channel made near its consumer (PINSHM_NODE_CONSUMER), at its
 * first consumer's OPEN: its pages move to the node that consumer says it
 * runs on (a hint from a client: checked against the nodes there are,
 * else ignored).  Whatever fails, the channel keeps working where its
 * pages are.  The first slice is moved at once (a small channel's whole
 * segment), the others by move_step(), one a loop turn; the channel is
 * listed on that node from then on, unless its first slice fails.
 */
#ifndef PINSHMD_MOVE_H
#define PINSHMD_MOVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct channel;

/* A channel's pages on their way to its first consumer's node, a slice a
 * turn (move_step()). */
struct channel_move {
	int node;              /* where to */
	pid_t pid;             /* that consumer, for the log */
	size_t done;           /* bytes moved from the start */
	bool partial;          /* some pages stayed where they are (mbind's EIO) */
	char why[160];         /* why not all, or why stopped */
	struct channel *next;  /* in the list of moves (registry.moving) */
};

/** Move @p chan's pages to @p node near its consumer @p pid: the first slice
 *  now, the rest by move_step() (@p chan on @p moving, chan->move set). */
void move_start(struct channel **moving, struct channel *chan, int node, pid_t pid);

/** Move a slice of the first channel of @p moving (not empty); a move
 *  that ends leaves the list (logged). */
void move_step(struct channel **moving);

/** Take @p chan's move (chan->move) out of @p moving and free it, ended or not. */
void move_forget(struct channel **moving, struct channel *chan);

#endif /* PINSHMD_MOVE_H */
