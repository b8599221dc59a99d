/*
 * coll_hier.c - collectives of a communicator that spans (pretend) nodes:
 * a node-local phase through pinshm, the leaders' phase through the MPI
 * library, which stays the engine between the nodes.
 *
 * The layout.  At the communicator's first call of those below every rank
 * learns every member's node (one allgather of its node's id and whether
 * its collectives are on); the nodes are numbered by their lowest rank,
 * whose rank is the node's leader.  Then two communicators of the library
 * (PMPI_Comm_split, ranks in the communicator's order): the node's ranks,
 * with an area of its own (coll_area_agree()), and the leaders (node i is
 * rank i there).  Whether every node's area opened, and the smallest half
 * of any node (what an element of a reduction must fit at every node), are
 * agreed by one allreduce over the communicator: carried at every rank or
 * at none.  A node communicator is the library's own: no entry of the
 * plugin names it, so a node phase never nests in another decision.
 *
 * The calls (coll_hier_v.c has the scatters and the v variants,
 * coll_hier_a2a.c the all-to-alls, coll_nb.c the nonblocking ones; each
 * blocking call first lets the communicator's pending nonblocking calls
 * complete here, hier_get()):
 *   Barrier: node barrier; the leaders' PMPI_Barrier; node barrier.
 *   Bcast: on the root's node, root -> its node (the leader included);
 *     the leaders' PMPI_Bcast from that node's leader; every other node's
 *     leader -> its node.
 *   Gather, Allgather: each node gathers its ranks' blocks (packed) at its
 *     leader; the leaders' PMPI_Gatherv to the root's node's leader, or
 *     PMPI_Allgatherv, of the nodes' blocks in node order; the leader
 *     passes them to the root, or to its whole node; the root (every rank)
 *     puts them in rank order.
 *   Reduce, Allreduce: each node reduces to its leader in the area's fixed
 *     order (coll_ops.c: x[a] op (x[a+1] op (... op x[b])) over the node's
 *     ranks a < ... < b); the leaders' PMPI_Reduce of the node results, to
 *     the root's node's leader (Reduce) or to the first node's leader then
 *     PMPI_Bcast among the leaders (Allreduce); then the node's leader ->
 *     the root (Reduce, where the root is not its node's leader) or -> its
 *     whole node (Allreduce).  One result is computed and copied to every
 *     rank, so every rank of an Allreduce gets the same bits; the node
 *     phase's order is fixed, and the leaders' is the library's MPI_Reduce,
 *     which for the same count, datatype and number of nodes runs the same
 *     algorithm in the same order (Open MPI's choice depends on those sizes
 *     only; MPI asks that a reduction give the same result for the same
 *     arguments in the same order).  A non-commutative operation is carried
 *     so only where each node holds one contiguous block of the
 *     communicator's ranks (then node order is rank order, and MPI_Reduce
 *     applies the node results in rank order); elsewhere the library takes
 *     it whole, at every rank alike.
 *   Reduce_scatter(_block): the Reduce above of all the blocks to rank 0
 *     (node 0's leader: no node step after the leaders'), then the
 *     Scatterv of coll_hier_v.c from there.
 *   Scan, Exscan: only where each node is a block of consecutive ranks
 *     (nodes in rank order; elsewhere the library takes them whole, at
 *     every rank alike): each node reduces its ranks' data to its leader
 *     (the node's total) and scans it (coll_scan.c's fixed order); the
 *     leaders' PMPI_Exscan of the totals gives node j's leader
 *     P = T0 op ... op T[j-1], which it passes to its node; a rank of node
 *     j > 0 then takes P op (its node's scan), an Exscan's leader P.
 *
 * A death on another node.  A member's death is seen on its own node only
 * (its area), so that the ranks of the other nodes do not return
 * MPI_SUCCESS with wrong data, each call passes a status on (a node's
 * phase failed): the leaders learn it with or beside their phase, and each
 * leader passes a byte to its node after the data of the node phase that
 * follows theirs; a rank that reads a set byte, or a leader that learnt of
 * a failure, returns MPI_ERR_OTHER (hier_status_end()).  The leaders make
 * the same library calls whatever failed, so none waits for ever; and a
 * call's error reaches the handler once, at the end of the call
 * (hier_done(): meanwhile the call reports through its node communicator,
 * whose handler keeps the first error), whether its node phase, the
 * leaders' or the status failed, or its node's area did in an earlier
 * call: by default the handler ends its process, and the other nodes'
 * leaders would wait for it.  All that only where the job outlives a death
 * (h->watch: --enable-recovery, ULFM, PINSHM_MPI_WATCH=1); else Open MPI's
 * runtime ends the job at a death, and each call takes its path without
 * the statuses (the Barrier: node barrier, leaders' MPI_Barrier, node
 * barrier), but for the bytes that ride with blocks already sent (Gather,
 * Allgather, Gatherv, Allgatherv, the Alltoalls).
 * What each call pays where the job is watched:
 *   Barrier: the leaders' MPI_Allreduce (MPI_MAX) of the status in place
 *     of their MPI_Barrier, the byte (a one-step node Bcast) in place of
 *     the second node barrier: no step more.
 *   Bcast: the root's node's leader's status after the data, packed with
 *     it up to ST_PACKED bytes (a copy at that leader and at each rank of
 *     the other nodes, no step more), else in a leaders' MPI_Bcast of one
 *     byte and a node step of its own.  The root's node hears nothing
 *     more: its data came from the root through its own area.
 *   Gather, Allgather: each node's status byte after its blocks in the
 *     leaders' MPI_Gatherv or MPI_Allgatherv: no message more.
 *   Reduce: the leaders' MPI_Reduce (MPI_MAX) of the status to the root's
 *     node's leader after their own call (a one-way message after the
 *     data: a leader that does not take the result does not wait for it).
 *   Allreduce: the same to the first node's leader, and back with the
 *     result in the leaders' MPI_Bcast (packed with it up to ST_PACKED
 *     bytes, else a one-byte MPI_Bcast more).
 *   Scan, Exscan: the leaders' MPI_Iallreduce of the status,
 *     started before their own call and waited for after it (as the
 *     nonblocking calls').
 *   Each: the byte after the data of the node Bcast that follows (a
 *     reduction's result packed with it up to ST_PACKED bytes, else a
 *     node step more; a gather's packed blocks have room for it).  Where
 *     no node phase follows (a rank with no result, the first node of a
 *     Scan) a rank other than a leader hears nothing: its own part
 *     complete, it may return MPI_SUCCESS.
 *   Reduce_scatter(_block): the Reduce's, then the Scatter(v)'s of
 *     coll_hier_v.c from the status agreed in it, with a node step for the
 *     byte on every node.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coll_hier.h"

void hier_no_memory(void)
{
	fprintf(stderr, "pinshm-mpi: out of memory\n");
	PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
}

void hier_free(struct pm_hier *h)
{
	if (!h)
		return;
	coll_area_free(h->node);
	if (h->node_comm != MPI_COMM_NULL)
		PMPI_Comm_free(&h->node_comm);
	if (h->leaders != MPI_COMM_NULL)
		PMPI_Comm_free(&h->leaders);
	free(h->node_of);
	free(h->node_rank);
	free(h->leader);
	free(h->node_size);
	free(h);
}

/* Every member's node from @p ids (member -> its node's id): the nodes
 * numbered by their lowest member, the leaders, the ranks in the nodes. */
