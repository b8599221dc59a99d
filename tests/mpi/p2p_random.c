/*
 * p2p_random.c - a seeded random mix of point-to-point traffic.
 *
 * Usage: p2p_random [SEED [ROUNDS]] (else $P2P_RANDOM_SEED, $P2P_RANDOM_ROUNDS;
 * seed 1, 24 rounds).  Rank 0 prints the seed first, so that a failure can
 * be replayed; every failure names the seed and the round.
 * $P2P_RANDOM_VERBOSE traces the rounds (below).
 *
 * Every rank derives the whole schedule of every rank from the seed, round
 * by round, without talking: communicators made (dup, split) and freed, then
 * a list of messages, each with its communicator, sender, receiver, tag,
 * datatype (MPI_BYTE, MPI_INT, a vector, a struct), size (0 B to a few
 * hundred KiB, a few MiB at times), send call (all twelve: blocking,
 * nonblocking, persistent; standard, synchronous, buffered, ready) and
 * receive call.  Each received message is checked to the byte (its content
 * comes from the seed, the round and its number), with its status (source,
 * tag, MPI_Get_count, MPI_Get_elements) and nothing written around it.
 *
 * A round, deadlock-free by construction:
 *   1. each rank posts its early receives (Irecv, or Recv_init and Start or
 *      Startall), and maybe a receive that no message matches, to cancel;
 *   2. a barrier, so that ready sends find their receive posted.  Every rank
 *      issues its sends in list order (persistent ones started by Start or
 *      Startall): a blocking send only where it completes whatever the
 *      receiver does next (to an early receive; buffered; standard of at
 *      most 1 KiB, below Open MPI's and the plugin's eager sizes), the
 *      others nonblocking or persistent;
 *   3. an Ibarrier on some communicator, then the late receives in list
 *      order (Recv, Irecv, Recv_init + Start, Probe or Iprobe + Recv,
 *      Mprobe or Improbe + Mrecv or Imrecv), with completion calls (Wait,
 *      Waitall, Waitany, Waitsome, Test, Testall, Testany, Testsome, and
 *      Request_get_status then Wait) on random subsets of the pending
 *      requests mixed with MPI_REQUEST_NULL;
 *      a blocking one only over requests that complete without a later
 *      call of another rank (receives, sends to early receives, buffered
 *      sends, the Ibarrier); then the cancel (MPI_Test_cancelled checked);
 *   4. everything left completed;
 *   5. the messages persistent at both ends (but Bsend_init) once more
 *      with the same requests: receives restarted, a barrier, sends
 *      restarted, all completed and checked again;
 *   6. persistent requests freed, a barrier, the buffered sends' buffer
 *      detached.
 *
 * Matching stays checkable: the receives of one rank on one communicator
 * name either the source (per source: the tag too, or MPI_ANY_TAG, where
 * the k-th receive gets that source's k-th message) or MPI_ANY_SOURCE (with
 * the tag, or MPI_ANY_TAG): then every message of that group has one
 * datatype and carries its number and sender in its first 8 bytes, and for
 * each sender the numbers rise in the order the receives were posted (MPI's
 * non-overtaking rule).  Startall never starts two operations that the
 * order matters for (MPI leaves its order open).
 *
 * Waiting loops (Iprobe, Improbe, Test*) sleep 20 us between calls.
 *
 * Call families: all of them.
 */
#include <stdbool.h>
#include <time.h>

#include "mpitest.h"

#define MAX_RANKS 64
#define NSLOTS 6          /* communicators alive at once, MPI_COMM_WORLD included */
#define NTAGS 5           /* tags 0..4, so that tags repeat */
#define CANCEL_TAG 999    /* no message carries it */
#define MAX_MSGS 256
#define SMALL_BLOCKING 1024 /* a blocking standard send before its receive is posted: at most this */
#define BSEND_MAX (512 * 1024)
#define SENTINEL 0xa5     /* receive buffers are filled with it first */

static uint64_t g_seed;
static int g_round;
/* $P2P_RANDOM_VERBOSE: 1, each rank says on stderr where it is in each
 * round; 2, rank 0 also lists each round's messages (for a replay). */
static int verbose;

#define TRACE(level, ...)                                                         \
	do {                                                                      \
		if (verbose >= (level)) {                                         \
			fprintf(stderr, "p2p_random: rank %d round %d: ", mt_rank, g_round); \
			fprintf(stderr, __VA_ARGS__);                             \
			fflush(stderr);                                           \
		}                                                                 \
	} while (0)

#define RCHECK(cond, ...) MT_CHECK(cond, "seed %llu round %d: " __VA_ARGS__)
#define RARGS (unsigned long long)g_seed, g_round

/* ======================================================================== */
/* random numbers                                                            */
/* ======================================================================== */

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int rng_below(struct rng *r, int n)
{
	return (int)(rng_next(r) % (uint64_t)n);
}

static bool rng_chance(struct rng *r, int percent)
{
	return rng_below(r, 100) < percent;
}

/* The schedule (the same at every rank) and this rank's own choices. */
static struct rng sched, local;

/* ======================================================================== */
/* datatypes                                                                 */
/* ======================================================================== */

enum { T_BYTE, T_INT, T_VECTOR, T_STRUCT, NTYPES };

/* Where the data of one item lies: blocks (offset, length) in its extent. */
struct layout {
	const char *name;
	MPI_Datatype dt;
	int nblocks, off[3], len[3];
	int extent, size, elements; /* elements: basic ones per item (MPI_Get_elements) */
};

static struct layout types[NTYPES] = {
	{"MPI_BYTE", 0, 1, {0}, {1}, 1, 1, 1},
	{"MPI_INT", 0, 1, {0}, {4}, 4, 4, 1},
	{"vector", 0, 2, {0, 20}, {12, 12}, 32, 24, 6},  /* 2 blocks of 3 ints, stride 5 */
	{"struct", 0, 3, {0, 8, 16}, {4, 8, 3}, 24, 15, 5}, /* int, double, char[3] */
};

static void types_init(void)
{
	MPI_Datatype raw;
	int bl[3] = {1, 1, 3};
	MPI_Aint disp[3] = {0, 8, 16};
	MPI_Datatype member[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};

	types[T_BYTE].dt = MPI_BYTE;
	types[T_INT].dt = MPI_INT;
	MT_MPI(MPI_Type_vector(2, 3, 5, MPI_INT, &types[T_VECTOR].dt));
	MT_MPI(MPI_Type_create_struct(3, bl, disp, member, &raw));
	MT_MPI(MPI_Type_create_resized(raw, 0, 24, &types[T_STRUCT].dt));
	MT_MPI(MPI_Type_free(&raw));
	for (int t = 0; t < NTYPES; t++) {
		MPI_Aint lb, extent;
		int size;
		if (t >= T_VECTOR)
			MT_MPI(MPI_Type_commit(&types[t].dt));
		MT_MPI(MPI_Type_get_extent(types[t].dt, &lb, &extent));
		MT_MPI(MPI_Type_size(types[t].dt, &size));
		MT_CHECK(lb == 0 && extent == types[t].extent && size == types[t].size, "%s: lb %ld extent %ld size %d",
			 types[t].name, (long)lb, (long)extent, size);
	}
}

