/*
 * coll_hier_v.c - MPI_Scatter, MPI_Scatterv, MPI_Gatherv and
 * MPI_Allgatherv on a communicator that spans nodes, with the layout of
 * coll_hier.c: the blocks travel packed, in node order (node j's blocks
 * in its ranks' order, then node j + 1's), through each node's area
 * between its ranks and its leader, and through the MPI library between
 * the leaders.
 *
 * Lengths.  Rank r's block is len[r] bytes (its count times its type's
 * size; MPI wants the two sides' signatures equal).  Every rank knows
 * them all for Scatter (its own block's length, the same everywhere) and
 * Allgatherv (recvcounts); for Scatterv and Gatherv the root knows them
 * all and every other rank its own.  So on those two, each node first
 * gathers its ranks' lengths at its leader (8 bytes a rank, one node
 * step), and on the root's node the root passes the nodes' totals to its
 * leader where it is not the leader itself.
 *
 *   Scatter(v): the root packs its blocks in node order and (where it is
 *     not its node's leader) passes them to the leader; the leaders'
 *     PMPI_Scatterv from the root's node's leader gives each leader its
 *     node's blocks; each leader scatters them in its node (coll_vbytes()).
 *   Gatherv, Allgatherv: each leader gathers its node's blocks
 *     (coll_vbytes()); the leaders' PMPI_Gatherv to the root's node's
 *     leader, or PMPI_Allgatherv; that leader passes them to the root, or
 *     every leader to its node; the root (every rank) unpacks them.
 *
 * A death on another node (coll_hier.c): the status goes as follows.
 *   Scatter: the root's node's leader's, by a leaders' MPI_Ibcast of one
 *     byte beside their MPI_Scatterv, then to the other nodes in a node
 *     step of one byte after the blocks.
 *   Scatterv, Gatherv: every leader's, agreed by an MPI_Allreduce before
 *     the leaders' call, which none makes after a failure: the counts,
 *     known at the root only, may differ then, and the library's call
 *     would wait for bytes never sent.  Then a node step of one byte after
 *     Scatterv's blocks; after Gatherv's, with them.
 *   The root's node of a Scatter(v) hears nothing more (its blocks came
 *   from the root through its own area), but for Reduce_scatter's, whose
 *   root may know its blocks wrong already (@p known): a node step on
 *   every node.
 *   Allgatherv: the leaders' MPI_Iallreduce beside their MPI_Allgatherv,
 *     and the byte with the blocks the leaders pass to their nodes.
 *
 * Whether these are carried depends only on the communicator and the root
 * (and for Scatter on the block's length, the same at every rank), as on
 * one node (coll_vops.c).  The leaders' counts are ints: a node's blocks,
 * or the communicator's, of INT_MAX bytes or more (a status byte goes after
 * them) fail with MPI_ERR_COUNT where
 * that is seen (the leaders then move no bytes for it).  Nothing is
 * allocated on a rank that is neither a leader nor takes all blocks,
 * beyond a packed copy of its own block where its datatype is not
 * contiguous.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coll_hier.h"

/* One side's blocks as the user gave them: block r is counts[r] items
 * (count where counts is NULL) of type at item displs[r] (r * count where
 * displs is NULL) of buf. */
struct side {
	const void *buf;
	const int *counts, *displs;
	int count;
	MPI_Datatype type;
	uint64_t size;  /* of the type, packed */
	MPI_Aint extent;
	int rc;         /* MPI_SUCCESS, or what is wrong with the type */
};

/* Only where the side is significant at this rank (@p here): elsewhere
 * its arguments may be anything, the datatype too. */
static struct side side_of(bool here, const void *buf, const int *counts, const int *displs, int count,
			   MPI_Datatype type)
{
	struct side s = {buf, counts, displs, count, type, 0, 0, MPI_SUCCESS};
	const struct pm_type *t = here ? pm_type_info(type) : NULL;
	if (t) {
		s.size = (uint64_t)t->size;
		s.extent = t->extent;
	} else {
		s.rc = MPI_ERR_TYPE;
	}
	return s;
}

static int side_count(const struct side *s, int r)
{
	return s->counts ? s->counts[r] : s->count;
}