static void number_nodes(struct pm_hier *h, const int64_t *ids, int size)
{
	h->blocks = true;
	for (int r = 0; r < size; r++) {
		int n = 0;
		while (n < h->nnodes && ids[2 * h->leader[n]] != ids[2 * r])
			n++;
		if (n == h->nnodes) {
			h->leader[h->nnodes++] = r;
			h->node_rank[r] = 0;
		} else {
			int prev = r - 1; /* the member of node n just before r */
			while (h->node_of[prev] != n)
				prev--;
			h->node_rank[r] = h->node_rank[prev] + 1;
		}
		h->node_of[r] = n;
		h->node_size[n]++;
		h->most = h->node_size[n] > h->most ? h->node_size[n] : h->most;
		if (r > 0 && n != h->node_of[r - 1] && n != h->node_of[r - 1] + 1)
			h->blocks = false;
	}
}

struct pm_hier *hier_current;

/* The node communicators' error handler and the layout each names. */
static MPI_Errhandler node_handler = MPI_ERRHANDLER_NULL;
static int node_key = MPI_KEYVAL_INVALID;

/* An error reported through the node communicator (a node phase's,
 * coll.c coll_call_error(); a blocking call's own, hier_get()): kept for
 * hier_done() during a blocking call, else through the communicator's
 * handler. */
static void node_error(MPI_Comm *nc, int *code, ...)
{
	struct pm_hier *h = NULL;
	int flag = 0;
	if (PMPI_Comm_get_attr(*nc, node_key, &h, &flag) != MPI_SUCCESS || !flag || !h)
		return;
	if (!h->defer)
		PMPI_Comm_call_errhandler(h->comm, *code);
	else if (h->deferred == MPI_SUCCESS)
		h->deferred = *code;
}

int hier_done(struct pm_hier *outer, int rc)
{
	struct pm_hier *h = hier_current;
	hier_current = outer;
	if (!h)
		return rc;
	if (h == outer) /* made inside a call on the same communicator (by a user's operation): that call reports */
		return rc;
	h->defer = false;
	int e = h->deferred;
	h->deferred = MPI_SUCCESS;
	rc = first(rc, e); /* rc < 0: not carried, nothing ran */
	if (rc > MPI_SUCCESS)
		PMPI_Comm_call_errhandler(h->comm, rc);
	return rc;
}