/* Scatter @p count items' packed bytes @p packed into the typed @p buf. */
static void scatter(unsigned char *buf, const unsigned char *packed, int count, const struct layout *t)
{
	if (t->nblocks == 1) {
		memcpy(buf, packed, (size_t)count * t->size);
		return;
	}
	for (int e = 0; e < count; e++)
		for (int b = 0, p = 0; b < t->nblocks; p += t->len[b], b++)
			memcpy(buf + (size_t)e * t->extent + t->off[b], packed + (size_t)e * t->size + p, t->len[b]);
}

static void gather(unsigned char *packed, const unsigned char *buf, int count, const struct layout *t)
{
	if (t->nblocks == 1) {
		memcpy(packed, buf, (size_t)count * t->size);
		return;
	}
	for (int e = 0; e < count; e++)
		for (int b = 0, p = 0; b < t->nblocks; p += t->len[b], b++)
			memcpy(packed + (size_t)e * t->size + p, buf + (size_t)e * t->extent + t->off[b], t->len[b]);
}

/* ======================================================================== */
/* communicators                                                             */
/* ======================================================================== */

/* A communicator of the schedule; a split one is a group per color. */
struct slot {
	bool alive;
	MPI_Comm comm;         /* this rank's handle, or MPI_COMM_NULL */
	int color[MAX_RANKS];  /* each world rank's group (its smallest world rank), -1: none */
	int crank[MAX_RANKS];  /* its rank in that group */
};

static struct slot slots[NSLOTS];

static int group_size(const struct slot *s, int w)
{
	int n = 0;

	for (int v = 0; v < mt_size; v++)
		n += s->color[v] == s->color[w];
	return n;
}

/* The world rank of rank @p crank of world rank @p w's group. */
static int group_member(const struct slot *s, int w, int crank)
{
	for (int v = 0; v < mt_size; v++)
		if (s->color[v] == s->color[w] && s->crank[v] == crank)
			return v;
	MT_FAIL("no rank %d in the group of %d", crank, w);
}

static void slot_check(const struct slot *s)
{
	int me = mt_rank;

	if (s->color[me] < 0) {
		RCHECK(s->comm == MPI_COMM_NULL, "a communicator where none was due", RARGS);
		return;
	}
	int rank = -1, size = -1;
	RCHECK(s->comm != MPI_COMM_NULL, "MPI_COMM_NULL where a communicator was due", RARGS);
	MT_MPI(MPI_Comm_rank(s->comm, &rank));
	MT_MPI(MPI_Comm_size(s->comm, &size));
	RCHECK(rank == s->crank[me] && size == group_size(s, me), "new communicator: rank %d of %d, want %d of %d",
	       RARGS, rank, size, s->crank[me], group_size(s, me));
	MT_MPI(MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN));
}

static int random_alive_slot(struct rng *r)
{
	int k;

	do
		k = rng_below(r, NSLOTS);
	while (!slots[k].alive);
	return k;
}

/* At the start of a round: maybe free a communicator, maybe make one. */
static void comm_events(void)
{
	if (rng_chance(&sched, 20)) {
		struct slot *s = &slots[1 + rng_below(&sched, NSLOTS - 1)];
		if (s->alive) {
			if (s->comm != MPI_COMM_NULL)
				MT_MPI(MPI_Comm_free(&s->comm));
			RCHECK(s->comm == MPI_COMM_NULL, "MPI_Comm_free left the handle set", RARGS);
			s->alive = false;
		}
	}
	if (!rng_chance(&sched, 40))
		return;
	int k = 1;
	while (k < NSLOTS && slots[k].alive)
		k++;
	if (k == NSLOTS)
		return;
	const struct slot *p = &slots[random_alive_slot(&sched)];
	struct slot *s = &slots[k];
	int me = mt_rank;
	s->alive = true;
	s->comm = MPI_COMM_NULL;
	if (rng_chance(&sched, 50)) {
		memcpy(s->color, p->color, sizeof(s->color));
		memcpy(s->crank, p->crank, sizeof(s->crank));
		if (p->comm != MPI_COMM_NULL)
			MT_MPI(MPI_Comm_dup(p->comm, &s->comm));
	} else {
		int split[MAX_RANKS], key[MAX_RANKS];
		for (int w = 0; w < mt_size; w++) {
			split[w] = p->color[w] < 0 ? -1 : rng_chance(&sched, 15) ? -1 : rng_below(&sched, 3);
			key[w] = rng_below(&sched, 4);
		}
		for (int w = 0; w < mt_size; w++) {
			s->color[w] = -1;
			s->crank[w] = 0;
			if (split[w] < 0)
				continue;
			for (int v = 0; v < mt_size; v++) {
				if (p->color[v] != p->color[w] || split[v] != split[w])
					continue;
				if (s->color[w] < 0)
					s->color[w] = v;
				if (key[v] < key[w] || (key[v] == key[w] && p->crank[v] < p->crank[w]))
					s->crank[w]++;
			}
		}
		if (p->comm != MPI_COMM_NULL)
			MT_MPI(MPI_Comm_split(p->comm, split[me] < 0 ? MPI_UNDEFINED : split[me], key[me], &s->comm));
	}
	slot_check(s);
}

/* ======================================================================== */
/* the schedule of a round                                                   */
/* ======================================================================== */

enum { R_SPECIFIC, R_ANY_TAG, R_ANY_SOURCE, R_ANY_BOTH }; /* what the receive names */

enum {
	SM_SEND, SM_SSEND, SM_BSEND, SM_RSEND,
	SM_ISEND, SM_ISSEND, SM_IBSEND, SM_IRSEND,
	SM_SEND_INIT, SM_SSEND_INIT, SM_BSEND_INIT, SM_RSEND_INIT,
	NSMODES
}; /* mode % 4: standard, synchronous, buffered, ready */

enum {
	RM_IRECV, RM_RECV_INIT, /* the only ones for early receives */
	RM_RECV, RM_PROBE, RM_IPROBE, RM_MPROBE_MRECV, RM_MPROBE_IMRECV, RM_IMPROBE_MRECV, RM_IMPROBE_IMRECV,
	NRMODES
};