static uint64_t side_len(const struct side *s, int r)
{
	int c = side_count(s, r);
	return s->rc == MPI_SUCCESS && c > 0 ? (uint64_t)c * s->size : 0;
}

static void *side_block(const struct side *s, int r)
{
	MPI_Aint d = s->displs ? (MPI_Aint)s->displs[r] : (MPI_Aint)r * s->count;
	return (void *)((uintptr_t)s->buf + (uintptr_t)(d * s->extent));
}

/* One call's plan: where the blocks lie in node order. */
struct plan {
	struct pm_hier *h;
	uint64_t *len;   /* rank -> bytes, where every length is known, else NULL */
	uint64_t *off;   /* rank -> offset of its block in node order (with len) */
	uint64_t *ntot;  /* node -> bytes of its blocks, where known */
	int *ncount, *ndispl; /* the same for the leaders' calls (at a leader that sends or takes all) */
	uint64_t *nlen;  /* at a leader: its node's ranks' lengths */
	uint64_t mine;   /* at a leader: its node's bytes */
	uint64_t total;  /* every node's bytes, where known */
	int rc;
};

static void *zalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		hier_no_memory();
	return p;
}

/* The end of a call: what it holds freed; the leaders' and node phases'
 * first error (@p sent, reported), else this rank's own (@p rc, reported). */
static int plan_end(struct plan *p, char *packed, char *part, void *tmp, int sent, int rc)
{
	free(p->len);
	free(p->off);
	free(p->ntot);
	free(p->ncount);
	free(p->ndispl);
	free(p->nlen);
	free(packed);
	free(part);
	free(tmp);
	return first(sent, rc);
}

/* The offsets and totals in node order from p->len (every rank's). */
static void plan_order(struct plan *p)
{
	const struct pm_hier *h = p->h;
	uint64_t *at = zalloc((size_t)h->nnodes, sizeof(uint64_t));
	p->off = zalloc((size_t)h->size, sizeof(uint64_t));
	if (!p->ntot)
		p->ntot = zalloc((size_t)h->nnodes, sizeof(uint64_t));
	memset(p->ntot, 0, (size_t)h->nnodes * sizeof(uint64_t));
	for (int r = 0; r < h->size; r++)
		p->ntot[h->node_of[r]] += p->len[r];
	p->total = 0;
	for (int j = 0; j < h->nnodes; j++) {
		at[j] = p->total;
		p->total += p->ntot[j];
	}
	for (int r = 0; r < h->size; r++) {
		p->off[r] = at[h->node_of[r]];
		at[h->node_of[r]] += p->len[r];
	}
	free(at);
	if (p->total >= INT_MAX) { /* past the leaders' counts (and a status byte): no bytes move */
		memset(p->len, 0, (size_t)h->size * sizeof(uint64_t));
		memset(p->ntot, 0, (size_t)h->nnodes * sizeof(uint64_t));
		p->total = 0;
		p->rc = MPI_ERR_COUNT;
	}
}

/* The leaders' counts from p->ntot: a node's, or the sum's, past INT_MAX
 * counts 0 (MPI_ERR_COUNT here). */
static void plan_counts(struct plan *p)
{
	const struct pm_hier *h = p->h;
	p->ncount = zalloc((size_t)h->nnodes, sizeof(int));
	p->ndispl = zalloc((size_t)h->nnodes, sizeof(int));
	uint64_t at = 0;
	for (int j = 0; j < h->nnodes; j++) {
		bool fits = p->ntot[j] < INT_MAX - at; /* and the status byte after them (at < INT_MAX: no wrap) */
		if (!fits && p->rc == MPI_SUCCESS)
			p->rc = MPI_ERR_COUNT;
		p->ndispl[j] = fits ? (int)at : 0;
		p->ncount[j] = fits ? (int)p->ntot[j] : 0;
		at += fits ? p->ntot[j] : 0;
	}
	p->total = at;
}

/* Every rank's length from @p s (where it knows them all), and its
 * node's at a leader. */
static void plan_lens(struct plan *p, const struct side *s)
{
	const struct pm_hier *h = p->h;
	p->len = zalloc((size_t)h->size, sizeof(uint64_t));
	for (int r = 0; r < h->size; r++)
		p->len[r] = side_len(s, r);
	plan_order(p);
}

