/*
 * pinshm-mpi-bench.c - point-to-point benchmark for an MPI program, run
 * under mpirun with or without the pinshm plugin (pinshm-mpi-compare runs it
 * both ways).  Four modes:
 *
 *   latency    ranks 0 and 1 ping-pong with MPI_Send/MPI_Recv; a sample is
 *              the one-way time of a batch of round trips (its time / 2 /
 *              round trips); the median, 10th and 90th percentiles of the
 *              samples are printed per size;
 *   bandwidth  rank 0 streams a window of MPI_Isend to rank 1's posted
 *              MPI_Irecv (distinct buffers), rank 1 answers each window with
 *              a 4-byte ack; a sample is window * size / time of one window;
 *   ring       every rank MPI_Sendrecv's to rank + 1 from rank - 1; a sample
 *              is the time of one step, as the slowest rank saw it (a batch
 *              of steps between barriers, the maximum over the ranks);
 *   exchange   ranks 0 and 1 exchange a message at once, each with
 *              MPI_Irecv, MPI_Isend and MPI_Waitall, the nonblocking pattern
 *              of a halo exchange; a sample is the time of one exchange
 *              (rank 0's batch time / exchanges);
 *   complete   MPI_Testany, MPI_Waitany, MPI_Testsome and MPI_Waitsome
 *              over many outstanding requests (-q, default 20000) at rank 0:
 *              all but the last are receives that stay pending, the last is
 *              a receive whose message has come (rank 1 sent it ahead), so
 *              that each call looks at every request and finds that one; a
 *              sample is the time of one call, with the MPI_Irecv that
 *              posts the last request again (rank 0's batch time / calls);
 *   coll       the collective calls (-c: barrier, bcast, reduce, allreduce,
 *              gather, scatter, allgather, alltoall, and the nonblocking
 *              ibarrier, ibcast, ireduce, iallreduce, iallgather, each with
 *              its MPI_Wait) on every rank, as the
 *              OSU collective benchmarks time them: after a warm-up, each
 *              call is timed alone with a barrier between calls; a sample
 *              is the mean time of a call over a batch at each rank, the
 *              maximum over the ranks; the size is the bytes of one rank's
 *              block (Gather, Scatter, Allgather, Alltoall: per rank, and
 *              per pair for Alltoall) or of the whole message (Bcast,
 *              Reduce, Allreduce: ints, MPI_SUM); the root is rank 0;
 *              besides, where the time went: rank 0's time of a call and
 *              the barrier after it, and how much later the last rank
 *              entered the calls than the first (ranks on one machine).
 *
 * Output: one line per mode and size, "MODE bytes=N KEY=VALUE ...", for
 * scripts; lines starting with '#' are comments.  Every received message is
 * checked (its first and last byte), so that a broken path cannot look fast.
 */
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024L * 1024)
#define MAX_SIZES 64

static int rank, nranks;

struct opts {
	int modes;           /* bits of MODE_* */
	long sizes[MAX_SIZES];
	int nsizes;          /* 0: each mode's default sizes */
	int samples;         /* per size */
	double target_s;     /* measuring time per size and mode (roughly) */
	int window;          /* bandwidth: messages in flight, at most */
	int requests;        /* complete: requests outstanding */
	unsigned calls;      /* coll: bits of the collective calls (coll_names) */
};

enum { MODE_LATENCY = 1, MODE_BANDWIDTH = 2, MODE_RING = 4, MODE_EXCHANGE = 8, MODE_COMPLETE = 16, MODE_COLL = 32 };
/* "all": the point-to-point modes (coll is asked for by name). */
#define MODE_ALL (MODE_LATENCY | MODE_BANDWIDTH | MODE_RING | MODE_EXCHANGE | MODE_COMPLETE)

enum coll { COLL_BARRIER, COLL_BCAST, COLL_REDUCE, COLL_ALLREDUCE, COLL_GATHER, COLL_SCATTER, COLL_ALLGATHER,
	    COLL_ALLTOALL, COLL_IBARRIER, COLL_IBCAST, COLL_IREDUCE, COLL_IALLREDUCE, COLL_IALLGATHER, NCOLL };
static const char *const coll_names[NCOLL] = {"barrier",  "bcast",  "reduce",  "allreduce",  "gather",
					       "scatter",  "allgather", "alltoall", "ibarrier", "ibcast",
					       "ireduce", "iallreduce", "iallgather"};

