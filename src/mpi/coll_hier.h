/*
 * coll_hier.h - what coll_hier.c (the layout of a communicator that spans
 * nodes, Barrier, Bcast, the gathers, the reductions and scans) shares
 * with coll_hier_v.c (the scatters and the v variants).
 */
#ifndef PINSHM_MPI_COLL_HIER_H
#define PINSHM_MPI_COLL_HIER_H

#include "coll_red.h"

/* The layout agreed by every rank (coll_hier.c): the same at every rank
 * but node_comm, leaders, node and my_node. */
struct pm_hier {
	MPI_Comm comm;        /* the communicator: its error handler */
	MPI_Comm node_comm;   /* this rank's node, in the communicator's rank order */
	MPI_Comm leaders;     /* the nodes' leaders (node i: rank i), or MPI_COMM_NULL here */
	struct pm_coll *node; /* the node communicator's area */
	int rank, size, nnodes, my_node;
	int *node_of;         /* rank -> its node */
	int *node_rank;       /* rank -> its rank in its node */
	int *leader;          /* node -> the rank of its leader */
	int *node_size;       /* node -> how many ranks it has */
	bool blocks;          /* each node is one run of consecutive ranks */
	size_t half_min;      /* the smallest half of a node's area (SIZE_MAX: none has one) */
	int most;             /* the most ranks of a node */
	uint64_t nb_seq;      /* nonblocking calls made on the communicator (coll_nb.c) */
	uint64_t nb_done;     /* of those, completed here */
	uint64_t lead_seq;    /* of those, with a leaders' phase here */
	uint64_t lead_turn;   /* of those, the first that has not started all its leaders' phases */
	bool watch;           /* agreed: the job outlives a rank's death (hier_watching()): the
			       * leaders exchange the statuses that cost messages of their own */
	bool defer;           /* a blocking call runs: its errors are reported at its end */
	int deferred;         /* the first error reported through node_comm meanwhile, or MPI_SUCCESS */
};

extern struct pm_hier *hier_current; /* the layout of the blocking call that runs, or NULL */

/* Until every nonblocking call on @p h's communicator completed here
 * (coll_nb.c): a blocking call's leaders' phase must come after theirs. */
void hier_nb_drain(struct pm_hier *h);

/* pm_hier_for(*@p comm) for a blocking call: the pending nonblocking
 * calls of the communicator completed here first.  From there on the
 * call reports its errors through *@p comm, which becomes the node
 * communicator: its handler keeps them for hier_done(). */
static inline struct pm_hier *hier_get(MPI_Comm *comm)
{
	struct pm_hier *h = pm_hier_for(*comm);
	if (h && h->nb_done < h->nb_seq)
		hier_nb_drain(h);
	if (h) {
		h->defer = true;
		*comm = h->node_comm;
	}
	hier_current = h;
	return h;
}

/* The end of a blocking call that began with hier_get(), returning @p rc
 * (or the first error reported meanwhile, where @p rc is MPI_SUCCESS):
 * an error goes to the communicator's error handler now, once, after the
 * call passed the status on, not where a wait of a node phase found it
 * (by default the handler ends the job, and the other nodes would wait
 * for this rank's leader for ever), and also where the node's area failed
 * in an earlier call.  @p outer: hier_current when the call began (a
 * call made inside another on the same communicator, by a user's
 * operation, leaves the reporting to that one). */
int hier_done(struct pm_hier *outer, int rc);

static inline bool is_leader(const struct pm_hier *h)
{
	return h->leaders != MPI_COMM_NULL;
}

/* The first error of @p a, @p b. */
static inline int first(int a, int b)
{
	return a != MPI_SUCCESS ? a : b;
}

void hier_no_memory(void); /* ends the job */
bool hier_watching(void);  /* the job outlives a rank's death (coll_hier.c) */

/*
 * A death on another node (coll_hier.c says more).  A member's death is
 * seen on its own node only, so each call passes a status on: whether a
 * node's phase failed, from the leaders that know it to the ranks whose
 * data depends on it; a rank that learns of a failure returns
 * MPI_ERR_OTHER through the communicator's error handler
 * (hier_status_end()).
 */
/* The leaders' agreement on the status, whether this node's phase failed
 * (@p rc not MPI_SUCCESS): a PMPI_Iallreduce (MPI_MAX) started here,
 * beside the leaders' own call, and waited for after it
 * (hier_status_wait()); or, to leader @p to >= 0 only, a PMPI_Reduce
 * made by hier_status_wait() after their call, whose data it follows to
 * that leader. */
struct hier_status {
	int failed, any;
	MPI_Request req;
	const struct pm_hier *h;
	int to;
};
void hier_status_start(const struct pm_hier *h, struct hier_status *s, int rc, int to);
/* @return whether some node's phase failed (a failed wait counts). */
bool hier_status_wait(struct hier_status *s);
/* A node Bcast from the leader (to node rank @p to only, or to every rank:
 * @p to < 0) of @p n < INT_MAX packed bytes at @p buf (at the leader and
 * where they are taken; the others ignore @p buf and @p n), with the
 * status byte *@p st after them, at buf[n] (room of the call's own). */
int hier_node_bytes_st(const struct pm_hier *h, char *buf, uint64_t n, char *st, int to, MPI_Comm comm);
/* The same of @p count items of @p type at @p buf (@p bytes packed):
 * packed with the byte where that is small, else the data and then the
 * byte in a step of its own. */
int hier_node_bcast_st(const struct pm_hier *h, void *buf, int count, MPI_Datatype type, uint64_t bytes, char *st,
		       int to, MPI_Comm comm);
/* What a call returns at its end: @p rc (already reported), or, where
 * this rank learnt that some node's phase failed (@p failed),
 * MPI_ERR_OTHER reported through @p comm (the call's, hier_get()). */
int hier_status_end(const struct pm_hier *h, MPI_Comm comm, int rc, bool failed);

/* Scatter (@p count items a rank) or (@p v) Scatterv of the root's
 * blocks of @p type at @p buf (block r: @p counts[r] items at item
 * @p displs[r]), uncounted (coll_hier_v.c; the caller decided with
 * hier_v_carried() and counted).  @p rbuf MPI_IN_PLACE at the root: it
 * takes nothing.  @p known: NULL, or (at every rank alike) whether
 * the root's blocks are known to be wrong already (*@p known at the root,
 * which leads its node: Reduce_scatter's reduction failed); then the
 * root's node is told the status too. */
int hier_scatter_run(struct pm_hier *h, bool v, const void *buf, const int *counts, const int *displs, int count,
		     MPI_Datatype type, void *rbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm,
		     const char *known);
/* Whether the node phases of the v variants fit every node's area. */
bool hier_v_carried(const struct pm_hier *h);

#endif /* PINSHM_MPI_COLL_HIER_H */