/* A leader's lengths of its node's ranks: from p->len, or gathered from
 * each rank's own @p bytes (@p gather; the node's step, at every rank). */
static int plan_node(struct plan *p, uint64_t bytes, bool gather)
{
	struct pm_hier *h = p->h;
	int rc = MPI_SUCCESS, n = h->node_size[h->my_node];
	if (is_leader(h))
		p->nlen = zalloc((size_t)n, sizeof(uint64_t));
	if (gather)
		rc = coll_gather_bytes(h->node, (char *)&bytes, (char *)p->nlen, sizeof(bytes), 0);
	for (int r = 0, k = 0; !gather && is_leader(h) && r < h->size; r++)
		if (h->node_of[r] == h->my_node)
			p->nlen[k++] = p->len[r];
	/* Each length at most INT_MAX, so that their sum cannot wrap: they
	 * came through the area, where any rank of the node can write. */
	p->mine = 0;
	bool over = false;
	for (int k = 0; is_leader(h) && k < n; k++) {
		if (p->nlen[k] > INT_MAX)
			over = true;
		else
			p->mine += p->nlen[k];
	}
	if (is_leader(h) && (over || p->mine > INT_MAX)) {
		/* Nothing moves between the leaders for this node, nor within it:
		 * the node's lengths are the room the node step copies into. */
		p->mine = 0;
		memset(p->nlen, 0, (size_t)n * sizeof(uint64_t));
		if (p->rc == MPI_SUCCESS)
			p->rc = MPI_ERR_COUNT;
	}
	return rc;
}

/* On the root's node where the root does not lead: the nodes' totals
 * from the root to the leader, who then knows its counts. */
static int plan_root_totals(struct plan *p, int root, bool known, MPI_Comm comm)
{
	struct pm_hier *h = p->h;
	int rc = MPI_SUCCESS;
	if (h->my_node != h->node_of[root])
		return rc;
	if (h->leader[h->my_node] != root && !known) {
		if (!p->ntot && is_leader(h))
			p->ntot = zalloc((size_t)h->nnodes, sizeof(uint64_t));
		rc = coll_bcast_to(h->node, p->ntot, h->nnodes, MPI_UINT64_T, h->node_rank[root], 0, comm);
	}
	if (is_leader(h))
		plan_counts(p);
	return rc;
}

/* ---- Gatherv, Allgatherv ----------------------------------------------------- */

/* The packed blocks at @p packed (node order, p->off) to their places in
 * @p rs, but this rank's own where it is in place. */
static int unpack_blocks(const struct plan *p, const char *packed, const struct side *rs, bool in_place)
{
	int rc = rs->rc;
	for (int r = 0; r < p->h->size && rc == MPI_SUCCESS; r++)
		if (p->len[r] && !(in_place && r == p->h->rank))
			rc = pm_unpack(packed + p->off[r], p->len[r], side_block(rs, r), side_count(rs, r), rs->type);
	return rc;
}

/* The leaders' phase of a Gatherv to node @p rn's leader (every leader:
 * @p rn < 0), the node's blocks at @p part. */
static int gatherv_leaders(const struct plan *p, char *packed, char *part, int rn, MPI_Comm comm)
{
	const struct pm_hier *h = p->h;
	int rc;
	if (rn < 0)
		rc = PMPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, packed, p->ncount, p->ndispl, MPI_BYTE,
				     h->leaders);
	else if (h->my_node == rn)
		rc = PMPI_Gatherv(MPI_IN_PLACE, 0, MPI_BYTE, packed, p->ncount, p->ndispl, MPI_BYTE, rn, h->leaders);
	else
		rc = PMPI_Gatherv(part, (int)p->mine, MPI_BYTE, NULL, NULL, NULL, MPI_BYTE, rn, h->leaders);
	return pm_comm_error(comm, rc);
}

/* This rank's own block as contiguous bytes (*@p bytes of them): the
 * user's, or a copy in *@p tmp (packed where @p fill). */