/* The node communicator, the leaders' and the node's area; @return
 * whether this rank's area is on (and its half's bytes in *@p half). */
static bool split_nodes(struct pm_hier *h, const struct pm_comm *c, int64_t *half)
{
	h->my_node = h->node_of[c->rank];
	PMPI_Comm_split(c->comm, h->my_node, c->rank, &h->node_comm);
	PMPI_Comm_split(c->comm, h->leader[h->my_node] == c->rank ? 0 : MPI_UNDEFINED, c->rank, &h->leaders);
	/* Their errors are returned, and reported through the user's
	 * communicator (pm_comm_error()), whose handler may change later. */
	PMPI_Comm_set_errhandler(h->node_comm, MPI_ERRORS_RETURN);
	if (h->leaders != MPI_COMM_NULL)
		PMPI_Comm_set_errhandler(h->leaders, MPI_ERRORS_RETURN);
	int n = 0;
	int *local = malloc((size_t)c->size * sizeof(int)); /* node rank -> index in the (pretend) node */
	if (!local)
		return hier_no_memory(), false;
	for (int r = 0; r < c->size; r++)
		if (h->node_of[r] == h->my_node)
			local[n++] = c->local[r];
	/* A node phase reports through the node communicator's handler
	 * (node_error(), set once the area is agreed); where that cannot be
	 * made, the communicator is not carried so (agreed in hier_make()). */
	if (node_key == MPI_KEYVAL_INVALID &&
	    (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &node_key, NULL) != MPI_SUCCESS ||
	     PMPI_Comm_create_errhandler(node_error, &node_handler) != MPI_SUCCESS))
		node_key = MPI_KEYVAL_INVALID;
	bool own = node_key != MPI_KEYVAL_INVALID && PMPI_Comm_set_attr(h->node_comm, node_key, h) == MPI_SUCCESS;
	h->node = coll_area_agree(h->node_comm, h->node_rank[c->rank], n, local, own ? h->node_comm : c->comm);
	free(local);
	if (own)
		own = PMPI_Comm_set_errhandler(h->node_comm, node_handler) == MPI_SUCCESS;
	*half = h->node->half_bytes ? (int64_t)h->node->half_bytes : INT64_MAX;
	return h->node->on && own;
}

struct pm_hier *hier_make(struct pm_comm *c)
{
	struct pm_hier *h = calloc(1, sizeof(*h));
	int64_t mine[2] = {pm.local_world[0], coll_wanted()}, *ids = malloc((size_t)c->size * sizeof(mine));
	if (!h || !ids || !(h->node_of = calloc((size_t)c->size, sizeof(int))) ||
	    !(h->node_rank = calloc((size_t)c->size, sizeof(int))) ||
	    !(h->leader = calloc((size_t)c->size, sizeof(int))) ||
	    !(h->node_size = calloc((size_t)c->size, sizeof(int)))) {
		hier_no_memory();
		return NULL;
	}
	h->comm = c->comm;
	h->size = c->size;
	h->rank = c->rank;
	h->node_comm = h->leaders = MPI_COMM_NULL;
	PMPI_Allgather(mine, 2, MPI_INT64_T, ids, 2, MPI_INT64_T, c->comm);
	bool wanted = true;
	for (int r = 0; r < c->size; r++)
		wanted = wanted && ids[2 * r + 1];
	if (wanted) /* everyone's answer: the same at every rank */
		number_nodes(h, ids, c->size);
	free(ids);
	if (!wanted) {
		hier_free(h);
		return NULL;
	}
	int64_t agreed[3] = {0, 0, hier_watching()};
	agreed[0] = split_nodes(h, c, &agreed[1]);
	PMPI_Allreduce(MPI_IN_PLACE, agreed, 3, MPI_INT64_T, MPI_MIN, c->comm);
	h->half_min = (uint64_t)agreed[1] > SIZE_MAX ? SIZE_MAX : (size_t)agreed[1];
	h->watch = agreed[2] != 0;
	if (!agreed[0]) {
		hier_free(h);
		return NULL;
	}
	return h;
}

/* ---- a death on another node ------------------------------------------------ */

/* An MCA boolean's value: "0", "false", "no" (any case) or empty are false. */
static bool mca_true(const char *v)
{
	return *v && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 && strcasecmp(v, "no") != 0;
}

/* Whether the job outlives a rank's death.  Without that (Open MPI's
 * default) the runtime ends the whole job when a rank dies, so the
 * statuses that would cost the leaders messages of their own are not
 * exchanged; those that ride with data are. */
bool hier_watching(void)
{
	const char *v = getenv("PINSHM_MPI_WATCH");
	if (v && *v)
		return mca_true(v);
	v = getenv("OMPI_MCA_orte_enable_recovery"); /* mpirun --enable-recovery */
	const char *ft = getenv("OMPI_MCA_mpi_ft_enable"); /* ULFM */
	return (v && mca_true(v)) || (ft && mca_true(ft));
}