static const char *const smode_name[NSMODES] = {
	"Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Ibsend", "Irsend",
	"Send_init", "Ssend_init", "Bsend_init", "Rsend_init"};
static const char *const rmode_name[NRMODES] = {"Irecv", "Recv_init", "Recv", "Probe+Recv", "Iprobe+Recv",
						"Mprobe+Mrecv", "Mprobe+Imrecv", "Improbe+Mrecv", "Improbe+Imrecv"};

struct msg {
	/* the schedule */
	int slot, wsrc, wdst, src, dst; /* world ranks, and ranks in the communicator */
	int tag, type, count;
	size_t bytes;                   /* count * the type's size */
	int smode, rstyle, rmode;
	bool early;                     /* its receive is posted before the barrier */
	bool again;                     /* persistent at both ends: started once more */
	/* the sender's */
	unsigned char *sbuf;
	MPI_Request sreq;
	/* the receiver's: the receive posted for this message (a wildcard one
	 * may get another message of its group) */
	unsigned char *rbuf;
	int rcount;
	MPI_Request rreq;
	MPI_Status probe_st;            /* Imrecv: the status of its Mprobe/Improbe */
	int posted_at;                  /* order in which receives began matching */
	int got;                        /* the message it received, or -1 */
	bool arrived;                   /* this message was received */
};

static struct msg msgs[MAX_MSGS];
static int nmsg, ibarrier_slot;
static unsigned long long total_msgs, total_bytes;

static bool wildcard_source(const struct msg *m)
{
	return m->rstyle == R_ANY_SOURCE || m->rstyle == R_ANY_BOTH;
}

static bool send_allowed(const struct msg *m, int sm)
{
	int base = sm % 4;
	bool blocking = sm < SM_ISEND;

	if (base == 3 && !m->early)
		return false; /* ready: only to a receive known posted */
	if (base == 2 && m->bytes > BSEND_MAX)
		return false;
	if (blocking && !m->early && (base == 1 || (base == 0 && m->bytes > SMALL_BLOCKING)))
		return false; /* would wait for the receiver's late receive */
	return true;
}

static size_t random_bytes(bool *huge_used)
{
	int c = rng_below(&sched, 100);

	if (c < 35)
		return rng_below(&sched, 65);
	if (c < 60)
		return rng_below(&sched, 4097);
	if (c < 82)
		return 4096 + rng_below(&sched, 60 * 1024);
	if (c < 97 || *huge_used)
		return 64 * 1024 + rng_below(&sched, 336 * 1024);
	*huge_used = true;
	return 1024 * 1024 + rng_below(&sched, 3 * 1024 * 1024);
}

/* The messages of a round and how each is sent and received. */
static void gen_messages(void)
{
	/* Per (receiver, communicator): -1 undecided, else R_SPECIFIC (per
	 * source: specific or ANY_TAG), R_ANY_SOURCE or R_ANY_BOTH; its type
	 * and whether its receives are early (wildcard groups); per
	 * (receiver, communicator, sender): style and whether still early. */
	static int gstyle[MAX_RANKS][NSLOTS], gtype[MAX_RANKS][NSLOTS], pstyle[MAX_RANKS][NSLOTS][MAX_RANKS];
	static bool gearly[MAX_RANKS][NSLOTS], pearly[MAX_RANKS][NSLOTS][MAX_RANKS];
	bool huge_used = false;

	memset(gstyle, -1, sizeof(gstyle));
	memset(pstyle, -1, sizeof(pstyle));
	nmsg = 3 + rng_below(&sched, 4 * mt_size + 4);
	if (nmsg > MAX_MSGS)
		nmsg = MAX_MSGS;
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		memset(m, 0, sizeof(*m));
		m->slot = random_alive_slot(&sched);
		const struct slot *s = &slots[m->slot];
		int members = 0;
		for (int w = 0; w < mt_size; w++)
			members += s->color[w] >= 0;
		if (members == 0) {
			m->slot = 0;
			s = &slots[0];
		}
		do
			m->wsrc = rng_below(&sched, mt_size);
		while (s->color[m->wsrc] < 0);
		int gsize = group_size(s, m->wsrc);
		if (gsize == 1 || rng_chance(&sched, 8)) {
			m->wdst = m->wsrc;
		} else {
			int d = (s->crank[m->wsrc] + 1 + rng_below(&sched, gsize - 1)) % gsize;
			m->wdst = group_member(s, m->wsrc, d);
		}
		m->src = s->crank[m->wsrc];
		m->dst = s->crank[m->wdst];
		m->tag = rng_below(&sched, NTAGS);
		m->type = rng_below(&sched, NTYPES);
		size_t want = random_bytes(&huge_used);

		int *gs = &gstyle[m->wdst][m->slot], *ps = &pstyle[m->wdst][m->slot][m->wsrc];
		if (*gs < 0) {
			int c = rng_below(&sched, 10);
			*gs = c < 5 ? R_SPECIFIC : c < 8 ? R_ANY_SOURCE : R_ANY_BOTH;
			gtype[m->wdst][m->slot] = m->type;
			gearly[m->wdst][m->slot] = rng_chance(&sched, 50);
		}
		if (*gs == R_SPECIFIC) {
			if (*ps < 0) {
				*ps = rng_chance(&sched, 60) ? R_SPECIFIC : R_ANY_TAG;
				pearly[m->wdst][m->slot][m->wsrc] = rng_chance(&sched, 50);
			} else if (rng_chance(&sched, 30)) {
				pearly[m->wdst][m->slot][m->wsrc] = false; /* early ones: a prefix */
			}
			m->rstyle = *ps;
			m->early = pearly[m->wdst][m->slot][m->wsrc];
		} else {
			m->rstyle = *gs;
			m->type = gtype[m->wdst][m->slot];
			m->early = gearly[m->wdst][m->slot];
		}
		const struct layout *t = &types[m->type];
		m->count = (int)(want / t->size);
		if (wildcard_source(m) && m->count * t->size < 8)
			m->count = (8 + t->size - 1) / t->size; /* room for the number and the sender */
		m->bytes = (size_t)m->count * t->size;
		do
			m->smode = rng_below(&sched, NSMODES);
		while (!send_allowed(m, m->smode));
		m->rmode = m->early ? rng_below(&sched, 2) : rng_below(&sched, NRMODES);
		/* Not Bsend_init: Open MPI 4.1.4's own restart of one above 4 KiB
		 * sends stale bytes (zeros), the plugin not even loaded. */
		m->again = m->smode >= SM_SEND_INIT && m->smode != SM_BSEND_INIT && m->rmode == RM_RECV_INIT;
		m->got = -1;
		m->sreq = m->rreq = MPI_REQUEST_NULL;
		total_msgs++;
		total_bytes += m->bytes;
	}
	ibarrier_slot = rng_chance(&sched, 60) ? random_alive_slot(&sched) : -1;
}