/* The blocking call whose data a nonblocking one moves (itself for a
 * blocking one). */
static enum coll twin(enum coll c)
{
	static const enum coll of[] = {COLL_BARRIER, COLL_BCAST, COLL_REDUCE, COLL_ALLREDUCE, COLL_ALLGATHER};
	return c >= COLL_IBARRIER ? of[c - COLL_IBARRIER] : c;
}
#define COLL_ALL ((1u << NCOLL) - 1)

/* 0 and every power of two up to 4 MiB. */
static const long latency_sizes[] = {0,     1,     2,     4,      8,      16,     32,     64,  128,     256,
				     512,   1024,  2048,  4096,   8192,   16384,  32768,  65536,
				     131072, 262144, 524288, MIB,   2 * MIB, 4 * MIB};
static const long bandwidth_sizes[] = {65536, 262144, MIB, 4 * MIB};
static const long ring_sizes[] = {8, 4096, 65536, MIB};
static const long exchange_sizes[] = {0, 8, 512, 4096, 65536, MIB};
static const long coll_sizes[] = {8, 64, 512, 4096, 32768, 65536, 262144, MIB, 4 * MIB};

static void die(const char *fmt, const char *arg)
{
	if (rank == 0) {
		fprintf(stderr, "pinshm-mpi-bench: ");
		fprintf(stderr, fmt, arg);
		fprintf(stderr, "\n");
	}
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);
}

static void usage(FILE *to)
{
	if (rank == 0)
		fprintf(to,
			"usage: mpirun -np N pinshm-mpi-bench [-m MODES] [-z SIZES] [-n SAMPLES] [-t SECONDS] [-w WINDOW]\n"
			"                                    [-q REQUESTS] [-c CALLS]\n"
			"  -m MODES    latency,bandwidth,ring,exchange,complete,coll or all (default: all, which is\n"
			"              every mode but coll)\n"
			"  -z SIZES    comma-separated sizes in bytes, K and M suffixes (default: per mode)\n"
			"  -n SAMPLES  samples per size, 1..100000 (default 41)\n"
			"  -t SECONDS  time to measure per size and mode, about (default 0.2)\n"
			"  -w WINDOW   bandwidth: messages in flight, 1..4096 (default 64, fewer for large sizes)\n"
			"  -q REQUESTS complete: requests outstanding, 1..1000000 (default 20000)\n"
			"  -c CALLS    coll: barrier,bcast,reduce,allreduce,gather,scatter,allgather,alltoall,\n"
			"              ibarrier,ibcast,ireduce,iallreduce,iallgather (each with its MPI_Wait)\n"
			"              or all (default: all)\n"
			"  -h, --help  print this help and exit\n");
}

/* A whole decimal number from @p min to @p max and nothing else, or die. */
static int parse_int(const char *s, int min, int max, const char *what)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);

	if (errno || end == s || *end || v < min || v > max)
		die(what, s);
	return (int)v;
}

static long parse_size(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);

	if (errno || end == s || v < 0)
		die("bad size '%s'", s);
	if (*end == 'K' || *end == 'k')
		v *= 1024, end++;
	else if (*end == 'M' || *end == 'm')
		v *= MIB, end++;
	if (*end || v > 1024 * MIB)
		die("bad size '%s'", s);
	return v;
}

/* "bcast,allreduce" or "all": bits of coll_names. */
static unsigned parse_calls(const char *arg)
{
	unsigned calls = 0;
	char *copy = strdup(arg), *save = NULL;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k = 0;
		while (k < NCOLL && strcmp(t, coll_names[k]) != 0)
			k++;
		if (k < NCOLL)
			calls |= 1u << k;
		else if (!strcmp(t, "all"))
			calls |= COLL_ALL;
		else
			die("unknown collective '%s'", t);
	}
	free(copy);
	if (!calls)
		die("no collective in '%s'", arg);
	return calls;
}