/* Data up to this many bytes goes to a node packed, with the status byte
 * after it (a copy at the leader and at each rank that takes it); longer
 * data goes as it is and the byte in a node step of its own. */
#define ST_PACKED (16u * 1024)

void hier_status_start(const struct pm_hier *h, struct hier_status *s, int rc, int to)
{
	s->failed = rc != MPI_SUCCESS;
	s->any = 0;
	s->h = h;
	s->to = to;
	s->req = MPI_REQUEST_NULL;
	if (!h->watch) { /* only this node's own: no message */
		s->to = -1;
		return;
	}
	if (to < 0 && PMPI_Iallreduce(&s->failed, &s->any, 1, MPI_INT, MPI_MAX, h->leaders, &s->req) != MPI_SUCCESS) {
		s->req = MPI_REQUEST_NULL;
		s->any = 1;
	}
}

bool hier_status_wait(struct hier_status *s)
{
	if (s->req != MPI_REQUEST_NULL && PMPI_Wait(&s->req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
		s->any = 1;
	if (s->to >= 0 && PMPI_Reduce(&s->failed, &s->any, 1, MPI_INT, MPI_MAX, s->to, s->h->leaders) != MPI_SUCCESS)
		s->any = 1;
	return s->any != 0;
}

int hier_node_bytes_st(const struct pm_hier *h, char *buf, uint64_t n, char *st, int to, MPI_Comm comm)
{
	bool takes = to < 0 || h->node_rank[h->rank] == to, lead = is_leader(h);
	if (lead)
		buf[n] = *st;
	int rc = coll_bcast_to(h->node, buf, (int)n + 1, MPI_BYTE, 0, to, comm);
	if (takes && !lead)
		*st = buf[n];
	return rc;
}

int hier_node_bcast_st(const struct pm_hier *h, void *buf, int count, MPI_Datatype type, uint64_t bytes, char *st,
		       int to, MPI_Comm comm)
{
	if (!h->watch) /* the leader's byte says its own node's failure only: not passed */
		return coll_bcast_to(h->node, buf, count, type, 0, to, comm);
	if (bytes > ST_PACKED) {
		int rc = coll_bcast_to(h->node, buf, count, type, 0, to, comm);
		return first(rc, coll_bcast_to(h->node, st, 1, MPI_BYTE, 0, to, comm));
	}
	bool takes = to < 0 || h->node_rank[h->rank] == to, lead = is_leader(h);
	char small[64], *room = bytes < sizeof(small) || !(takes || lead) ? small : malloc(bytes + 1);
	if (!room)
		return hier_no_memory(), MPI_ERR_NO_MEM;
	int rc = lead ? pm_comm_error(comm, pm_pack(buf, count, type, room, bytes)) : MPI_SUCCESS;
	if (rc != MPI_SUCCESS) /* the node is told: its data would be wrong */
		*st = 1;
	int sent = hier_node_bytes_st(h, room, bytes, st, to, comm);
	if (takes && !lead && sent == MPI_SUCCESS)
		rc = pm_comm_error(comm, pm_unpack(room, bytes, buf, count, type));
	if (room != small)
		free(room);
	return first(sent, rc);
}

int hier_status_end(const struct pm_hier *h, MPI_Comm comm, int rc, bool failed)
{
	if (rc != MPI_SUCCESS || !failed)
		return rc;
	fprintf(stderr,
		"pinshm-mpi: rank %d (world rank %d): a rank of the communicator on another node died: "
		"the collective call cannot complete\n",
		h->rank, pm.world_rank);
	return pm_comm_error(comm, MPI_ERR_OTHER);
}

/* ---- the calls ------------------------------------------------------------- */

static int barrier_call(MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	if (!h)
		return -1;
	coll_count(CALL_BARRIER, true, 0);
	int rc = coll_barrier(h->node);
	if (!h->watch) { /* node barrier, leaders' barrier, node barrier */
		if (is_leader(h))
			rc = first(rc, pm_comm_error(comm, PMPI_Barrier(h->leaders)));
		return first(rc, coll_barrier(h->node));
	}
	char st = 0;
	if (is_leader(h)) { /* the status's allreduce waits for every leader, as a barrier */
		int failed = rc != MPI_SUCCESS, any = 0;
		rc = first(rc, pm_comm_error(comm, PMPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, h->leaders)));
		st = rc != MPI_SUCCESS || any;
	}
	/* The status byte to the node: one step, as a node barrier's. */
	rc = first(rc, coll_bcast_to(h->node, &st, 1, MPI_BYTE, 0, -1, comm));
	return hier_status_end(h, comm, rc, st);
}

int hier_barrier(MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, barrier_call(comm));
}

