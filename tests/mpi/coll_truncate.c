/*
 * coll_truncate.c - collectives whose ranks' type signatures differ in
 * size, under MPI_ERRORS_RETURN: one rank (the one after the root) counts
 * fewer or more items than the others.  Where a receiver would get more
 * than its buffer holds it gets MPI_ERR_TRUNCATE (its error class), with
 * nothing written past its count; a receiver with more room gets what
 * was sent; nobody hangs, and a Barrier and a checked Allreduce after
 * each call still work.  Calls: Bcast (receiver short), Scatter (receiver
 * short), Gather (a sender long: the root's room short), Alltoall (a
 * sender long: every receiver's room for it short), Allgather (the same,
 * a receiver short), Ibcast (receiver short or long) and Iallgather (one
 * rank's block and room short or long; received contiguous, and as ints
 * two apart, which the plugin packs), each with an Iallreduce made
 * before its wait: where the lengths take steps of different number in
 * the area, a rank's later calls move with the longest.  The
 * argument "list" prints the cases; a number runs
 * that case only (for comparing with the MPI library alone); none runs
 * them all.  Runs with any number of ranks >= 2, on one node (check_mpi);
 * across pretend nodes the plugin does not meet it yet (pinshm-mpi-coll(7)).
 */
#include "colltest.h"

static int calls_made; /* run_case() calls so far: the same at every rank */

/* Item @p i from rank @p from to rank @p to: another at every call, so
 * that data an earlier call left in the area never passes for it. */
static int val(int from, int to, int i)
{
	return from * 100003 + to * 1009 + i * 3 + 1 + calls_made * 7919;
}

static void check_in_step(MPI_Comm comm, int rank, int size)
{
	MT_MPI(MPI_Barrier(comm));
	int in[2] = {rank + 1, 1}, out[2];
	MT_MPI(MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, comm));
	MT_CHECK(out[0] == size * (size + 1) / 2 && out[1] == size, "allreduce after: %d %d", out[0], out[1]);
}

static int class_of(int rc)
{
	int cls = MPI_SUCCESS;
	if (rc != MPI_SUCCESS)
		MPI_Error_class(rc, &cls);
	return cls;
}

enum call { BCAST, SCATTER, GATHER, ALLTOALL, ALLGATHER, IBCAST, IALLGATHER, IALLGATHER_STRIDED, NCALLS };
static const char *const names[NCALLS] = {"bcast",	"scatter", "gather",     "alltoall",
					  "allgather",	"ibcast",  "iallgather", "iallgather_strided"};

/* An Iallreduce made after a nonblocking call, before its wait. */
static void then_iallreduce(MPI_Comm comm, MPI_Request *first, int *rc, int size, int rank, const char *what, int n,
			    int m)
{
	MPI_Request req;
	int in = rank + 1, sum = 0;
	MT_MPI(MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, comm, &req));
	*rc = MPI_Wait(first, MPI_STATUS_IGNORE);
	MT_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
	MT_CHECK(sum == size * (size + 1) / 2, "iallreduce after %s n %d m %d: %d", what, n, m, sum);
}

/* @p call with @p n items at every rank but the odd one's @p m (a
 * receiver's count where it receives, a sender's where it sends): each
 * rank's error class is checked, and its buffers. */