static char *own_block(const struct side *s, int r, bool fill, uint64_t *bytes, void **tmp, int *rc)
{
	int c = side_count(s, r);
	*tmp = NULL;
	*bytes = 0;
	if (s->rc != MPI_SUCCESS || c < 0) {
		*rc = s->rc != MPI_SUCCESS ? s->rc : MPI_ERR_COUNT;
		return NULL;
	}
	*bytes = (uint64_t)c * s->size;
	if (*bytes == 0)
		return NULL;
	char *b = contiguous(side_block(s, r), c, s->type, 1, *bytes, fill, tmp, rc);
	if (!b)
		hier_no_memory();
	return b;
}

/* Whether an Allgatherv's blocks, which every rank knows, fit the leaders'
 * int counts of bytes (else Open MPI runs it whole at every rank). */
static bool allgatherv_fits(const struct pm_hier *h, const int *rcounts, MPI_Datatype rtype)
{
	int size = 0;
	uint64_t total = 0;
	if (!rcounts || PMPI_Type_size(rtype, &size) != MPI_SUCCESS || size < 0)
		return false;
	for (int r = 0; r < h->size; r++)
		total += rcounts[r] > 0 ? (uint64_t)rcounts[r] * (uint64_t)size : 0;
	return total < INT_MAX; /* and the status byte after them */
}

static int gatherv_call(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, const int *rcounts,
			const int *rdispls, MPI_Datatype rtype, int root, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	if (!h || !hier_v_carried(h) || root >= h->size || (root < 0 && !allgatherv_fits(h, rcounts, rtype)))
		return -1;
	int rn = root < 0 ? -1 : h->node_of[root], rc = MPI_SUCCESS;
	bool takes = root < 0 || h->rank == root, in_place = takes && sendbuf == MPI_IN_PLACE;
	struct plan p = {.h = h};
	struct side rs = side_of(takes, recvbuf, rcounts, rdispls, 0, rtype);
	struct side ss = side_of(!in_place, sendbuf, NULL, NULL, scount, stype);
	uint64_t bytes;
	void *tmp;
	char *mine = own_block(in_place ? &rs : &ss, in_place ? h->rank : 0, true, &bytes, &tmp, &rc);
	coll_count(root < 0 ? CALL_ALLGATHERV : CALL_GATHERV, true, bytes);
	if (takes)
		plan_lens(&p, &rs);
	int sent = plan_node(&p, bytes, root >= 0);
	if (root < 0 && is_leader(h))
		plan_counts(&p);
	else if (root >= 0)
		sent = first(sent, plan_root_totals(&p, root, false, comm));
	/* The leaders' room: every node's blocks where they take them all
	 * (their own node's among them where the lengths agree). */
	bool all_here = is_leader(h) && (root < 0 || h->my_node == rn);
	bool inside = all_here && (uint64_t)p.ncount[h->my_node] == p.mine;
	char *packed = takes || all_here ? zalloc((size_t)p.total + 1, 1) : NULL; /* + the status byte */
	char *part = inside ? packed + p.ndispl[h->my_node] : is_leader(h) ? zalloc((size_t)p.mine, 1) : NULL;
	if (all_here && !inside)
		p.rc = first(p.rc, MPI_ERR_TRUNCATE);
	sent = first(sent, coll_vbytes(h->node, true, mine, bytes, part, p.nlen, comm));
	/* The status: Allgatherv: beside the leaders' phase; Gatherv: agreed
	 * first, and no leader makes the library's call after a failure (the
	 * counts, known only at the root, may differ then: as for Scatterv). */
	char st = 0;
	if (is_leader(h) && root < 0) {
		struct hier_status hs;
		hier_status_start(h, &hs, sent, -1);
		sent = first(sent, gatherv_leaders(&p, packed, part, rn, comm));
		st = hier_status_wait(&hs) || sent != MPI_SUCCESS;
	} else if (is_leader(h)) {
		int failed = sent != MPI_SUCCESS, any = failed;
		if (h->watch)
			sent = first(sent,
				     pm_comm_error(comm, PMPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, h->leaders)));
		if (!any || !h->watch) /* unwatched: every leader makes it, as every other does */
			sent = first(sent, gatherv_leaders(&p, packed, part, rn, comm));
		st = any || sent != MPI_SUCCESS;
	}
	if (root < 0)
		sent = first(sent, hier_node_bytes_st(h, packed, p.total, &st, -1, comm));
	else if (h->my_node == rn && h->leader[rn] != root)
		sent = first(sent, hier_node_bytes_st(h, packed, p.total, &st, h->node_rank[root], comm));
	sent = hier_status_end(h, comm, sent, st);
	rc = first(rc, p.rc);
	if (takes && rc == MPI_SUCCESS && sent == MPI_SUCCESS)
		rc = unpack_blocks(&p, packed, &rs, in_place);
	return plan_end(&p, packed, inside ? NULL : part, tmp, sent, pm_comm_error(comm, rc));
}