static int bcast_call(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	const struct pm_type *t = h ? pm_type_info(type) : NULL;
	if (!t || count < 0 || root < 0 || root >= h->size)
		return -1;
	uint64_t bytes = (uint64_t)t->size * (uint64_t)count;
	coll_count(CALL_BCAST, true, bytes);
	int rn = h->node_of[root], rc = MPI_SUCCESS;
	if (h->my_node == rn)
		rc = coll_bcast_to(h->node, buffer, count, type, h->node_rank[root], -1, comm);
	if (bytes == 0 || !h->watch) { /* nothing to be wrong, or no death to pass on: no status */
		if (is_leader(h))
			rc = first(rc, pm_comm_error(comm, PMPI_Bcast(buffer, count, type, rn, h->leaders)));
		if (h->my_node != rn)
			rc = first(rc, coll_bcast_to(h->node, buffer, count, type, 0, -1, comm));
		return rc;
	}
	/* The root's node's leader's status (its node phase failed) goes to
	 * the other nodes after the data: packed with it where small (and so
	 * on through their node phase), else in a Bcast (and a node step) of
	 * its own. */
	char st = h->my_node == rn && rc != MPI_SUCCESS;
	if (bytes > ST_PACKED) {
		if (is_leader(h)) {
			int e = PMPI_Bcast(buffer, count, type, rn, h->leaders);
			e = first(e, PMPI_Bcast(&st, 1, MPI_BYTE, rn, h->leaders));
			rc = first(rc, pm_comm_error(comm, e));
			st = st || rc != MPI_SUCCESS;
		}
		if (h->my_node == rn) /* its ranks have their data (or saw their node's error) */
			return rc;
		rc = first(rc, hier_node_bcast_st(h, buffer, count, type, bytes, &st, -1, comm));
		return hier_status_end(h, comm, rc, st);
	}
	if (h->my_node == rn && !is_leader(h))
		return rc;
	char small[64], *tmp = bytes < sizeof(small) ? small : malloc(bytes + 1);
	if (!tmp)
		return hier_no_memory(), MPI_ERR_NO_MEM;
	if (is_leader(h)) {
		if (h->my_node == rn && pm_pack(buffer, count, type, tmp, bytes) != MPI_SUCCESS)
			st = 1;
		tmp[bytes] = st;
		rc = first(rc, pm_comm_error(comm, PMPI_Bcast(tmp, (int)bytes + 1, MPI_BYTE, rn, h->leaders)));
		st = tmp[bytes] || rc != MPI_SUCCESS;
	}
	if (h->my_node != rn) {
		int sent = hier_node_bytes_st(h, tmp, bytes, &st, -1, comm);
		if (sent == MPI_SUCCESS && !st)
			rc = first(rc, pm_comm_error(comm, pm_unpack(tmp, bytes, buffer, count, type)));
		rc = first(rc, sent);
	}
	if (tmp != small)
		free(tmp);
	return h->my_node == rn ? rc : hier_status_end(h, comm, rc, st);
}

int hier_bcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, bcast_call(buffer, count, type, root, comm));
}

/* The leaders' Bcast from node @p from's leader of @p count items of
 * @p type at @p buf (@p bytes packed) and the status byte *@p st (or-ed
 * into the others'): packed with the data where small, else in a Bcast
 * of its own.  @return the library's error. */
static int leaders_bcast_st(const struct pm_hier *h, void *buf, int count, MPI_Datatype type, uint64_t bytes,
			    char *st, int from)
{
	bool here = h->my_node == from;
	if (!h->watch)
		return PMPI_Bcast(buf, count, type, from, h->leaders);
	if (bytes > ST_PACKED) {
		char b = *st;
		int rc = PMPI_Bcast(buf, count, type, from, h->leaders);
		rc = first(rc, PMPI_Bcast(&b, 1, MPI_BYTE, from, h->leaders));
		*st = *st || b;
		return rc;
	}
	char small[64], *tmp = bytes < sizeof(small) ? small : malloc(bytes + 1);
	if (!tmp)
		return hier_no_memory(), MPI_ERR_NO_MEM;
	int rc = here ? pm_pack(buf, count, type, tmp, bytes) : MPI_SUCCESS;
	if (here)
		tmp[bytes] = *st || rc != MPI_SUCCESS;
	rc = first(rc, PMPI_Bcast(tmp, (int)bytes + 1, MPI_BYTE, from, h->leaders));
	if (!here && rc == MPI_SUCCESS) {
		*st = *st || tmp[bytes];
		rc = pm_unpack(tmp, bytes, buf, count, type);
	}
	if (tmp != small)
		free(tmp);
	return rc;
}

/* The leaders' phase of a reduction of @p count elements at @p buf (this
 * node's result, in this rank's layout, @p bytes packed): to the leader
 * of node @p rn, or (@p all) to the first node's leader and then back to
 * every leader.  The status (this node's phase @p failed) goes with it:
 * MPI_MAX-reduced to the same leader after the data, and back with the
 * result.  @return the error (reported), and in *@p st whether some node
 * failed, as far as this leader learnt. */
