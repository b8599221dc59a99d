/*
 * move.c - a channel's pages moved to its first consumer's NUMA node, a
 * slice a loop turn (move.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "move.h"
#include "numa.h"
#include "registry.h"

/*
 * One slice of the move of @p chan's pages to m->node, from m->done on, at
 * most @p max bytes.  @return 1: more to move; 0: all moved; -EIO: the
 * policy is set, but some pages stay where they are; or an error of
 * mbind(), -EBADMSG (damaged): stopped.  m->why says why.
 */
static int move_slice(struct channel *chan, struct channel_move *m, size_t max)
{
	size_t len = chan->seg.size - m->done < max ? chan->seg.size - m->done : max;
	char why[sizeof(m->why)];
	int rc = -EBADMSG;

	if (chan->seg.damaged)
		snprintf(why, sizeof(why), "the segment is damaged (shrunk by a client)");
	else
		rc = numa_move((char *)chan->seg.base + m->done, len, m->node, why, sizeof(why));
	if (rc != 0)
		memcpy(m->why, why, sizeof(why));
	if (rc == -EIO)
		m->partial = true;
	else if (rc != 0)
		return rc;
	m->done += len;
	if (m->done < chan->seg.size)
		return 1;
	return m->partial ? -EIO : 0;
}

/* The move of @p chan is over (@p rc from move_slice()): its node, the log. */
static void move_end(struct channel *chan, const struct channel_move *m, int rc)
{
	if (rc == 0 || rc == -EIO) {
		chan->seg.node = m->node;
		if (rc == 0)
			log_info("channel '%s': pages moved to NUMA node %d, near its consumer (pid %d)", chan->name,
				 m->node, (int)m->pid);
		else
			log_warn("channel '%s': pages preferred on NUMA node %d, near its consumer (pid %d), but %s",
				 chan->name, m->node, (int)m->pid, m->why);
		return;
	}
	chan->seg.node = PINSHM_NODE_ANY;
	log_warn("channel '%s': pages not moved to NUMA node %d, near its consumer (pid %d): %s; "
		 "they stay where they are",
		 chan->name, m->node, (int)m->pid, m->why);
}

void move_forget(struct channel **moving, struct channel *chan)
{
	struct channel **p = moving;

	while (*p != chan)
		p = &(*p)->move->next;
	*p = chan->move->next;
	free(chan->move);
	chan->move = NULL;
}


void move_start(struct channel **moving, struct channel *chan, int node, pid_t pid)
{
	struct channel_move m = {.node = node, .pid = pid};

	if (node == PINSHM_NODE_ANY) {
		log_info("channel '%s': its consumer (pid %d) does not know its NUMA node: not placed yet", chan->name,
			 (int)pid);
		return;
	}
	if (!numa_node_known(node)) {
		log_warn("channel '%s': its consumer (pid %d) says NUMA node %d, not a node here: "
			 "ignored, not placed yet",
			 chan->name, (int)pid, node);
		return;
	}
	int rc = move_slice(chan, &m, segment_slice_bytes(&chan->seg));
	if (rc > 0)
		chan->move = malloc(sizeof(*chan->move));
	if (rc > 0 && chan->move) {
		*chan->move = m;
		chan->move->next = *moving;
		*moving = chan;
		chan->seg.node = node;
		return;
	}
	while (rc > 0) /* no memory to wait: the rest at once */
		rc = move_slice(chan, &m, SIZE_MAX);
	move_end(chan, &m, rc);
}

void move_step(struct channel **moving)
{
	struct channel *mv = *moving;
	int rc = move_slice(mv, mv->move, segment_slice_bytes(&mv->seg));

	if (rc <= 0) {
		move_end(mv, mv->move, rc);
		move_forget(moving, mv);
	}
}