static void run_case(MPI_Comm comm, enum call call, int root, int n, int m)
{
	int rank, size;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &size);
	int odd_rank = (root + 1) % size;
	bool odd = rank == odd_rank;
	calls_made++;
	int mine = odd ? m : n, most = n > m ? n : m;
	size_t slots = 2 * ((size_t)size * most + 1); /* room for a receive type of stride 2 */
	int *s = malloc(slots * sizeof(int)), *r = malloc(slots * sizeof(int));
	MT_CHECK(s && r, "out of memory");
	for (size_t i = 0; i < slots; i++)
		r[i] = -99;
	int rc = MPI_SUCCESS, want = MPI_SUCCESS;
	switch (call) {
	case BCAST: /* the odd rank receives m of the root's n */
	case IBCAST:
		for (int i = 0; i < n; i++)
			r[i] = rank == root ? val(root, 0, i) : -99;
		if (call == BCAST) {
			rc = MPI_Bcast(r, mine, MPI_INT, root, comm);
		} else { /* a call reserved after it, pending with it */
			MPI_Request req;
			MT_MPI(MPI_Ibcast(r, mine, MPI_INT, root, comm, &req));
			then_iallreduce(comm, &req, &rc, size, rank, names[call], n, m);
		}
		want = odd && m < n ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
		for (int i = 0; rank != root && i < (mine < n ? mine : n); i++)
			MT_CHECK(r[i] == val(root, 0, i), "bcast [%d] = %d", i, r[i]);
		for (int i = mine < n ? mine : n; rank != root && i < most + 1; i++)
			MT_CHECK(r[i] == -99, "%s n %d m %d wrote [%d]", names[call], n, m, i);
		break;
	case SCATTER: /* the root sends n per rank; the odd rank receives m */
		for (int d = 0; d < size; d++)
			for (int i = 0; i < n; i++)
				s[d * n + i] = val(root, d, i);
		rc = MPI_Scatter(s, n, MPI_INT, r, mine, MPI_INT, root, comm);
		want = odd && m < n ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
		for (int i = 0; i < (mine < n ? mine : n); i++)
			MT_CHECK(r[i] == val(root, rank, i), "scatter [%d] = %d", i, r[i]);
		for (int i = mine; i < most + 1; i++)
			MT_CHECK(r[i] == -99, "scatter n %d m %d wrote [%d]", n, m, i);
		break;
	case GATHER: /* the odd rank sends m; the root receives n per rank */
		for (int i = 0; i < mine; i++)
			s[i] = val(rank, root, i);
		rc = MPI_Gather(s, mine, MPI_INT, r, n, MPI_INT, root, comm);
		want = rank == root && m > n ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
		for (int f = 0; rank == root && f < size; f++)
			for (int i = 0; i < (f == odd_rank && m < n ? m : n); i++)
				MT_CHECK(r[f * n + i] == val(f, root, i), "gather from %d [%d] = %d", f, i, r[f * n + i]);
		MT_CHECK(r[size * n] == -99, "gather n %d m %d wrote past the root's buffer", n, m);
		break;
	case ALLTOALL: /* the odd rank sends m per rank; all receive n per rank */
		for (int d = 0; d < size; d++)
			for (int i = 0; i < mine; i++)
				s[d * mine + i] = val(rank, d, i);
		rc = MPI_Alltoall(s, mine, MPI_INT, r, n, MPI_INT, comm);
		want = m > n ? MPI_ERR_TRUNCATE : MPI_SUCCESS; /* the odd rank's block to itself too */
		for (int f = 0; f < size; f++)
			for (int i = 0; i < (f == odd_rank && m < n ? m : n); i++)
				MT_CHECK(r[f * n + i] == val(f, rank, i), "alltoall from %d [%d] = %d", f, i, r[f * n + i]);
		(void)mine;
		MT_CHECK(r[size * n] == -99, "alltoall n %d m %d wrote past the buffer", n, m);
		break;
	case ALLGATHER: /* the odd rank receives m per rank; all send n */
		for (int i = 0; i < n; i++)
			s[i] = val(rank, 0, i);
		rc = MPI_Allgather(s, n, MPI_INT, r, mine, MPI_INT, comm);
		want = odd && m < n ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
		MT_CHECK(r[size * mine] == -99 || mine > n, "allgather n %d m %d wrote past the buffer", n, m);
		for (int f = 0; !odd && f < size; f++)
			for (int i = 0; i < n; i++)
				MT_CHECK(r[f * n + i] == val(f, 0, i), "allgather from %d [%d] = %d", f, i, r[f * n + i]);
		break;
	case IALLGATHER: /* the odd rank sends and receives m per rank, the others n */
	case IALLGATHER_STRIDED: { /* received as ints 2 apart (packed and unpacked by the plugin) */
		MPI_Request req;
		MPI_Datatype rt = MPI_INT;
		int stride = call == IALLGATHER ? 1 : 2;
		if (stride > 1) {
			MT_MPI(MPI_Type_create_resized(MPI_INT, 0, stride * (MPI_Aint)sizeof(int), &rt));
			MT_MPI(MPI_Type_commit(&rt));
		}
		for (int i = 0; i < mine; i++)
			s[i] = val(rank, 0, i);
		MT_MPI(MPI_Iallgather(s, mine, MPI_INT, r, mine, rt, comm, &req));
		then_iallreduce(comm, &req, &rc, size, rank, names[call], n, m);
		want = (odd ? n > m : m > n) ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
		for (int f = 0; f < size; f++) {
			int sent = f == odd_rank ? m : n, got = sent < mine ? sent : mine;
			for (int i = 0; i < stride * mine; i++) {
				int v = r[f * stride * mine + i], item = i / stride;
				MT_CHECK(v == (i % stride == 0 && item < got ? val(f, 0, item) : -99),
					 "%s n %d m %d from %d [%d] = %d", names[call], n, m, f, i, v);
			}
		}
		MT_CHECK(r[size * stride * mine] == -99, "%s n %d m %d wrote past the buffer", names[call], n, m);
		if (stride > 1)
			MT_MPI(MPI_Type_free(&rt));
		break;
	}
	default:
		break;
	}
	int cls = class_of(rc);
	MT_CHECK(cls == want, "%s root %d n %d m %d: class %d, want %d", names[call], root, n, m, cls, want);
	free(s);
	free(r);
	check_in_step(comm, rank, size);
}

/* {root's or the others' count, the odd rank's}: short, long, none, one or
 * many steps; 8 and 2 items: a nonblocking call's sender of 2 puts them
 * beside its length, one of 8 in its half. */
static const int cases[][2] = {{4, 1}, {1, 4}, {4, 0}, {0, 4}, {8, 2}, {2, 8}, {3000, 1000}, {1000, 3000}};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

int main(int argc, char **argv)
{
	mt_coll_init(&argc, &argv, "coll_truncate");
	MT_CHECK(mt_size >= 2, "needs 2 ranks or more");
	int only = -1;
	if (argc > 1 && !strcmp(argv[1], "list")) {
		for (int k = 0; mt_rank == 0 && k < NCALLS * NCASES; k++)
			printf("%d: %s n %d m %d\n", k, names[k / NCASES], cases[k % NCASES][0], cases[k % NCASES][1]);
		MPI_Finalize();
		return 0;
	}
	if (argc > 1)
		only = atoi(argv[1]);
	for (int k = 0; k < NCALLS * NCASES; k++) {
		if (only >= 0 && k != only)
			continue;
		enum call c = (enum call)(k / NCASES);
		bool rootless = c == ALLTOALL || c == ALLGATHER || c == IALLGATHER || c == IALLGATHER_STRIDED;
		for (int root = 0; root < (rootless ? 1 : mt_size); root++)
			run_case(MPI_COMM_WORLD, c, root, cases[k % NCASES][0],
				 cases[k % NCASES][1]);
	}
	return mt_finish();
}