static int leaders_reduce(const struct pm_hier *h, void *buf, int count, MPI_Datatype type, MPI_Op op,
			  uint64_t bytes, int rn, bool all, bool failed, char *st, MPI_Comm comm)
{
	int to = all ? 0 : rn;
	struct hier_status hs;
	hier_status_start(h, &hs, failed ? MPI_ERR_OTHER : MPI_SUCCESS, to);
	int rc = h->my_node == to ? PMPI_Reduce(MPI_IN_PLACE, buf, count, type, op, to, h->leaders)
				  : PMPI_Reduce(buf, NULL, count, type, op, to, h->leaders);
	*st = hier_status_wait(&hs) || failed || rc != MPI_SUCCESS;
	if (all)
		rc = first(rc, leaders_bcast_st(h, buf, count, type, bytes, st, 0));
	*st = *st || rc != MPI_SUCCESS;
	return pm_comm_error(comm, rc);
}

/* Whether a reduction of @p op, @p type, @p count is carried on @p h (from
 * what matches at every rank only); its layout in *@p r. */
static bool hier_carries(const struct pm_hier *h, struct red *r, MPI_Datatype type, MPI_Op op, int count)
{
	int commute = 0;
	if (!h || count < 0 || op == MPI_OP_NULL || PMPI_Op_commutative(op, &commute) != MPI_SUCCESS)
		return false;
	if (!commute && !h->blocks)
		return false;
	/* The element must fit the smallest half of every node; this node's
	 * own half sets its chunks (steps only its node runs). */
	return red_layout(r, type, h->half_min) &&
	       red_layout(r, type, h->node->half_bytes ? h->node->half_bytes : SIZE_MAX);
}

/* A reduction carried (hier_carries()) and counted, to @p root or
 * (@p root < 0) every rank; *@p st: whether this rank learnt that some
 * node's phase failed (not reported yet: hier_status_end()). */
static int reduce_body(struct pm_hier *h, const struct red *rp, const void *sendbuf, void *recvbuf, int count,
		       int root, MPI_Comm comm, bool *st_out)
{
	struct red r = *rp;
	MPI_Datatype type = r.type;
	MPI_Op op = r.op;
	if (count == 0)
		return MPI_SUCCESS;
	int rn = root < 0 ? -1 : h->node_of[root];
	bool root_leads = root < 0 || h->leader[rn] == root;
	/* The node's result, at its leader: the user's buffer where the
	 * leader takes the result, else room of its own. */
	void *base = NULL, *acc = recvbuf;
	if (is_leader(h) && !(root_leads && h->my_node == rn) && root >= 0)
		acc = red_room(&r, count, &base);
	int rc = coll_reduce(h->node, &r, sendbuf, acc, count, 0, comm); /* in place: only where acc is recvbuf */
	/* The leaders pass the status with their phase; the leader's byte
	 * goes to its node after the result. */
	char st = 0;
	uint64_t bytes = (uint64_t)count * r.size;
	if (is_leader(h))
		rc = first(rc,
			   leaders_reduce(h, acc, count, type, op, bytes, rn, root < 0, rc != MPI_SUCCESS, &st, comm));
	if (root < 0)
		rc = first(rc, hier_node_bcast_st(h, recvbuf, count, type, bytes, &st, -1, comm));
	else if (h->my_node == rn && !root_leads)
		rc = first(rc, hier_node_bcast_st(h, is_leader(h) ? acc : recvbuf, count, type, bytes, &st,
						  h->node_rank[root], comm));
	free(base);
	*st_out = st;
	return rc;
}

static int reduce_call(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
		       MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	struct red r = {.op = op};
	if (!hier_carries(h, &r, type, op, count) || root >= h->size)
		return -1;
	coll_count(root < 0 ? CALL_ALLREDUCE : CALL_REDUCE, true, (uint64_t)count * r.size);
	bool st = false;
	int rc = reduce_body(h, &r, sendbuf, recvbuf, count, root, comm, &st);
	return hier_status_end(h, comm, rc, st);
}

int hier_reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
		MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, reduce_call(sendbuf, recvbuf, count, type, op, root, comm));
}

/* The blocks of @p bytes of every rank, @p mine here, in node order at
 * @p packed (node j's from @p displs[j], in its ranks' order, then its
 * status byte; @p counts[j] bytes in all): at every rank (@p rn < 0), or
 * at the leader of node @p rn and from there at rank @p root. */
