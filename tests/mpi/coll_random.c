/*
 * coll_random.c - a seeded random mix of collectives and point-to-point
 * traffic.
 *
 * Usage: coll_random [SEED [ROUNDS]] (else $COLL_RANDOM_SEED,
 * $COLL_RANDOM_ROUNDS; seed 1, 6 rounds), or coll_random short (3
 * rounds).  Rank 0 prints the seed first; every failure names the seed,
 * the round and the operation.
 *
 * Every rank derives the whole schedule from the seed, without talking:
 * each round a list of operations, each on one of five communicators
 * (world, a dup, a reversed split, halves, odd and even ranks) with a
 * datatype (int, double), a reduction (sum, max, min; bxor on ints), a
 * count (0 to 150 000 items) and a root:
 *   - the blocking Barrier, Bcast, Reduce, Allreduce, Gather, Scatter,
 *     Allgather, Alltoall, Reduce_scatter_block, Scan and Exscan;
 *   - the nonblocking Ibarrier, Ibcast, Ireduce, Iallreduce and
 *     Iallgather, left pending;
 *   - a point-to-point exchange: each rank Isends to the rank d after it
 *     and Irecvs from the rank d before it, left pending.
 * After an operation the schedule may complete pending requests: the
 * oldest by MPI_Wait, all by MPI_Waitall, or one by MPI_Test in a loop;
 * the round's end completes the rest.  So blocking collectives run while
 * nonblocking ones and messages are pending on the same communicator and
 * on others.  MPI_IN_PLACE where the schedule says (at every rank of an
 * Allreduce, at a Reduce's root).  Every result is checked against a
 * reference each rank computes itself, with nothing written past it.
 * The first round makes every call once, in a shuffled order, so that
 * each is counted (check_mpi checks the statistics); each communicator
 * makes a Barrier when it is made, so that its agreement comes from a
 * blocking call (coll_nb_first tests nonblocking first calls).
 * Runs with any number of ranks.
 */
#include <stdbool.h>

#include "colltest.h"

enum kind {
	K_BARRIER, K_BCAST, K_REDUCE, K_ALLREDUCE, K_GATHER, K_SCATTER, K_ALLGATHER, K_ALLTOALL, K_RSB,
	K_SCAN, K_EXSCAN, K_IBARRIER, K_IBCAST, K_IREDUCE, K_IALLREDUCE, K_IALLGATHER, K_P2P, NKINDS
};
static const char *const kind_name[NKINDS] = {
	"Barrier", "Bcast", "Reduce", "Allreduce", "Gather", "Scatter", "Allgather", "Alltoall",
	"Reduce_scatter_block", "Scan", "Exscan", "Ibarrier", "Ibcast", "Ireduce", "Iallreduce", "Iallgather",
	"Isend/Irecv"};

#define NCOMMS 5
#define OPS 24          /* operations a round */
#define SENTINEL 7777   /* the item after every receive buffer's last */
#define MAX_RANKS 64

static uint64_t g_seed;
static int g_round, g_op;
static MPI_Comm comms[NCOMMS];

#define RCHECK(cond, ...) \
	MT_CHECK(cond, "seed %llu round %d op %d: " __VA_ARGS__)
#define RARGS (unsigned long long)g_seed, g_round, g_op

/* The schedule's numbers: the same sequence at every rank. */
struct rng {
	uint64_t seed, n;
};

static unsigned pick(struct rng *r, unsigned below)
{
	return (unsigned)(mt_word(r->seed, r->n++) % below);
}

/* Item @p i that rank (or block) @p who contributes to operation @p key: a
 * small integer, so that every sum is exact in a double too. */
static int val(uint64_t key, int who, long i)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ull + (uint64_t)who * 0xc2b2ae3d27d4eb4full +
		     (uint64_t)i * 0x165667b19e3779f9ull;
	h ^= h >> 29;
	return (int)(h % 19) - 9;
}

static const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_BXOR};

static long fold(int op, long a, long b)
{
	switch (op) {
	case 0: return a + b;
	case 1: return a > b ? a : b;
	case 2: return a < b ? a : b;
	default: return a ^ b;
	}
}

/* One operation of the schedule at this rank. */
struct op {
	enum kind kind;
	uint64_t key;
	int index;      /* in its round */
	MPI_Comm comm;
	int me, n;      /* in comm */
	int dbl;        /* the items are doubles, else ints */
	int red;        /* index into ops[] */
	long count;
	int root;
	bool in_place;
	int from;       /* P2P: the rank it receives from */
	void *send, *recv;
	long rlen;      /* items of recv before its sentinel */
	MPI_Request req[2];
};

static MPI_Datatype type_of(const struct op *o)
{
	return o->dbl ? MPI_DOUBLE : MPI_INT;
}