/* ======================================================================== */
/* message contents                                                          */
/* ======================================================================== */

/* The packed bytes of message @p id: a pattern of the seed, the round and
 * the number; the first 8 (where there are 8) say the number and the
 * sender's rank in the communicator. */
static unsigned char *packed_of(int id)
{
	const struct msg *m = &msgs[id];
	unsigned char *p = mt_alloc(m->bytes);
	int hdr[2] = {id, m->src};

	mt_fill(p, m->bytes, mt_word(g_seed, ((uint64_t)g_round << 32) | (unsigned)id));
	if (m->bytes >= sizeof(hdr))
		memcpy(p, hdr, sizeof(hdr));
	return p;
}

static void make_send_buffer(struct msg *m, int id)
{
	const struct layout *t = &types[m->type];
	unsigned char *p = packed_of(id);

	m->sbuf = mt_alloc((size_t)m->count * t->extent);
	memset(m->sbuf, 0x5a, (size_t)m->count * t->extent);
	scatter(m->sbuf, p, m->count, t);
	free(p);
}

/* The receive buffer of @p r: room for what it may get, and a bit more. */
static void make_recv_buffer(struct msg *r)
{
	const struct layout *t = &types[r->type];
	int most = r->count;

	if (wildcard_source(r))
		for (int i = 0; i < nmsg; i++)
			if (msgs[i].wdst == r->wdst && msgs[i].slot == r->slot && msgs[i].count > most)
				most = msgs[i].count;
	r->rcount = most + rng_below(&local, 3);
	r->rbuf = mt_alloc((size_t)r->rcount * t->extent);
	memset(r->rbuf, SENTINEL, (size_t)r->rcount * t->extent);
}

/* @return whether byte @p at of an item of @p t holds data. */
static bool is_data(const struct layout *t, int at)
{
	for (int b = 0; b < t->nblocks; b++)
		if (at >= t->off[b] && at < t->off[b] + t->len[b])
			return true;
	return false;
}

/* Receive @p r got message @p m: every byte of it, and nothing else written. */
static void check_data(const struct msg *r, const struct msg *m, int id)
{
	const struct layout *t = &types[r->type];
	unsigned char *want = packed_of(id), *got = mt_alloc(m->bytes);

	gather(got, r->rbuf, m->count, t);
	if (memcmp(got, want, m->bytes) != 0) {
		size_t i = 0;
		while (got[i] == want[i])
			i++;
		RCHECK(0, "message %d (%d x %s, %s -> %s): packed byte %zu of %zu is %#x, want %#x", RARGS, id,
		       m->count, t->name, smode_name[m->smode], rmode_name[r->rmode], i, m->bytes, got[i], want[i]);
	}
	free(want);
	free(got);
	for (size_t at = (t->nblocks == 1 ? (size_t)m->count * t->extent : 0); at < (size_t)r->rcount * t->extent;
	     at++) {
		size_t item = at / t->extent;
		if (item < (size_t)m->count && is_data(t, (int)(at % t->extent)))
			continue;
		RCHECK(r->rbuf[at] == SENTINEL, "message %d into %d x %s: byte %zu, outside the message, written (%#x)",
		       RARGS, id, r->rcount, t->name, at, r->rbuf[at]);
	}
}

/* The number and sender in the first 8 bytes that receive @p r got. */
static void header_of(const struct msg *r, int hdr[2])
{
	const struct layout *t = &types[r->type];
	unsigned char head[64];

	gather(head, r->rbuf, (8 + t->size - 1) / t->size, t);
	memcpy(hdr, head, 2 * sizeof(int));
}

/* The receive posted for @p r completed with status @p st (NULL: ignored). */
static void received(struct msg *r, const MPI_Status *st)
{
	const struct layout *t = &types[r->type];
	int rid = (int)(r - msgs), id = rid;

	if (wildcard_source(r)) {
		int hdr[2];
		header_of(r, hdr);
		id = hdr[0];
		RCHECK(id >= 0 && id < nmsg && msgs[id].wdst == mt_rank && msgs[id].slot == r->slot &&
			       (r->rstyle == R_ANY_BOTH || msgs[id].tag == r->tag),
		       "wildcard receive %d (%s) got message number %d, not one of its group", RARGS, rid,
		       rmode_name[r->rmode], id);
	}
	struct msg *m = &msgs[id];
	RCHECK(!m->arrived, "message %d received twice (receive %d)", RARGS, id, rid);
	if (st) {
		int count = -2, elements = -2;
		MT_MPI(MPI_Get_count(st, t->dt, &count));
		MT_MPI(MPI_Get_elements(st, t->dt, &elements));
		RCHECK(st->MPI_SOURCE == m->src && st->MPI_TAG == m->tag && count == m->count &&
			       elements == m->count * t->elements,
		       "message %d (%s %d x %s to %s): status source %d tag %d count %d elements %d, want %d %d %d %d",
		       RARGS, id, smode_name[m->smode], m->count, t->name, rmode_name[r->rmode], st->MPI_SOURCE,
		       st->MPI_TAG, count, elements, m->src, m->tag, m->count, m->count * t->elements);
	}
	if (m->bytes >= 8) {
		int hdr[2];
		header_of(r, hdr);
		RCHECK(hdr[0] == id && hdr[1] == m->src,
		       "receive %d (%s, %d x %s) got message %d from %d, want message %d from %d (%s, %d x %s)", RARGS,
		       rid, rmode_name[r->rmode], r->rcount, t->name, hdr[0], hdr[1], id, m->src, smode_name[m->smode],
		       m->count, types[m->type].name);
	}
	check_data(r, m, id);
	m->arrived = true;
	r->got = id;
}

/* ======================================================================== */
/* pending requests and completion calls                                     */
/* ======================================================================== */

enum { K_RECV, K_SEND, K_BARRIER };

struct pend {
	MPI_Request req;
	int kind, id;
	bool safe;       /* completes without any later call of another rank */
	bool persistent; /* stays (inactive) after completion */
};

static struct pend pend[2 * MAX_MSGS + 2];
static int npend, post_counter;

static void pend_add(MPI_Request req, int kind, int id, bool safe, bool persistent)
{
	pend[npend++] = (struct pend){req, kind, id, safe, persistent};
}

static void relax(void)
{
	struct timespec ts = {0, 20 * 1000};

	nanosleep(&ts, NULL);
}