static int gather_nodes(const struct pm_hier *h, char *mine, uint64_t bytes, char *packed, const int *counts,
			const int *displs, int rn, int root, MPI_Comm comm)
{
	int me = h->my_node, total = displs[h->nnodes - 1] + counts[h->nnodes - 1];
	int rc = coll_gather_bytes(h->node, mine, is_leader(h) ? packed + displs[me] : NULL, bytes, 0);
	if (is_leader(h)) /* the node's status, after its blocks */
		packed[displs[me] + counts[me] - 1] = rc != MPI_SUCCESS;
	if (is_leader(h) && rn < 0)
		rc = first(rc, pm_comm_error(comm, PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, packed, counts,
								   displs, MPI_BYTE, h->leaders)));
	else if (is_leader(h) && me == rn)
		rc = first(rc, pm_comm_error(comm, PMPI_Gatherv(MPI_IN_PLACE, 0, MPI_BYTE, packed, counts, displs,
								MPI_BYTE, rn, h->leaders)));
	else if (is_leader(h))
		rc = first(rc, pm_comm_error(comm, PMPI_Gatherv(packed + displs[me], counts[me], MPI_BYTE, NULL, NULL,
								NULL, MPI_BYTE, rn, h->leaders)));
	char st = 0;
	if (is_leader(h)) { /* what it learnt: the nodes' status bytes, where it took their blocks */
		st = rc != MPI_SUCCESS;
		for (int j = 0; j < h->nnodes && (rn < 0 || me == rn); j++)
			st = st || packed[displs[j] + counts[j] - 1];
	}
	/* The status byte after all (packed has room for it). */
	if (rn < 0)
		rc = first(rc, hier_node_bytes_st(h, packed, (uint64_t)total, &st, -1, comm));
	else if (me == rn && h->leader[rn] != root)
		rc = first(rc, hier_node_bytes_st(h, packed, (uint64_t)total, &st, h->node_rank[root], comm));
	return hier_status_end(h, comm, rc, st);
}

/* The blocks in node order at @p packed to @p recvbuf in rank order. */
static int unpack_ranks(const struct pm_hier *h, const char *packed, const int *displs, uint64_t bytes,
			void *recvbuf, int rcount, MPI_Datatype rtype)
{
	int rc = MPI_SUCCESS;
	void *tmp = NULL;
	char *ordered = contiguous(recvbuf, rcount, rtype, h->size, bytes, false, &tmp, &rc);
	if (!ordered)
		return MPI_ERR_NO_MEM;
	for (int r = 0; r < h->size; r++)
		memcpy(ordered + (uint64_t)r * bytes, packed + displs[h->node_of[r]] + (uint64_t)h->node_rank[r] * bytes,
		       bytes);
	if (tmp && rc == MPI_SUCCESS)
		rc = blocks_move(recvbuf, rcount, rtype, h->size, tmp, bytes, false);
	free(tmp);
	return rc;
}

static int gather_call(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount,
		       MPI_Datatype rtype, int root, bool all, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	if (!h || (!all && (root < 0 || root >= h->size)))
		return -1;
	int rank = h->rank, rc = MPI_SUCCESS;
	bool takes = all || rank == root, in_place = takes && sendbuf == MPI_IN_PLACE;
	const struct pm_type *t = pm_type_info(in_place ? rtype : stype);
	int count = in_place ? rcount : scount;
	uint64_t bytes = t && count >= 0 ? (uint64_t)t->size * (uint64_t)count : UINT64_MAX;
	MPI_Aint rext = in_place && t ? t->extent : 0;
	/* The leaders' counts are ints: each node's blocks and its status byte,
	 * and a status byte after them all. */
	if (bytes > (INT_MAX - 1 - (uint64_t)h->nnodes) / (uint64_t)h->size)
		return -1;
	coll_count(all ? CALL_ALLGATHER : CALL_GATHER, true, bytes);
	if (bytes == 0)
		return MPI_SUCCESS;
	int *counts = malloc((size_t)h->nnodes * sizeof(int)), *displs = malloc((size_t)h->nnodes * sizeof(int));
	bool room = takes || is_leader(h); /* where the n blocks lie */
	char *packed = room ? malloc(bytes * (uint64_t)h->size + (uint64_t)h->nnodes + 1) : NULL, *mine;
	void *tmp_mine = NULL;
	if (in_place)
		mine = contiguous((char *)recvbuf + (MPI_Aint)rank * rcount * rext, rcount, rtype, 1, bytes, true,
				  &tmp_mine, &rc);
	else
		mine = contiguous((void *)(uintptr_t)sendbuf, scount, stype, 1, bytes, true, &tmp_mine, &rc);
	if (!counts || !displs || (room && !packed) || !mine)
		return hier_no_memory(), MPI_ERR_NO_MEM;
	for (int j = 0, off = 0; j < h->nnodes; off += counts[j++]) {
		counts[j] = h->node_size[j] * (int)bytes + 1; /* and the node's status byte */
		displs[j] = off;
	}
	/* gather_nodes() reports its errors; rc's are this rank's own. */
	int sent = gather_nodes(h, mine, bytes, packed, counts, displs, all ? -1 : h->node_of[root], root, comm);
	if (takes && sent == MPI_SUCCESS)
		rc = first(rc, unpack_ranks(h, packed, displs, bytes, recvbuf, rcount, rtype));
	free(counts);
	free(displs);
	free(packed);
	free(tmp_mine);
	return first(sent, pm_comm_error(comm, rc));
}