static void *items(const struct op *o, long n)
{
	void *p = malloc((size_t)(n + 1) * (o->dbl ? sizeof(double) : sizeof(int)));
	MT_CHECK(p, "out of memory");
	return p;
}

static void put(const struct op *o, void *buf, long i, long v)
{
	if (o->dbl)
		((double *)buf)[i] = (double)v;
	else
		((int *)buf)[i] = (int)v;
}

static long get(const struct op *o, const void *buf, long i)
{
	return o->dbl ? (long)((const double *)buf)[i] : ((const int *)buf)[i];
}

/* A receive buffer of @p n items: each item SENTINEL, the one after too. */
static void *recv_buf(struct op *o, long n)
{
	void *p = items(o, n);
	for (long i = 0; i <= n; i++)
		put(o, p, i, SENTINEL);
	o->recv = p;
	o->rlen = n;
	return p;
}

/* A buffer of @p blocks blocks of o->count items, block b item i = val(who(b)). */
static void *fill(struct op *o, int blocks, int who0, int stride)
{
	void *p = items(o, (long)blocks * o->count);
	for (int b = 0; b < blocks; b++)
		for (long i = 0; i < o->count; i++)
			put(o, p, (long)b * o->count + i, val(o->key, who0 + b * stride, i));
	return p;
}

/* The reduction over the ranks in [lo, hi) of val(key, s * mul + add, i). */
static long reduced(const struct op *o, int lo, int hi, int mul, int add, long i)
{
	long acc = val(o->key, lo * mul + add, i);
	for (int s = lo + 1; s < hi; s++)
		acc = fold(o->red, acc, val(o->key, s * mul + add, i));
	return acc;
}

static void check_sentinel(const struct op *o)
{
	RCHECK(get(o, o->recv, o->rlen) == SENTINEL, "%s: written past its %ld items", RARGS, kind_name[o->kind],
	       o->rlen);
}

/* Check what @p o received at this rank; free its buffers. */
static void check(struct op *o)
{
	const char *name = kind_name[o->kind];
	long c = o->count;
	g_op = o->index; /* for the messages */
	int me = o->me, n = o->n;
	switch (o->kind) {
	case K_BCAST:
	case K_IBCAST:
		for (long i = 0; i < c; i++)
			RCHECK(get(o, o->recv, i) == val(o->key, o->root, i), "%s item %ld: %ld", RARGS, name, i,
			       get(o, o->recv, i));
		break;
	case K_REDUCE:
	case K_IREDUCE:
	case K_ALLREDUCE:
	case K_IALLREDUCE:
	case K_SCAN:
	case K_EXSCAN: {
		bool takes = (o->kind != K_REDUCE && o->kind != K_IREDUCE) || me == o->root;
		int hi = o->kind == K_SCAN ? me + 1 : o->kind == K_EXSCAN ? me : n;
		if (!takes || hi == 0)
			break;
		for (long i = 0; i < c; i++)
			RCHECK(get(o, o->recv, i) == reduced(o, 0, hi, 1, 0, i), "%s item %ld: %ld, not %ld", RARGS,
			       name, i, get(o, o->recv, i), reduced(o, 0, hi, 1, 0, i));
		break;
	}
	case K_GATHER:
	case K_ALLGATHER:
	case K_IALLGATHER:
		if (o->kind == K_GATHER && me != o->root)
			break;
		for (int s = 0; s < n; s++)
			for (long i = 0; i < c; i++)
				RCHECK(get(o, o->recv, s * c + i) == val(o->key, s, i), "%s block %d item %ld", RARGS,
				       name, s, i);
		break;
	case K_SCATTER:
		for (long i = 0; i < c; i++)
			RCHECK(get(o, o->recv, i) == val(o->key, me, i), "%s item %ld", RARGS, name, i);
		break;
	case K_ALLTOALL:
		for (int s = 0; s < n; s++)
			for (long i = 0; i < c; i++)
				RCHECK(get(o, o->recv, s * c + i) == val(o->key, s * MAX_RANKS + me, i),
				       "%s block %d item %ld", RARGS, name, s, i);
		break;
	case K_RSB:
		for (long i = 0; i < c; i++)
			RCHECK(get(o, o->recv, i) == reduced(o, 0, n, MAX_RANKS, me, i), "%s item %ld", RARGS, name, i);
		break;
	case K_P2P:
		for (long i = 0; i < c; i++)
			RCHECK(get(o, o->recv, i) == val(o->key, o->from, i), "%s item %ld", RARGS, name, i);
		break;
	default:
		break;
	}
	if (o->recv)
		check_sentinel(o);
	free(o->send);
	free(o->recv);
	o->send = o->recv = NULL;
}