static void pend_done(const struct pend *p, const MPI_Status *st)
{
	if (p->kind == K_RECV) {
		received(&msgs[p->id], st);
	} else if (p->kind == K_SEND && st) {
		int cancelled = -1;
		MT_MPI(MPI_Test_cancelled(st, &cancelled));
		RCHECK(!cancelled, "send %d (%s) says it was cancelled", RARGS, p->id, smode_name[msgs[p->id].smode]);
	}
	if (!p->persistent && p->kind != K_BARRIER)
		*(p->kind == K_RECV ? &msgs[p->id].rreq : &msgs[p->id].sreq) = MPI_REQUEST_NULL;
}

/* Say which call takes which requests (r: receive, s: send, and the number
 * of their message). */
static void trace_call(const char *call, const int *who, int n)
{
	static const char *const kind[] = {"r", "s", "barrier"};
	char list[512];
	int len = 0;

	list[0] = 0;
	for (int j = 0; j < n && len < 400; j++)
		if (who[j] < 0)
			len += snprintf(list + len, sizeof(list) - len, " null");
		else
			len += snprintf(list + len, sizeof(list) - len, " %s%d", kind[pend[who[j]].kind], pend[who[j]].id);
	TRACE(1, "%s:%s\n", call, list);
}

/*
 * One completion call on a random subset of the pending requests, mixed
 * with MPI_REQUEST_NULL.  Blocking calls take only safe requests unless
 * @p all_safe (every receive of this rank is posted).  @return how many
 * completed.
 */
static int complete_some(bool all_safe)
{
	enum { C_WAIT, C_WAITALL, C_WAITANY, C_WAITSOME, C_TEST, C_TESTALL, C_TESTANY, C_TESTSOME, C_GET_STATUS };
	static const char *const call_name[] = {"Wait", "Waitall", "Waitany", "Waitsome", "Test",
						"Testall", "Testany", "Testsome", "Request_get_status"};
	MPI_Request arr[4 * MAX_MSGS + 8];
	MPI_Status sts[4 * MAX_MSGS + 8], one, peek;
	int who[4 * MAX_MSGS + 8], idx[4 * MAX_MSGS + 8], n = 0, done = 0, nsafe = 0;
	bool completed[2 * MAX_MSGS + 2] = {false};

	if (npend == 0)
		return 0;
	for (int i = 0; i < npend; i++)
		nsafe += pend[i].safe || all_safe;
	int call = rng_below(&local, 9);
	if (call < C_TEST && nsafe == 0)
		call += C_TEST;
	bool blocking = call < C_TEST;
	bool single = call == C_WAIT || call == C_TEST || call == C_GET_STATUS;
	for (int i = 0; i < npend; i++) {
		if (blocking && !pend[i].safe && !all_safe)
			continue;
		if (single ? n > 0 || !rng_chance(&local, 40) : !rng_chance(&local, 60))
			continue;
		if (!single && rng_chance(&local, 20)) {
			arr[n] = MPI_REQUEST_NULL;
			who[n++] = -1;
		}
		arr[n] = pend[i].req;
		who[n++] = i;
	}
	if (n == 0 || (n == 1 && who[0] < 0)) { /* at least one: the first that fits */
		n = 0;
		for (int i = 0; i < npend && n == 0; i++)
			if (!blocking || pend[i].safe || all_safe) {
				arr[n] = pend[i].req;
				who[n++] = i;
			}
	}
	if (!single && rng_chance(&local, 30)) {
		arr[n] = MPI_REQUEST_NULL;
		who[n++] = -1;
	}
	bool ignore = rng_chance(&local, 10);
	MPI_Status *stp = ignore ? MPI_STATUSES_IGNORE : sts;
	MPI_Status *onep = ignore ? MPI_STATUS_IGNORE : &one;
	int flag = 0, at = -1, out = 0;
	for (int j = 0; j < n; j++)
		sts[j].MPI_SOURCE = sts[j].MPI_TAG = -77;
	if (verbose)
		trace_call(call_name[call], who, n);

	switch (call) {
	case C_WAIT:
		MT_MPI(MPI_Wait(&arr[0], onep));
		idx[out++] = 0;
		break;
	case C_TEST:
		MT_MPI(MPI_Test(&arr[0], &flag, onep));
		if (flag)
			idx[out++] = 0;
		break;
	case C_GET_STATUS: /* then MPI_Wait, which must agree */
		MT_MPI(MPI_Request_get_status(arr[0], &flag, &peek));
		if (!flag)
			break;
		MT_MPI(MPI_Wait(&arr[0], onep));
		RCHECK(ignore || (peek.MPI_SOURCE == one.MPI_SOURCE && peek.MPI_TAG == one.MPI_TAG),
		       "Request_get_status said source %d tag %d, then Wait %d %d", RARGS, peek.MPI_SOURCE,
		       peek.MPI_TAG, one.MPI_SOURCE, one.MPI_TAG);
		idx[out++] = 0;
		break;
	case C_WAITANY:
	case C_TESTANY:
		if (call == C_WAITANY)
			MT_MPI(MPI_Waitany(n, arr, &at, onep));
		else
			MT_MPI(MPI_Testany(n, arr, &at, &flag, onep));
		if (call == C_WAITANY || flag) {
			RCHECK(at >= 0 && at < n && who[at] >= 0, "%s over %d requests: index %d", RARGS,
			       call_name[call], n, at);
			idx[out++] = at;
		} else {
			RCHECK(at == MPI_UNDEFINED, "Testany: no completion, yet index %d", RARGS, at);
		}
		break;
	case C_WAITALL:
	case C_TESTALL:
		if (call == C_WAITALL)
			MT_MPI(MPI_Waitall(n, arr, stp));
		else
			MT_MPI(MPI_Testall(n, arr, &flag, stp));
		if (call == C_TESTALL && !flag)
			break;
		for (int j = 0; j < n; j++) {
			if (who[j] >= 0)
				idx[out++] = j;
			else if (!ignore)
				RCHECK(sts[j].MPI_SOURCE == MPI_ANY_SOURCE && sts[j].MPI_TAG == MPI_ANY_TAG,
				       "%s: MPI_REQUEST_NULL's status: source %d tag %d, want empty", RARGS,
				       call_name[call], sts[j].MPI_SOURCE, sts[j].MPI_TAG);
		}
		break;
	case C_WAITSOME:
	case C_TESTSOME:
		if (call == C_WAITSOME)
			MT_MPI(MPI_Waitsome(n, arr, &out, idx, stp));
		else
			MT_MPI(MPI_Testsome(n, arr, &out, idx, stp));
		RCHECK(out >= (call == C_WAITSOME) && out <= n, "%s over %d requests: outcount %d", RARGS,
		       call_name[call], n, out);
		break;
	}
	for (int k = 0; k < out; k++) {
		int j = idx[k];
		RCHECK(j >= 0 && j < n && who[j] >= 0 && !completed[who[j]], "%s: index %d (of %d) is not a request",
		       RARGS, call_name[call], j, n);
		const struct pend *p = &pend[who[j]];
		RCHECK(arr[j] == (p->persistent ? p->req : MPI_REQUEST_NULL),
		       "%s: a completed %s request %s", RARGS, call_name[call], p->persistent ? "persistent" : "nonblocking",
		       p->persistent ? "was changed" : "was not set to MPI_REQUEST_NULL");
		const MPI_Status *st = NULL;
		if (!ignore)
			st = single || call == C_WAITANY || call == C_TESTANY ? &one
			     : call == C_WAITALL || call == C_TESTALL       ? &sts[j]
									    : &sts[k];
		pend_done(p, st);
		completed[who[j]] = true;
		done++;
	}
	int kept = 0;
	for (int i = 0; i < npend; i++)
		if (!completed[i])
			pend[kept++] = pend[i];
	npend = kept;
	return done;
}