int hier_gather(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype,
		int root, bool all, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, gather_call(sendbuf, scount, stype, recvbuf, rcount, rtype, root, all, comm));
}

/* ---- Reduce_scatter, Scan ---------------------------------------------------- */

static int reduce_scatter_call(const void *sendbuf, void *recvbuf, const int *counts, int block, MPI_Datatype type,
			       MPI_Op op, MPI_Comm comm, enum coll_call call)
{
	struct pm_hier *h = hier_get(&comm);
	struct red r = {.op = op};
	bool valid = h && (counts || block >= 0);
	int64_t total = 0;
	for (int d = 0; valid && d < h->size; d++) {
		int c = counts ? counts[d] : block;
		valid = c >= 0;
		total += c;
	}
	/* Every rank knows the counts: past the leaders' int counts of bytes,
	 * Open MPI runs the call whole at every rank. */
	if (!valid || total > INT_MAX || !hier_carries(h, &r, type, op, (int)total) || !hier_v_carried(h) ||
	    (uint64_t)total * r.size > INT_MAX)
		return -1;
	coll_count(call, true, (uint64_t)total * r.size);
	if (total == 0)
		return MPI_SUCCESS;
	/* The whole reduction at rank 0 (node 0's leader), then its blocks
	 * scattered from there. */
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	void *base = NULL, *sum = h->rank == 0 ? red_room(&r, (int)total, &base) : NULL;
	int *displs = h->rank == 0 && counts ? malloc((size_t)h->size * sizeof(int)) : NULL;
	if (h->rank == 0 && counts && !displs)
		return hier_no_memory(), MPI_ERR_NO_MEM;
	for (int d = 0, at = 0; displs && d < h->size; at += counts[d++])
		displs[d] = at;
	bool st = false;
	int rc = reduce_body(h, &r, in, sum, (int)total, 0, comm, &st);
	char failed = rc != MPI_SUCCESS || st; /* at rank 0: its sums are known to be wrong */
	rc = first(rc, hier_scatter_run(h, counts != NULL, sum, counts, displs, block, type, recvbuf,
					counts ? counts[h->rank] : block, type, 0, comm, &failed));
	free(displs);
	free(base);
	return hier_status_end(h, comm, rc, st); /* once: the scatter's, if it reported, returned the error */
}

int hier_reduce_scatter(const void *sendbuf, void *recvbuf, const int *counts, int block, MPI_Datatype type,
			MPI_Op op, MPI_Comm comm, enum coll_call call)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, reduce_scatter_call(sendbuf, recvbuf, counts, block, type, op, comm, call));
}

/* This rank's result from the nodes' before it (@p pre) and its node's
 * scan (@p out): pre op out (Exscan at a leader: pre). */
static int scan_combine(const struct pm_hier *h, const struct red *r, const void *pre, void *out, int count, bool ex)
{
	if (ex && h->node_rank[h->rank] == 0)
		return typed_copy(pre, out, count, r->type, (uint64_t)count * r->size);
	return PMPI_Reduce_local(pre, out, count, r->type, r->op);
}

static int scan_call(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, bool ex,
		     MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	struct red r = {.op = op};
	if (!hier_carries(h, &r, type, op, count) || !h->blocks)
		return -1;
	coll_count(ex ? CALL_EXSCAN : CALL_SCAN, true, (uint64_t)count * r.size);
	if (count == 0)
		return MPI_SUCCESS;
	const void *in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
	/* The node's total at its leader (before the scan may write over
	 * the input in place), the node's scan, the leaders' exscan of the
	 * totals, and its result to every rank of the nodes after the first. */
	void *tbase = NULL, *pbase = NULL, *total = NULL, *pre = NULL;
	if (is_leader(h))
		total = red_room(&r, count, &tbase);
	if (is_leader(h) || h->my_node > 0)
		pre = red_room(&r, count, &pbase);
	int rc = coll_reduce(h->node, &r, in, total, count, 0, comm);
	rc = first(rc, coll_scan(h->node, &r, in, recvbuf, count, ex, comm));
	char st = 0;
	if (is_leader(h)) { /* the status, beside the leaders' phase */
		struct hier_status hs;
		hier_status_start(h, &hs, rc, -1);
		rc = first(rc, pm_comm_error(comm, PMPI_Exscan(total, pre, count, type, op, h->leaders)));
		st = hier_status_wait(&hs) || rc != MPI_SUCCESS;
	}
	if (h->my_node > 0) {
		rc = first(rc, hier_node_bcast_st(h, pre, count, type, (uint64_t)count * r.size, &st, -1, comm));
		if (rc == MPI_SUCCESS && !st)
			rc = pm_comm_error(comm, scan_combine(h, &r, pre, recvbuf, count, ex));
	}
	free(tbase);
	free(pbase);
	return hier_status_end(h, comm, rc, st);
}

int hier_scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, bool ex, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, scan_call(sendbuf, recvbuf, count, type, op, ex, comm));
}