/* Start (nonblocking) or run (blocking, then checked) operation @p o. */
static void run(struct op *o)
{
	MPI_Datatype t = type_of(o);
	MPI_Op op = ops[o->red];
	int c = (int)o->count, me = o->me, n = o->n;
	MPI_Comm comm = o->comm;
	o->req[0] = o->req[1] = MPI_REQUEST_NULL;
	switch (o->kind) {
	case K_BARRIER:
		MT_MPI(MPI_Barrier(comm));
		break;
	case K_IBARRIER:
		MT_MPI(MPI_Ibarrier(comm, &o->req[0]));
		break;
	case K_BCAST:
	case K_IBCAST: {
		void *b = recv_buf(o, c);
		if (me == o->root)
			for (long i = 0; i < c; i++)
				put(o, b, i, val(o->key, o->root, i));
		if (o->kind == K_BCAST)
			MT_MPI(MPI_Bcast(b, c, t, o->root, comm));
		else
			MT_MPI(MPI_Ibcast(b, c, t, o->root, comm, &o->req[0]));
		break;
	}
	case K_REDUCE:
	case K_IREDUCE:
	case K_ALLREDUCE:
	case K_IALLREDUCE:
	case K_SCAN:
	case K_EXSCAN: {
		o->send = fill(o, 1, me, 0);
		void *r = recv_buf(o, c);
		const void *s = o->send;
		if (o->in_place && (o->kind == K_ALLREDUCE || (o->kind == K_REDUCE && me == o->root))) {
			for (long i = 0; i < c; i++)
				put(o, r, i, get(o, o->send, i));
			s = MPI_IN_PLACE;
		}
		if (o->kind == K_REDUCE)
			MT_MPI(MPI_Reduce(s, r, c, t, op, o->root, comm));
		else if (o->kind == K_IREDUCE)
			MT_MPI(MPI_Ireduce(s, r, c, t, op, o->root, comm, &o->req[0]));
		else if (o->kind == K_ALLREDUCE)
			MT_MPI(MPI_Allreduce(s, r, c, t, op, comm));
		else if (o->kind == K_IALLREDUCE)
			MT_MPI(MPI_Iallreduce(s, r, c, t, op, comm, &o->req[0]));
		else if (o->kind == K_SCAN)
			MT_MPI(MPI_Scan(s, r, c, t, op, comm));
		else
			MT_MPI(MPI_Exscan(s, r, c, t, op, comm));
		break;
	}
	case K_GATHER:
	case K_ALLGATHER:
	case K_IALLGATHER:
		o->send = fill(o, 1, me, 0);
		recv_buf(o, (long)n * c);
		if (o->kind == K_GATHER)
			MT_MPI(MPI_Gather(o->send, c, t, o->recv, c, t, o->root, comm));
		else if (o->kind == K_ALLGATHER)
			MT_MPI(MPI_Allgather(o->send, c, t, o->recv, c, t, comm));
		else
			MT_MPI(MPI_Iallgather(o->send, c, t, o->recv, c, t, comm, &o->req[0]));
		break;
	case K_SCATTER:
		o->send = me == o->root ? fill(o, n, 0, 1) : NULL;
		recv_buf(o, c);
		MT_MPI(MPI_Scatter(o->send, c, t, o->recv, c, t, o->root, comm));
		break;
	case K_ALLTOALL:
		o->send = fill(o, n, me * MAX_RANKS, 1);
		recv_buf(o, (long)n * c);
		MT_MPI(MPI_Alltoall(o->send, c, t, o->recv, c, t, comm));
		break;
	case K_RSB:
		o->send = fill(o, n, me * MAX_RANKS, 1);
		recv_buf(o, c);
		MT_MPI(MPI_Reduce_scatter_block(o->send, o->recv, c, t, op, comm));
		break;
	case K_P2P: {
		int d = n > 1 ? 1 + (int)(o->key % (uint64_t)(n - 1)) : 0;
		o->from = (me + n - d) % n;
		o->send = fill(o, 1, me, 0);
		recv_buf(o, c);
		int tag = o->index;
		MT_MPI(MPI_Irecv(o->recv, c, t, o->from, tag, comm, &o->req[0]));
		MT_MPI(MPI_Isend(o->send, c, t, (me + d) % n, tag, comm, &o->req[1]));
		break;
	}
	default:
		break;
	}
}

static bool pending(const struct op *o)
{
	return o->req[0] != MPI_REQUEST_NULL || o->req[1] != MPI_REQUEST_NULL;
}

static void wait_op(struct op *o)
{
	MT_MPI(MPI_Waitall(2, o->req, MPI_STATUSES_IGNORE));
	check(o);
}