/* ======================================================================== */
/* the phases of a round                                                     */
/* ======================================================================== */

/* Whether send @p m completes without a later call of its receiver: to an
 * early receive, or buffered. */
static bool send_safe(const struct msg *m)
{
	return m->early || m->smode % 4 == 2;
}

/* Requests to start together (MPI_Startall); none two that the order of
 * matters for. */
struct batch {
	MPI_Request req[MAX_MSGS];
	int id[MAX_MSGS], n;
	bool recv;
};

static void batch_flush(struct batch *b)
{
	if (b->n == 0)
		return;
	MT_MPI(MPI_Startall(b->n, b->req));
	for (int i = 0; i < b->n; i++) {
		struct msg *m = &msgs[b->id[i]];
		if (b->recv) {
			m->posted_at = post_counter++;
			pend_add(m->rreq, K_RECV, b->id[i], true, true);
		} else {
			pend_add(m->sreq, K_SEND, b->id[i], send_safe(m), true);
		}
	}
	b->n = 0;
}

/* Whether @p id may join batch @p b: no two receives on one communicator,
 * no two sends to one rank on one communicator. */
static bool batch_fits(const struct batch *b, int id)
{
	const struct msg *m = &msgs[id];

	for (int i = 0; i < b->n; i++) {
		const struct msg *o = &msgs[b->id[i]];
		if (o->slot == m->slot && (b->recv || o->wdst == m->wdst))
			return false;
	}
	return true;
}

static void batch_add(struct batch *b, int id, MPI_Request req)
{
	if (!batch_fits(b, id))
		batch_flush(b);
	b->req[b->n] = req;
	b->id[b->n++] = id;
	if (rng_chance(&local, 30))
		batch_flush(b);
}

static int source_of(const struct msg *m)
{
	return wildcard_source(m) ? MPI_ANY_SOURCE : m->src;
}

static int tag_of(const struct msg *m)
{
	return m->rstyle == R_SPECIFIC || m->rstyle == R_ANY_SOURCE ? m->tag : MPI_ANY_TAG;
}

/* Phase 1: the early receives. */
static void post_early(void)
{
	static struct batch b;

	b.n = 0;
	b.recv = true;
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		if (m->wdst != mt_rank || !m->early)
			continue;
		MPI_Comm comm = slots[m->slot].comm;
		make_recv_buffer(m);
		if (m->rmode == RM_IRECV) {
			batch_flush(&b); /* posted in list order */
			MT_MPI(MPI_Irecv(m->rbuf, m->rcount, types[m->type].dt, source_of(m), tag_of(m), comm, &m->rreq));
			m->posted_at = post_counter++;
			pend_add(m->rreq, K_RECV, i, true, false);
		} else {
			MT_MPI(MPI_Recv_init(m->rbuf, m->rcount, types[m->type].dt, source_of(m), tag_of(m), comm,
					     &m->rreq));
			if (rng_chance(&local, 50)) {
				batch_flush(&b);
				MT_MPI(MPI_Start(&m->rreq));
				m->posted_at = post_counter++;
				pend_add(m->rreq, K_RECV, i, true, true);
			} else {
				batch_add(&b, i, m->rreq);
			}
		}
	}
	batch_flush(&b);
}