int hier_gatherv(const void *sendbuf, int scount, MPI_Datatype stype, void *recvbuf, const int *rcounts,
		 const int *rdispls, MPI_Datatype rtype, int root, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, gatherv_call(sendbuf, scount, stype, recvbuf, rcounts, rdispls, rtype, root, comm));
}

/* ---- Scatter, Scatterv ------------------------------------------------------- */

bool hier_v_carried(const struct pm_hier *h)
{
	return h && (h->most <= 1 || h->half_min / (size_t)h->most >= 64);
}

/* The root's blocks of @p ss packed in node order into *@p packed. */
static int pack_blocks(const struct plan *p, const struct side *ss, char *packed)
{
	int rc = ss->rc;
	for (int r = 0; r < p->h->size && rc == MPI_SUCCESS; r++)
		if (p->len[r])
			rc = pm_pack(side_block(ss, r), side_count(ss, r), ss->type, packed + p->off[r], p->len[r]);
	return rc;
}

/* The leaders' phase of a Scatterv from node @p rn's leader: this node's
 * blocks to @p part. */
static int scatterv_leaders(const struct plan *p, char *packed, char *part, int rn, MPI_Comm comm)
{
	const struct pm_hier *h = p->h;
	int rc = h->my_node == rn ? PMPI_Scatterv(packed, p->ncount, p->ndispl, MPI_BYTE, MPI_IN_PLACE, 0, MPI_BYTE,
						  rn, h->leaders)
				  : PMPI_Scatterv(NULL, NULL, NULL, MPI_BYTE, part, (int)p->mine, MPI_BYTE, rn,
						  h->leaders);
	return pm_comm_error(comm, rc);
}

/* The lengths of a Scatter(v): known at the root (@p ss), and for
 * Scatter (@p uniform) at the leaders too (every block @p bytes); a
 * Scatterv's leaders gather theirs. */
static int scatter_plan(struct plan *p, const struct side *ss, uint64_t bytes, bool uniform, int root,
			MPI_Comm comm)
{
	struct pm_hier *h = p->h;
	if (h->rank == root) {
		plan_lens(p, ss);
	} else if (uniform && is_leader(h)) {
		p->len = zalloc((size_t)h->size, sizeof(uint64_t));
		for (int r = 0; r < h->size; r++)
			p->len[r] = bytes;
		plan_order(p);
	}
	int rc = plan_node(p, bytes, !uniform);
	return first(rc, plan_root_totals(p, root, uniform, comm));
}