static void test_op(struct op *o)
{
	int done = 0;
	while (!done)
		MT_MPI(MPI_Testall(2, o->req, &done, MPI_STATUSES_IGNORE));
	check(o);
}

/* Every pending operation of @p list, by one MPI_Waitall. */
static void wait_all(struct op *list, int n)
{
	MPI_Request reqs[2 * OPS];
	int k = 0;
	for (int j = 0; j < n; j++)
		if (pending(&list[j])) {
			reqs[k++] = list[j].req[0];
			reqs[k++] = list[j].req[1];
		}
	MT_MPI(MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE));
	for (int j = 0; j < n; j++)
		if (pending(&list[j])) {
			list[j].req[0] = list[j].req[1] = MPI_REQUEST_NULL;
			check(&list[j]);
		}
}

static const long counts[] = {0, 1, 7, 100, 1000, 9000, 40000, 150000};

/* Round @p round: its schedule from the seed, run and checked. */
static void round_run(int round)
{
	struct rng r = {mt_word(g_seed, 0x726f756e64ull), (uint64_t)round << 32};
	struct op list[OPS];
	int order[NKINDS];
	for (int k = 0; k < NKINDS; k++)
		order[k] = k;
	for (int k = NKINDS - 1; k > 0; k--) { /* the first round: every call once */
		int j = (int)pick(&r, (unsigned)k + 1), x = order[k];
		order[k] = order[j];
		order[j] = x;
	}
	g_round = round;
	for (int j = 0; j < OPS; j++) {
		struct op *o = &list[j];
		memset(o, 0, sizeof(*o));
		o->req[0] = o->req[1] = MPI_REQUEST_NULL;
		o->kind = round == 0 && j < NKINDS ? (enum kind)order[j] : (enum kind)pick(&r, NKINDS);
		o->key = ((uint64_t)round << 16) + (uint64_t)j;
		o->index = j;
		o->comm = comms[pick(&r, NCOMMS)];
		MPI_Comm_rank(o->comm, &o->me);
		MPI_Comm_size(o->comm, &o->n);
		o->dbl = (int)pick(&r, 2);
		o->red = (int)pick(&r, o->dbl ? 3 : 4);
		o->count = counts[pick(&r, sizeof(counts) / sizeof(counts[0]))];
		if (o->count > 9000 && (o->kind == K_ALLTOALL || o->kind == K_RSB || o->kind == K_SCATTER ||
					o->kind == K_GATHER || o->kind == K_ALLGATHER || o->kind == K_IALLGATHER))
			o->count /= 8; /* n blocks of it */
		o->root = (int)pick(&r, (unsigned)o->n);
		o->in_place = pick(&r, 3) == 0;
		run(o);
		if (!pending(o))
			check(o);
		/* Complete some of what is pending: the choice is the schedule's. */
		unsigned how = pick(&r, 8);
		int oldest = -1, newest = -1;
		for (int k = 0; k <= j; k++)
			if (pending(&list[k])) {
				oldest = oldest < 0 ? k : oldest;
				newest = k;
			}
		if (how == 0 && oldest >= 0)
			wait_op(&list[oldest]);
		else if (how == 1 && newest >= 0)
			test_op(&list[newest]);
		else if (how == 2)
			wait_all(list, j + 1);
	}
	wait_all(list, OPS);
}

int main(int argc, char **argv)
{
	bool quick = mt_coll_init(&argc, &argv, "coll_random");
	MT_CHECK(mt_size <= MAX_RANKS, "at most %d ranks", MAX_RANKS);
	g_seed = mt_number_from(argc > 1 && !quick ? argv[1] : NULL, "COLL_RANDOM_SEED", 1);
	int rounds = quick ? 3 : (int)mt_number_from(argc > 2 ? argv[2] : NULL, "COLL_RANDOM_ROUNDS", 6);
	if (mt_rank == 0)
		printf("coll_random: seed %llu, %d rounds, %d ranks\n", (unsigned long long)g_seed, rounds, mt_size);
	fflush(stdout);
	comms[0] = MPI_COMM_WORLD;
	MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comms[1]));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, mt_size - mt_rank, &comms[2]));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank < mt_size / 2, mt_rank, &comms[3]));
	MT_MPI(MPI_Comm_split(MPI_COMM_WORLD, mt_rank % 2, mt_rank, &comms[4]));
	for (int k = 0; k < NCOMMS; k++) {
		MPI_Comm_set_errhandler(comms[k], MPI_ERRORS_RETURN);
		MT_MPI(MPI_Barrier(comms[k]));
	}
	for (int round = 0; round < rounds; round++)
		round_run(round);
	for (int k = 1; k < NCOMMS; k++)
		MT_MPI(MPI_Comm_free(&comms[k]));
	return mt_finish();
}