static void parse(int argc, char **argv, struct opts *o)
{
	int c;

	*o = (struct opts){.modes = MODE_ALL, .samples = 41, .target_s = 0.2,
			   .window = 64, .requests = 20000, .calls = COLL_ALL};
	static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	while ((c = getopt_long(argc, argv, "m:z:n:t:w:q:c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': {
			o->modes = 0;
			char *copy = strdup(optarg), *save = NULL;
			for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				if (!strcmp(t, "latency"))
					o->modes |= MODE_LATENCY;
				else if (!strcmp(t, "bandwidth"))
					o->modes |= MODE_BANDWIDTH;
				else if (!strcmp(t, "ring"))
					o->modes |= MODE_RING;
				else if (!strcmp(t, "exchange"))
					o->modes |= MODE_EXCHANGE;
				else if (!strcmp(t, "complete"))
					o->modes |= MODE_COMPLETE;
				else if (!strcmp(t, "coll"))
					o->modes |= MODE_COLL;
				else if (!strcmp(t, "all"))
					o->modes |= MODE_ALL;
				else
					die("unknown mode '%s'", t);
			}
			free(copy);
			break;
		}
		case 'z': {
			char *copy = strdup(optarg), *save = NULL;
			o->nsizes = 0;
			for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				if (o->nsizes == MAX_SIZES)
					die("more than 64 sizes%s", "");
				o->sizes[o->nsizes++] = parse_size(t);
			}
			free(copy);
			break;
		}
		case 'n': o->samples = parse_int(optarg, 1, 100000, "bad sample count '%s': 1 to 100000"); break;
		case 't': {
			char *end;
			o->target_s = strtod(optarg, &end);
			if (end == optarg || *end || !(o->target_s > 0 && o->target_s < 3600))
				die("bad time '%s': seconds, above 0 and below 3600", optarg);
			break;
		}
		case 'c': o->calls = parse_calls(optarg); break;
		case 'w': o->window = parse_int(optarg, 1, 4096, "bad window '%s': 1 to 4096"); break;
		case 'q': o->requests = parse_int(optarg, 1, 1000000, "bad request count '%s': 1 to 1000000"); break;
		case 'h':
			usage(stdout);
			MPI_Finalize();
			exit(0);
		default:
			usage(stderr);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	if (nranks < 2)
		die("needs at least 2 ranks%s", "");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The @p q quantile (0..1) of @p n sorted values, nearest rank. */
static double quantile(const double *v, int n, double q)
{
	int i = (int)(q * (n - 1) + 0.5);

	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static unsigned char *alloc_touched(long n)
{
	unsigned char *p = NULL;

	if (posix_memalign((void **)&p, 4096, n ? (size_t)n : 1) != 0)
		die("out of memory%s", "");
	memset(p, 0, n ? (size_t)n : 1);
	return p;
}

/* Mark a message (first and last byte) and check a received one. */
static void mark(unsigned char *b, long n, unsigned char v)
{
	if (n) {
		b[0] = v;
		b[n - 1] = v;
	}
}

static void check(const unsigned char *b, long n, unsigned char v, const char *what)
{
	if (n && (b[0] != v || b[n - 1] != v)) {
		fprintf(stderr, "pinshm-mpi-bench: rank %d: %s of %ld bytes: wrong data (%u %u, want %u)\n", rank, what,
			n, b[0], b[n - 1], v);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
}

/* Iterations per sample, so that samples * iterations take about target_s:
 * measured by rank 0 from @p one (seconds per iteration), shared with all. */
static long per_sample(double one, const struct opts *o)
{
	long k = 1;

	if (rank == 0 && one > 0)
		k = (long)(o->target_s / o->samples / one);
	if (k < 1)
		k = 1;
	if (k > 100000)
		k = 100000;
	MPI_Bcast(&k, 1, MPI_LONG, 0, MPI_COMM_WORLD);
	return k;
}

/* Rank 0 prints the line of @p mode for @p n bytes (requests in the
 * complete mode): the median of the samples (microseconds; sorted here)
 * as @p key, their 10th and 90th percentiles; @p extra: fields after the size, @p tail: at the
 * line's end, each "" or " KEY=VALUE ...". */
static void print_times(const char *mode, long n, const char *extra, const char *key, double *sample,
			const struct opts *o, long k, const char *tail)
{
	if (rank != 0)
		return;
	qsort(sample, o->samples, sizeof(double), cmp_double);
	printf("%s %s=%ld%s %s=%.3f p10_us=%.3f p90_us=%.3f samples=%d per_sample=%ld%s\n", mode,
	       strcmp(mode, "complete") ? "bytes" : "requests", n, extra, key,
	       quantile(sample, o->samples, 0.5), quantile(sample, o->samples, 0.1), quantile(sample, o->samples, 0.9),
	       o->samples, k, tail);
	fflush(stdout);
}

static void latency(long n, const struct opts *o)
{
	unsigned char *buf = alloc_touched(n);
	double *sample = calloc(o->samples, sizeof(double));
	int peer = 1 - rank;
	unsigned char v = 1;

	/* Warm-up, which also times one round trip. */
	double t0 = MPI_Wtime();
	for (int i = 0; i < 20 && rank < 2; i++, v++) {
		if (rank == 0) {
			mark(buf, n, v);
			MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(buf, n, v, "latency reply");
		} else {
			MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			check(buf, n, v, "latency message");
			MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
		}
	}
	long k = per_sample((MPI_Wtime() - t0) / 20, o);
	for (int s = 0; s < o->samples; s++) {
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank >= 2)
			continue;
		t0 = MPI_Wtime();
		for (long i = 0; i < k; i++, v++) {
			if (rank == 0) {
				mark(buf, n, v);
				MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			}
		}
		sample[s] = (MPI_Wtime() - t0) / k / 2 * 1e6;
		check(buf, n, (unsigned char)(v - 1), "latency");
	}
	print_times("latency", n, "", "oneway_us", sample, o, k, "");
	free(sample);
	free(buf);
}

static void bandwidth(long n, const struct opts *o)
{
	int w = o->window;

	/* At most 64 MiB of buffers per side. */
	while (w > 4 && (long)w * n > 64 * MIB)
		w /= 2;
	unsigned char **bufs = calloc(w, sizeof(*bufs));
	MPI_Request *rq = calloc(w, sizeof(*rq));
	double *sample = calloc(o->samples, sizeof(double));
	int ack = 0;
	unsigned char v = 1;

	for (int i = 0; i < w; i++)
		bufs[i] = rank < 2 ? alloc_touched(n) : NULL;
	double t0 = 0, one = 0;
	long k = 2; /* the warm-up (s = -1): windows, timed to size the samples */
	for (int s = -1; s < o->samples; s++) {
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank >= 2)
			goto next;
		t0 = MPI_Wtime();
		for (long it = 0; it < k; it++, v++) {
			if (rank == 0) {
				for (int i = 0; i < w; i++) {
					mark(bufs[i], n, v);
					MPI_Isend(bufs[i], (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &rq[i]);
				}
				MPI_Waitall(w, rq, MPI_STATUSES_IGNORE);
				MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				for (int i = 0; i < w; i++)
					MPI_Irecv(bufs[i], (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &rq[i]);
				MPI_Waitall(w, rq, MPI_STATUSES_IGNORE);
				for (int i = 0; i < w; i++)
					check(bufs[i], n, v, "bandwidth");
				MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
			}
		}
		if (s >= 0)
			sample[s] = (double)n * w * k / ((MPI_Wtime() - t0) * 1e9);
		else
			one = (MPI_Wtime() - t0) / k;
	next:
		if (s < 0)
			k = per_sample(one, o);
	}
	if (rank == 0) {
		qsort(sample, o->samples, sizeof(double), cmp_double);
		printf("bandwidth bytes=%ld gbps=%.3f p10_gbps=%.3f p90_gbps=%.3f window=%d samples=%d per_sample=%ld\n",
		       n, quantile(sample, o->samples, 0.5), quantile(sample, o->samples, 0.1),
		       quantile(sample, o->samples, 0.9), w, o->samples, k);
		fflush(stdout);
	}
	for (int i = 0; i < w; i++)
		free(bufs[i]);
	free(bufs);
	free(rq);
	free(sample);
}

static void ring(long n, const struct opts *o)
{
	unsigned char *out = alloc_touched(n), *in = alloc_touched(n);
	double *sample = calloc(o->samples, sizeof(double));
	int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
	unsigned char v = 1;
	long k = 20; /* the warm-up (s = -1): steps, timed to size the samples */

	for (int s = -1; s < o->samples; s++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (long it = 0; it < k; it++, v++) {
			mark(out, n, v);
			MPI_Sendrecv(out, (int)n, MPI_BYTE, next, 4, in, (int)n, MPI_BYTE, prev, 4, MPI_COMM_WORLD,
				     MPI_STATUS_IGNORE);
			check(in, n, v, "ring");
		}
		double t = (MPI_Wtime() - t0) / k, tmax = 0;
		MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		if (s >= 0)
			sample[s] = tmax * 1e6;
		else
			k = per_sample(tmax, o);
	}
	char ranks[32];
	snprintf(ranks, sizeof(ranks), " ranks=%d", nranks);
	print_times("ring", n, ranks, "step_us", sample, o, k, "");
	free(out);
	free(in);
	free(sample);
}

static void exchange(long n, const struct opts *o)
{
	unsigned char *out = alloc_touched(n), *in = alloc_touched(n);
	double *sample = calloc(o->samples, sizeof(double));
	int peer = 1 - rank;
	unsigned char v = 1;
	long k = 20; /* the warm-up (s = -1): exchanges, timed to size the samples */

	for (int s = -1; s < o->samples; s++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (long i = 0; i < k && rank < 2; i++, v++) {
			MPI_Request rq[2];
			mark(out, n, v);
			MPI_Irecv(in, (int)n, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[0]);
			MPI_Isend(out, (int)n, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &rq[1]);
			MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
			check(in, n, v, "exchange");
		}
		double t = (MPI_Wtime() - t0) / k;
		if (s >= 0)
			sample[s] = t * 1e6;
		else
			k = per_sample(t, o);
	}
	print_times("exchange", n, "", "round_us", sample, o, k, "");
	free(out);
	free(in);
	free(sample);
}

/* The completion calls of the complete mode. */
enum call { CALL_TESTANY, CALL_WAITANY, CALL_TESTSOME, CALL_WAITSOME, NCALLS };
static const char *const call_name[NCALLS] = {"testany", "waitany", "testsome", "waitsome"};

/* Rank 0: post the last request again and complete it with @p call, which
 * must find it (and only it) done. */
static void complete_one(enum call call, MPI_Request *rq, int nreq, int *indices, MPI_Status *st)
{
	int index = -1, flag = 0, out = 0;

	MPI_Irecv(NULL, 0, MPI_BYTE, 1, 6, MPI_COMM_WORLD, &rq[nreq - 1]);
	switch (call) {
	case CALL_TESTANY:
		do
			MPI_Testany(nreq, rq, &index, &flag, MPI_STATUS_IGNORE);
		while (!flag);
		break;
	case CALL_WAITANY: MPI_Waitany(nreq, rq, &index, MPI_STATUS_IGNORE); break;
	case CALL_TESTSOME:
		do
			MPI_Testsome(nreq, rq, &out, indices, st);
		while (out == 0);
		index = out == 1 ? indices[0] : -1;
		break;
	default:
		MPI_Waitsome(nreq, rq, &out, indices, st);
		index = out == 1 ? indices[0] : -1;
		break;
	}
	if (index != nreq - 1 || rq[nreq - 1] != MPI_REQUEST_NULL) {
		fprintf(stderr, "pinshm-mpi-bench: %s over %d requests: completed %d (outcount %d), want %d\n",
			call_name[call], nreq, index, out, nreq - 1);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
}

/* @p k calls of @p call at rank 0, whose messages rank 1 sends first:
 * @return their time, seconds (rank 0). */
static double complete_batch(enum call call, long k, MPI_Request *rq, int nreq, int *indices, MPI_Status *st)
{
	double t = 0;

	if (rank == 1)
		for (long i = 0; i < k; i++)
			MPI_Send(NULL, 0, MPI_BYTE, 0, 6, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		double t0 = MPI_Wtime();
		for (long i = 0; i < k; i++)
			complete_one(call, rq, nreq, indices, st);
		t = MPI_Wtime() - t0;
	}
	MPI_Barrier(MPI_COMM_WORLD); /* rank 1 sends nothing more meanwhile */
	return t;
}

static void complete(const struct opts *o)
{
	int nreq = o->requests;
	MPI_Comm apart;
	MPI_Request *rq = calloc(nreq, sizeof(*rq));
	int *indices = calloc(nreq, sizeof(int));
	MPI_Status *st = calloc(nreq, sizeof(MPI_Status));
	double *sample = calloc(o->samples, sizeof(double));

	if (!rq || !indices || !st || !sample)
		die("out of memory%s", "");
	/* The pending receives, on a communicator of their own: the message
	 * of the last request matches without passing them. */
	MPI_Comm_dup(MPI_COMM_WORLD, &apart);
	for (int i = 0; rank == 0 && i < nreq - 1; i++)
		MPI_Irecv(NULL, 0, MPI_BYTE, 1, 7, apart, &rq[i]);
	for (int c = 0; c < NCALLS; c++) {
		long k = per_sample(complete_batch(c, 20, rq, nreq, indices, st) / 20, o);
		for (int s = 0; s < o->samples; s++)
			sample[s] = complete_batch(c, k, rq, nreq, indices, st) / k * 1e6;
		char extra[48];
		snprintf(extra, sizeof(extra), " call=%s", call_name[c]);
		print_times("complete", nreq, extra, "call_us", sample, o, k, "");
	}
	for (int i = 0; rank == 1 && i < nreq - 1; i++)
		MPI_Send(NULL, 0, MPI_BYTE, 0, 7, apart);
	if (rank == 0)
		MPI_Waitall(nreq - 1, rq, MPI_STATUSES_IGNORE);
	MPI_Comm_free(&apart);
	free(rq);
	free(indices);
	free(st);
	free(sample);
}

/* ---- coll ------------------------------------------------------------- */

/* One call of @p call over blocks of @p k ints (@p send, @p recv: room
 * for nranks blocks each), a nonblocking one with its MPI_Wait; the root
 * is rank 0. */
static void coll_once(enum coll call, int k, int *send, int *recv)
{
	MPI_Comm w = MPI_COMM_WORLD;
	MPI_Request rq;

	if (call != twin(call)) {
		switch (call) {
		case COLL_IBARRIER: MPI_Ibarrier(w, &rq); break;
		case COLL_IBCAST: MPI_Ibcast(send, k, MPI_INT, 0, w, &rq); break;
		case COLL_IREDUCE: MPI_Ireduce(send, recv, k, MPI_INT, MPI_SUM, 0, w, &rq); break;
		case COLL_IALLREDUCE: MPI_Iallreduce(send, recv, k, MPI_INT, MPI_SUM, w, &rq); break;
		default: MPI_Iallgather(send, k, MPI_INT, recv, k, MPI_INT, w, &rq); break;
		}
		MPI_Wait(&rq, MPI_STATUS_IGNORE);
		return;
	}
	switch (call) {
	case COLL_BARRIER: MPI_Barrier(w); break;
	case COLL_BCAST: MPI_Bcast(send, k, MPI_INT, 0, w); break;
	case COLL_REDUCE: MPI_Reduce(send, recv, k, MPI_INT, MPI_SUM, 0, w); break;
	case COLL_ALLREDUCE: MPI_Allreduce(send, recv, k, MPI_INT, MPI_SUM, w); break;
	case COLL_GATHER: MPI_Gather(send, k, MPI_INT, recv, k, MPI_INT, 0, w); break;
	case COLL_SCATTER: MPI_Scatter(send, k, MPI_INT, recv, k, MPI_INT, 0, w); break;
	case COLL_ALLGATHER: MPI_Allgather(send, k, MPI_INT, recv, k, MPI_INT, w); break;
	default: MPI_Alltoall(send, k, MPI_INT, recv, k, MPI_INT, w); break;
	}
}

/* The first and last int of block @p b of @p k ints at @p p. */
static void mark_block(int *p, int k, int b, int v)
{
	p[(long)b * k] = v;
	p[(long)b * k + k - 1] = v;
}

static void check_block(const int *p, int k, int b, int v, enum coll call)
{
	if (p[(long)b * k] != v || p[(long)b * k + k - 1] != v) {
		fprintf(stderr, "pinshm-mpi-bench: rank %d: %s of %d ints, block %d: wrong data (%d %d, want %d)\n", rank,
			coll_names[call], k, b, p[(long)b * k], p[(long)b * k + k - 1], v);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
}

/* Before a sample of value @p v: this rank's send blocks marked (block d
 * of rank r: v + r * nranks + d; Bcast: v at the root, 0 elsewhere), its
 * receive blocks cleared. */
static void coll_prepare(enum coll call, int k, int *send, int *recv, int v)
{
	for (int d = 0; d < nranks; d++) {
		mark_block(send, k, d, twin(call) == COLL_BCAST ? (rank == 0 ? v : 0) : v + rank * nranks + d);
		mark_block(recv, k, d, -1);
	}
}

/* After it: what the call must have left (the blocks that the last call
 * wrote, as prepared above). */
static void coll_verify(enum coll call, int k, const int *send, const int *recv, int v)
{
	int n = nranks, sum = 0;

	for (int r = 0; r < n; r++)
		sum += v + r * n;
	switch (twin(call)) {
	case COLL_BARRIER: break;
	case COLL_BCAST: check_block(send, k, 0, v, call); break;
	case COLL_REDUCE:
		if (rank == 0)
			check_block(recv, k, 0, sum, call);
		break;
	case COLL_ALLREDUCE: check_block(recv, k, 0, sum, call); break;
	case COLL_GATHER:
		for (int r = 0; r < n && rank == 0; r++)
			check_block(recv, k, r, v + r * n, call);
		break;
	case COLL_SCATTER: check_block(recv, k, 0, v + rank, call); break; /* block `rank` of the root */
	case COLL_ALLGATHER:
		for (int r = 0; r < n; r++)
			check_block(recv, k, r, v + r * n, call);
		break;
	default:
		for (int r = 0; r < n; r++)
			check_block(recv, k, r, v + r * n + rank, call);
		break;
	}
}

/* Nanoseconds on CLOCK_MONOTONIC, one clock for every process of a
 * machine (MPI_Wtime need not be: Open MPI's counts from each process's
 * own start). */
static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether every rank runs on this machine (main()): the ranks' entry
 * times can then be compared. */
static bool one_machine;

/* How the ranks entered the calls of a batch: the latest mean entry time
 * less the earliest, and the rank of the earliest. */
struct entries {
	double skew_s;
	int first;
};

/* @p iters calls, each timed alone with a barrier between (Barrier: a
 * run of barriers): the mean seconds of a call, the maximum over the
 * ranks; *@p wall: the batch's time at this rank, per call; *@p in, at
 * rank 0: how the ranks entered the calls (but for a Barrier, and where
 * every rank runs on this machine; else 0).  A rank that enters a call later
 * than another (the barrier lets the last rank to reach it leave first)
 * makes the other's time include the difference where it waits for it. */
static double coll_batch(enum coll call, int k, int *send, int *recv, long iters, double *wall, struct entries *in)
{
	double sum = 0, tmax = 0, start = MPI_Wtime();
	int64_t base = mono_ns(), entered = 0;

	in->skew_s = 0;
	in->first = 0;
	if (call == COLL_BARRIER) {
		for (long i = 0; i < iters; i++)
			MPI_Barrier(MPI_COMM_WORLD);
		sum = MPI_Wtime() - start;
	} else {
		for (long i = 0; i < iters; i++) {
			entered += mono_ns() - base;
			double t0 = MPI_Wtime();
			coll_once(call, k, send, recv);
			sum += MPI_Wtime() - t0;
			MPI_Barrier(MPI_COMM_WORLD);
		}
	}
	*wall = (MPI_Wtime() - start) / iters;
	double mean = sum / iters;
	MPI_Allreduce(&mean, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	if (call != COLL_BARRIER && one_machine) {
		/* The earliest mean entry time (ns) and its rank, and the latest
		 * negated, in one reduction. */
		long t = (long)(base + entered / iters);
		struct {
			long t;
			int rank;
		} mine[2] = {{t, rank}, {-t, rank}}, got[2] = {mine[0], mine[1]};
		MPI_Reduce(mine, got, 2, MPI_LONG_INT, MPI_MINLOC, 0, MPI_COMM_WORLD);
		in->skew_s = (double)(-got[1].t - got[0].t) * 1e-9; /* elsewhere than rank 0: 0 */
		in->first = got[0].rank;
	}
	return tmax;
}

/* Collective @p call over blocks of @p n bytes (ints: n / 4, at least one). */
static void coll_size(enum coll call, long n, const struct opts *o)
{
	int k = n / 4 > 0 ? (int)(n / 4) : 1;
	long ints = (long)k * nranks;
	int *send = (int *)(void *)alloc_touched(ints * (long)sizeof(int));
	int *recv = (int *)(void *)alloc_touched(ints * (long)sizeof(int));
	double *sample = calloc(o->samples, sizeof(double)), wall = 0;
	double *skew = calloc(o->samples, sizeof(double)), *cycle = calloc(o->samples, sizeof(double));
	int *firsts = calloc(nranks, sizeof(int));
	struct entries in;

	if (!sample || !skew || !cycle || !firsts)
		die("out of memory%s", "");
	coll_prepare(call, k, send, recv, 1);
	coll_batch(call, k, send, recv, 3, &wall, &in); /* the warm-up, then a batch timed to size the samples */
	coll_batch(call, k, send, recv, 20, &wall, &in);
	coll_verify(call, k, send, recv, 1);
	long iters = per_sample(wall, o);
	for (int s = 0; s < o->samples; s++) {
		int v = (s & 1023) + 2;
		coll_prepare(call, k, send, recv, v);
		MPI_Barrier(MPI_COMM_WORLD);
		sample[s] = coll_batch(call, k, send, recv, iters, &wall, &in) * 1e6;
		skew[s] = in.skew_s * 1e6;
		cycle[s] = wall * 1e6;
		firsts[in.first]++;
		coll_verify(call, k, send, recv, v);
	}
	char extra[64], tail[96] = "";
	snprintf(extra, sizeof(extra), " call=%s ranks=%d", coll_names[call], nranks);
	if (call != COLL_BARRIER) { /* rank 0's call and barrier; the median skew, the rank first in most samples */
		int first = 0, n;
		for (int r = 1; r < nranks; r++)
			first = firsts[r] > firsts[first] ? r : first;
		qsort(cycle, o->samples, sizeof(double), cmp_double);
		qsort(skew, o->samples, sizeof(double), cmp_double);
		n = snprintf(tail, sizeof(tail), " cycle_us=%.3f", quantile(cycle, o->samples, 0.5));
		if (one_machine)
			snprintf(tail + n, sizeof(tail) - n, " skew_us=%.3f first_in=%d", quantile(skew, o->samples, 0.5),
				 first);
	}
	print_times("coll", twin(call) == COLL_BARRIER ? 0 : (long)k * 4, extra, "us", sample, o, iters, tail);
	free(firsts);
	free(cycle);
	free(skew);
	free(sample);
	free(send);
	free(recv);
}

static void coll(const struct opts *o)
{
	const long *sizes = o->nsizes ? o->sizes : coll_sizes;
	int nsizes = o->nsizes ? o->nsizes : (int)(sizeof(coll_sizes) / sizeof(long));

	for (int c = 0; c < NCOLL; c++) {
		if (!(o->calls >> c & 1))
			continue;
		for (int i = 0; i < (twin(c) == COLL_BARRIER ? 1 : nsizes); i++)
			coll_size(c, sizes[i], o);
	}
}

static void run_mode(int mode, void (*fn)(long, const struct opts *), const long *defaults, int ndefaults,
		     const struct opts *o)
{
	if (!(o->modes & mode))
		return;
	const long *sizes = o->nsizes ? o->sizes : defaults;
	int nsizes = o->nsizes ? o->nsizes : ndefaults;

	for (int i = 0; i < nsizes; i++)
		fn(sizes[i], o);
}

int main(int argc, char **argv)
{
	struct opts o;
	char name[MPI_MAX_PROCESSOR_NAME];
	int len;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	parse(argc, argv, &o);
	MPI_Comm node;
	int node_size = 0;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	MPI_Comm_size(node, &node_size);
	MPI_Comm_free(&node);
	one_machine = node_size == nranks;
	MPI_Get_processor_name(name, &len);
	if (rank == 0) {
		printf("# pinshm-mpi-bench: %d ranks on %s, %d samples per size, about %.2f s each, %ld online CPUs\n",
		       nranks, name, o.samples, o.target_s, sysconf(_SC_NPROCESSORS_ONLN));
		fflush(stdout);
	}
	run_mode(MODE_LATENCY, latency, latency_sizes, sizeof(latency_sizes) / sizeof(long), &o);
	run_mode(MODE_BANDWIDTH, bandwidth, bandwidth_sizes, sizeof(bandwidth_sizes) / sizeof(long), &o);
	run_mode(MODE_RING, ring, ring_sizes, sizeof(ring_sizes) / sizeof(long), &o);
	run_mode(MODE_EXCHANGE, exchange, exchange_sizes, sizeof(exchange_sizes) / sizeof(long), &o);
	if (o.modes & MODE_COMPLETE)
		complete(&o);
	if (o.modes & MODE_COLL)
		coll(&o);
	MPI_Finalize();
	return 0;
}