int hier_scatter_run(struct pm_hier *h, bool v, const void *buf, const int *counts, const int *displs, int count,
		     MPI_Datatype type, void *rbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm,
		     const char *known)
{
	int rn = h->node_of[root], rc = MPI_SUCCESS;
	bool is_root = h->rank == root, in_place = is_root && rbuf == MPI_IN_PLACE;
	struct plan p = {.h = h};
	struct side ss = side_of(is_root, buf, v ? counts : NULL, v ? displs : NULL, count, type);
	struct side rs = side_of(!in_place, rbuf, NULL, NULL, rcount, rtype);
	uint64_t bytes = in_place ? side_len(&ss, root) : 0;
	void *tmp = NULL;
	char *mine = in_place ? NULL : own_block(&rs, 0, false, &bytes, &tmp, &rc);
	int sent = scatter_plan(&p, &ss, bytes, !v, root, comm);
	bool all_here = is_root || (is_leader(h) && h->my_node == rn);
	char *packed = all_here ? zalloc((size_t)p.total, 1) : NULL;
	if (is_root)
		rc = first(rc, pack_blocks(&p, &ss, packed));
	if (h->my_node == rn && h->leader[rn] != root)
		sent = first(sent, coll_bcast_to(h->node, packed, (int)p.total, MPI_BYTE, h->node_rank[root], 0, comm));
	bool inside = is_leader(h) && h->my_node == rn && (uint64_t)p.ncount[rn] == p.mine;
	char *part = inside ? packed + p.ndispl[rn] : is_leader(h) ? zalloc((size_t)p.mine, 1) : NULL;
	if (is_leader(h) && h->my_node == rn && !inside)
		p.rc = first(p.rc, MPI_ERR_TRUNCATE);
	/* The status, then a node step after the blocks on the nodes that
	 * take it.  Scatter: the root's node's leader's (its node phase
	 * failed, or @p known), by a leaders' Ibcast beside their phase.
	 * Scatterv: every leader's, agreed first: after a failure the leaders'
	 * counts (known only at the root) may differ, and the library's call
	 * would wait for bytes never sent; so no leader makes it. */
	char st = h->my_node == rn && (sent != MPI_SUCCESS || (known && *known));
	MPI_Request sreq = MPI_REQUEST_NULL;
	if (is_leader(h) && v) {
		int failed = st || sent != MPI_SUCCESS, any = failed;
		if (h->watch)
			sent = first(sent,
				     pm_comm_error(comm, PMPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, h->leaders)));
		st = any != 0;
	} else if (is_leader(h) && h->watch && PMPI_Ibcast(&st, 1, MPI_BYTE, rn, h->leaders, &sreq) != MPI_SUCCESS) {
		st = 1;
	}
	if (is_leader(h) && !(v && st && h->watch))
		sent = first(sent, scatterv_leaders(&p, packed, part, rn, comm));
	if (sreq != MPI_REQUEST_NULL && PMPI_Wait(&sreq, MPI_STATUS_IGNORE) != MPI_SUCCESS)
		st = 1;
	st = is_leader(h) && (st || sent != MPI_SUCCESS);
	sent = first(sent, coll_vbytes(h->node, false, mine, bytes, part, p.nlen, comm));
	if (h->watch && (known || h->my_node != rn)) { /* unwatched: the leader's own node's failure only */
		sent = first(sent, coll_bcast_to(h->node, &st, 1, MPI_BYTE, 0, -1, comm));
		sent = hier_status_end(h, comm, sent, st);
	}
	rc = first(rc, p.rc);
	if (tmp && rc == MPI_SUCCESS && sent == MPI_SUCCESS)
		rc = blocks_move(rbuf, rcount, rtype, 1, tmp, bytes, false);
	return plan_end(&p, packed, inside ? NULL : part, tmp, sent, pm_comm_error(comm, rc));
}

static int scatter_call(const void *sendbuf, bool v, const int *scounts, const int *sdispls, int scount,
			MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm)
{
	struct pm_hier *h = hier_get(&comm);
	if (!h || !hier_v_carried(h) || root < 0 || root >= h->size)
		return -1;
	bool in_place = h->rank == root && recvbuf == MPI_IN_PLACE;
	const struct pm_type *t = pm_type_info(in_place ? stype : rtype);
	int count = in_place ? (v ? scounts[root] : scount) : rcount;
	uint64_t bytes = t && count > 0 ? (uint64_t)t->size * (uint64_t)count : 0;
	/* Scatter: decided from the block's length, the same at every rank. */
	if (!v && (!t || count < 0 || bytes > INT_MAX / (uint64_t)h->size))
		return -1;
	coll_count(v ? CALL_SCATTERV : CALL_SCATTER, true, bytes);
	if (!v && bytes == 0)
		return MPI_SUCCESS;
	return hier_scatter_run(h, v, sendbuf, scounts, sdispls, scount, stype, recvbuf, rcount, rtype, root, comm,
				NULL);
}

int hier_scatter(const void *sendbuf, bool v, const int *scounts, const int *sdispls, int scount,
		 MPI_Datatype stype, void *recvbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm)
{
	struct pm_hier *outer = hier_current;
	return hier_done(outer, scatter_call(sendbuf, v, scounts, sdispls, scount, stype, recvbuf, rcount, rtype, root, comm));
}