/* Phase 2: this rank's sends, in list order. */
static void send_all(void)
{
	static struct batch b;

	b.n = 0;
	b.recv = false;
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		if (m->wsrc != mt_rank)
			continue;
		MPI_Comm comm = slots[m->slot].comm;
		MPI_Datatype dt = types[m->type].dt;
		bool safe = send_safe(m);
		make_send_buffer(m, i);
		if (m->smode < SM_SEND_INIT)
			batch_flush(&b);
		switch (m->smode) {
		case SM_SEND:
			MT_MPI(MPI_Send(m->sbuf, m->count, dt, m->dst, m->tag, comm));
			break;
		case SM_SSEND:
			MT_MPI(MPI_Ssend(m->sbuf, m->count, dt, m->dst, m->tag, comm));
			break;
		case SM_BSEND:
			MT_MPI(MPI_Bsend(m->sbuf, m->count, dt, m->dst, m->tag, comm));
			break;
		case SM_RSEND:
			MT_MPI(MPI_Rsend(m->sbuf, m->count, dt, m->dst, m->tag, comm));
			break;
		case SM_ISEND:
			MT_MPI(MPI_Isend(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_ISSEND:
			MT_MPI(MPI_Issend(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_IBSEND:
			MT_MPI(MPI_Ibsend(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_IRSEND:
			MT_MPI(MPI_Irsend(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_SEND_INIT:
			MT_MPI(MPI_Send_init(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_SSEND_INIT:
			MT_MPI(MPI_Ssend_init(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_BSEND_INIT:
			MT_MPI(MPI_Bsend_init(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		case SM_RSEND_INIT:
			MT_MPI(MPI_Rsend_init(m->sbuf, m->count, dt, m->dst, m->tag, comm, &m->sreq));
			break;
		}
		if (m->smode >= SM_ISEND && m->smode < SM_SEND_INIT) {
			pend_add(m->sreq, K_SEND, i, safe, false);
		} else if (m->smode >= SM_SEND_INIT) {
			if (rng_chance(&local, 50)) {
				batch_flush(&b);
				MT_MPI(MPI_Start(&m->sreq));
				pend_add(m->sreq, K_SEND, i, safe, true);
			} else {
				batch_add(&b, i, m->sreq);
			}
		}
	}
	batch_flush(&b);
}

/* Repeat @p call (Iprobe, Improbe) until it sets @p flag, sleeping between. */
#define POLL(call, flag)                   \
	do {                               \
		flag = 0;                  \
		for (;;) {                 \
			MT_MPI(call);      \
			if (flag)          \
				break;     \
			relax();           \
		}                          \
	} while (0)

static void check_probe_status(const struct msg *r, const MPI_Status *pst, const MPI_Status *st)
{
	int pc = -1, c = -2;

	MT_MPI(MPI_Get_count(pst, types[r->type].dt, &pc));
	MT_MPI(MPI_Get_count(st, types[r->type].dt, &c));
	RCHECK(pst->MPI_SOURCE == st->MPI_SOURCE && pst->MPI_TAG == st->MPI_TAG && pc == c,
	       "receive %d (%s): the probe saw source %d tag %d count %d, the receive got %d %d %d", RARGS,
	       (int)(r - msgs), rmode_name[r->rmode], pst->MPI_SOURCE, pst->MPI_TAG, pc, st->MPI_SOURCE,
	       st->MPI_TAG, c);
}

/* Phase 3: one late receive. */
static void late_receive(int i)
{
	struct msg *m = &msgs[i];
	MPI_Comm comm = slots[m->slot].comm;
	MPI_Datatype dt = types[m->type].dt;
	MPI_Status st, pst;
	MPI_Message mh = MPI_MESSAGE_NULL;
	int flag;

	make_recv_buffer(m);
	TRACE(1, "late receive %d: %s\n", i, rmode_name[m->rmode]);
	switch (m->rmode) {
	case RM_IRECV:
		MT_MPI(MPI_Irecv(m->rbuf, m->rcount, dt, source_of(m), tag_of(m), comm, &m->rreq));
		m->posted_at = post_counter++;
		pend_add(m->rreq, K_RECV, i, true, false);
		return;
	case RM_RECV_INIT:
		MT_MPI(MPI_Recv_init(m->rbuf, m->rcount, dt, source_of(m), tag_of(m), comm, &m->rreq));
		MT_MPI(MPI_Start(&m->rreq));
		m->posted_at = post_counter++;
		pend_add(m->rreq, K_RECV, i, true, true);
		return;
	case RM_RECV:
		m->posted_at = post_counter++;
		MT_MPI(MPI_Recv(m->rbuf, m->rcount, dt, source_of(m), tag_of(m), comm, &st));
		received(m, &st);
		return;
	case RM_PROBE:
	case RM_IPROBE:
		if (m->rmode == RM_PROBE)
			MT_MPI(MPI_Probe(source_of(m), tag_of(m), comm, &pst));
		else
			POLL(MPI_Iprobe(source_of(m), tag_of(m), comm, &flag, &pst), flag);
		m->posted_at = post_counter++;
		MT_MPI(MPI_Recv(m->rbuf, m->rcount, dt, pst.MPI_SOURCE, pst.MPI_TAG, comm, &st));
		check_probe_status(m, &pst, &st);
		received(m, &st);
		return;
	default:
		if (m->rmode == RM_MPROBE_MRECV || m->rmode == RM_MPROBE_IMRECV)
			MT_MPI(MPI_Mprobe(source_of(m), tag_of(m), comm, &mh, &pst));
		else
			POLL(MPI_Improbe(source_of(m), tag_of(m), comm, &flag, &mh, &pst), flag);
		m->posted_at = post_counter++;
		RCHECK(mh != MPI_MESSAGE_NULL, "receive %d: %s gave MPI_MESSAGE_NULL", RARGS, i, rmode_name[m->rmode]);
		if (m->rmode == RM_MPROBE_MRECV || m->rmode == RM_IMPROBE_MRECV) {
			MT_MPI(MPI_Mrecv(m->rbuf, m->rcount, dt, &mh, &st));
			RCHECK(mh == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle set", RARGS);
			check_probe_status(m, &pst, &st);
			received(m, &st);
		} else {
			MT_MPI(MPI_Imrecv(m->rbuf, m->rcount, dt, &mh, &m->rreq));
			RCHECK(mh == MPI_MESSAGE_NULL, "MPI_Imrecv left the message handle set", RARGS);
			m->probe_st = pst;
			pend_add(m->rreq, K_RECV, i, true, false);
		}
		return;
	}
}

/* A receive that no message matches, cancelled: @return its request. */
static MPI_Request cancel_post(unsigned char *buf)
{
	MPI_Request rq;
	int k, src;

	do
		k = random_alive_slot(&local);
	while (slots[k].comm == MPI_COMM_NULL);
	src = rng_chance(&local, 50) ? MPI_ANY_SOURCE : rng_below(&local, group_size(&slots[k], mt_rank));
	memset(buf, SENTINEL, 64);
	MT_MPI(MPI_Irecv(buf, 16, MPI_INT, src, CANCEL_TAG, slots[k].comm, &rq));
	return rq;
}

static void cancel_finish(MPI_Request *rq, const unsigned char *buf)
{
	MPI_Status st;
	int cancelled = 0;

	MT_MPI(MPI_Cancel(rq));
	MT_MPI(MPI_Wait(rq, &st));
	MT_MPI(MPI_Test_cancelled(&st, &cancelled));
	RCHECK(cancelled && *rq == MPI_REQUEST_NULL, "a cancelled receive: Test_cancelled %d", RARGS, cancelled);
	for (int i = 0; i < 64; i++)
		RCHECK(buf[i] == SENTINEL, "a cancelled receive wrote byte %d", RARGS, i);
}

/* Per sender, wildcard receives got its messages in the order it sent
 * them (the list order), in the order they were posted. */
static void check_order(bool again_only)
{
	for (int i = 0; i < nmsg; i++) {
		const struct msg *a = &msgs[i];
		if (a->wdst != mt_rank || !wildcard_source(a) || (again_only && !a->again))
			continue;
		for (int j = 0; j < nmsg; j++) {
			const struct msg *b = &msgs[j];
			if (b->wdst != mt_rank || b->slot != a->slot || b->posted_at <= a->posted_at ||
			    (again_only && !b->again))
				continue;
			const struct msg *ga = &msgs[a->got], *gb = &msgs[b->got];
			bool both_match = a->rstyle == R_ANY_BOTH || ga->tag == gb->tag;
			RCHECK(ga->src != gb->src || !both_match || a->got < b->got,
			       "non-overtaking: from rank %d, message %d was received after message %d (receives %d, %d)",
			       RARGS, ga->src, a->got, b->got, i, j);
		}
	}
}

/*
 * Phase 5: the messages persistent at both ends, once more with the same
 * requests (valid until freed): every rank restarts its receives, a
 * barrier, then its sends (Start or Startall), and all complete.  Each
 * restarted receive gets one of them as the first time (wildcards: any of
 * its group that matches), checked again.
 */
static void start_again(void)
{
	static struct batch b;
	bool any = false;

	for (int i = 0; i < nmsg; i++)
		any |= msgs[i].again;
	if (!any)
		return;
	TRACE(1, "persistent operations again\n");
	b.n = 0;
	b.recv = true;
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		if (!m->again || m->wdst != mt_rank)
			continue;
		memset(m->rbuf, SENTINEL, (size_t)m->rcount * types[m->type].extent);
		m->got = -1;
		m->arrived = false;
		batch_add(&b, i, m->rreq);
	}
	batch_flush(&b);
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	b.recv = false;
	for (int i = 0; i < nmsg; i++)
		if (msgs[i].again && msgs[i].wsrc == mt_rank)
			batch_add(&b, i, msgs[i].sreq);
	batch_flush(&b);
	while (npend > 0)
		if (complete_some(true) == 0)
			relax();
	for (int i = 0; i < nmsg; i++)
		RCHECK(!msgs[i].again || msgs[i].wdst != mt_rank || (msgs[i].arrived && msgs[i].got >= 0),
		       "message %d, started again, not received", RARGS, i);
	check_order(true);
}

static void run_round(int round)
{
	unsigned char cancel_buf[64];
	MPI_Request cancel_rq = MPI_REQUEST_NULL;
	void *battach = NULL;
	int bsize = 0;

	g_round = round;
	sched.s = mt_word(g_seed, (uint64_t)round);
	local.s = mt_word(g_seed ^ 0x5eed, ((uint64_t)round << 16) | (unsigned)mt_rank);
	comm_events();
	gen_messages();
	if (mt_rank == 0)
		for (int i = 0; i < nmsg; i++) {
			const struct msg *m = &msgs[i];
			static const char *const style[] = {"source+tag", "source", "tag", "any"};
			TRACE(2, "message %d: comm %d, %d -> %d (world %d -> %d), tag %d, %d x %s (%zu B), %s, %s %s%s\n",
			      i, m->slot, m->src, m->dst, m->wsrc, m->wdst, m->tag, m->count, types[m->type].name,
			      m->bytes, smode_name[m->smode], rmode_name[m->rmode], style[m->rstyle],
			      m->early ? ", early" : "");
		}
	TRACE(1, "early receives\n");
	npend = 0;
	post_counter = 0;

	/* 1: early receives, maybe one to cancel (now, or after the late ones) */
	bool cancel_late = rng_chance(&local, 50);
	if (rng_chance(&local, 30))
		cancel_rq = cancel_post(cancel_buf);
	if (cancel_rq != MPI_REQUEST_NULL && !cancel_late)
		cancel_finish(&cancel_rq, cancel_buf);
	post_early();
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));

	TRACE(1, "sends\n");
	/* 2: sends */
	for (int i = 0; i < nmsg; i++)
		if (msgs[i].wsrc == mt_rank && msgs[i].smode % 4 == 2) {
			int size = 0;
			MT_MPI(MPI_Pack_size(msgs[i].count, types[msgs[i].type].dt, MPI_COMM_WORLD, &size));
			bsize += size + MPI_BSEND_OVERHEAD;
		}
	if (bsize) {
		battach = mt_alloc(bsize);
		MT_MPI(MPI_Buffer_attach(battach, bsize));
	}
	send_all();

	TRACE(1, "late receives\n");
	/* 3: Ibarrier, late receives, completion calls */
	if (ibarrier_slot >= 0 && slots[ibarrier_slot].comm != MPI_COMM_NULL) {
		MPI_Request rq;
		MT_MPI(MPI_Ibarrier(slots[ibarrier_slot].comm, &rq));
		pend_add(rq, K_BARRIER, -1, true, false);
	}
	for (int i = 0; i < nmsg; i++) {
		if (msgs[i].wdst != mt_rank || msgs[i].early)
			continue;
		late_receive(i);
		if (rng_chance(&local, 35))
			complete_some(false);
	}
	if (cancel_rq != MPI_REQUEST_NULL)
		cancel_finish(&cancel_rq, cancel_buf);

	TRACE(1, "the rest (%d requests)\n", npend);
	/* 4: the rest */
	while (npend > 0)
		if (complete_some(true) == 0)
			relax();
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		if (m->wdst == mt_rank) {
			RCHECK(m->arrived && m->got >= 0, "message %d (%s %zu bytes %s, early %d) not received", RARGS, i,
			       smode_name[m->smode], m->bytes, rmode_name[m->rmode], m->early);
		}
	}
	check_order(false);
	start_again();
	for (int i = 0; i < nmsg; i++) {
		struct msg *m = &msgs[i];
		if (m->sreq != MPI_REQUEST_NULL)
			MT_MPI(MPI_Request_free(&m->sreq));
		if (m->rreq != MPI_REQUEST_NULL)
			MT_MPI(MPI_Request_free(&m->rreq));
		free(m->sbuf);
		free(m->rbuf);
		m->sbuf = m->rbuf = NULL;
	}
	MT_MPI(MPI_Barrier(MPI_COMM_WORLD));
	if (battach) {
		void *addr = NULL;
		int size = 0;
		MT_MPI(MPI_Buffer_detach(&addr, &size));
		RCHECK(addr == battach && size == bsize, "Buffer_detach gave %p %d, want %p %d", RARGS, addr, size,
		       battach, bsize);
		free(battach);
	}
}

int main(int argc, char **argv)
{
	mt_init(&argc, &argv, "p2p_random");
	g_seed = mt_number_from(argc > 1 ? argv[1] : NULL, "P2P_RANDOM_SEED", 1);
	int rounds = (int)mt_number_from(argc > 2 ? argv[2] : NULL, "P2P_RANDOM_ROUNDS", 24);
	verbose = (int)mt_number_from(NULL, "P2P_RANDOM_VERBOSE", 0);

	MT_CHECK(mt_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
	if (mt_rank == 0) {
		printf("p2p_random: seed %llu, %d rounds, %d ranks\n", (unsigned long long)g_seed, rounds, mt_size);
		fflush(stdout);
	}
	types_init();
	slots[0].alive = true;
	slots[0].comm = MPI_COMM_WORLD;
	for (int w = 0; w < mt_size; w++) {
		slots[0].color[w] = 0;
		slots[0].crank[w] = w;
	}
	for (int r = 0; r < rounds; r++)
		run_round(r);
	for (int k = 1; k < NSLOTS; k++)
		if (slots[k].alive && slots[k].comm != MPI_COMM_NULL)
			MT_MPI(MPI_Comm_free(&slots[k].comm));
	MT_MPI(MPI_Type_free(&types[T_VECTOR].dt));
	MT_MPI(MPI_Type_free(&types[T_STRUCT].dt));
	if (mt_rank == 0)
		printf("p2p_random: seed %llu: %llu messages, %llu bytes\n", (unsigned long long)g_seed, total_msgs,
		       total_bytes);
	return mt_finish();
}
