/*
 * perf_options.c - pinshm-perf's command line: its help, and the options
 * read into struct opts (transports, patterns, sizes, CPUs).
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pinshm.h>

#include "perf_options.h"

static const char *prog = PERF_PROG;

static void usage(FILE *f)
{
	size_t n;
	const perf_transport_t *t = perf_transports(&n);

	fprintf(f,
		"Usage: %s [OPTION]...\n"
		"Measure pinshm channels against a pipe, a Unix socket, a POSIX message queue,\n"
		"a textbook shared-memory ring and a bounced cache line, in one run.\n"
		"\n"
		"  -t, --transport LIST   comma-separated transports (default: all)\n"
		"  -p, --pattern P        pingpong, stream, all (the two) or create\n"
		"                         (default: all; create needs --socket)\n"
		"  -s, --sizes LIST       message sizes in bytes, k/K and m/M suffixes\n"
		"                         (default: 8,64,1024,65536,1048576; at most 256M);\n"
		"                         create: the channels' capacities (ring bytes)\n"
		"  -n, --iterations N     round trips or messages per row (default: %llu);\n"
		"                         a row runs min(N, max(1000, 2G / size));\n"
		"                         create: operations per row (default: %llu)\n"
		"  -S, --socket PATH      also run the pinshm transports on channels created\n"
		"                         by pinshmd at PATH (rows NAME@pinshmd; \"\": the\n"
		"                         default socket), and allow --pattern create\n"
		"  -f, --format F         table, csv or json (default: table)\n"
		"  -c, --cpus A,B         the CPUs of the two sides (default: 0,1)\n"
		"  -r, --rounds R         run every transport of a size R times, in turn, with\n"
		"                         a cache line's round trip each round; report the\n"
		"                         medians over the rounds and of the per-round ratios\n"
		"  -P, --plot FILE        also draw the results into FILE (.png or .svg) with\n"
		"                         gnuplot, which must be in PATH; the data and the\n"
		"                         script go beside it (FILE's name, .dat and .gp)\n"
		"  -h, --help             print this help and exit\n"
		"  -V, --version          print the library version and exit\n"
		"\n"
		"Transports:\n",
		prog, DEFAULT_ITERATIONS, DEFAULT_CREATE_ITERATIONS);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "  %-20s %s\n", t[i].name, t[i].about);
	fprintf(f, "\nSee pinshm-perf(1).\n");
}

static int parse_u64(const char *s, uint64_t *out, int suffixes)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -EINVAL;
	if (suffixes && (*end == 'k' || *end == 'K' || *end == 'm' || *end == 'M')) {
		unsigned shift = (*end == 'k' || *end == 'K') ? 10 : 20;

		if (v > (UINT64_MAX >> shift))
			return -EINVAL;
		v <<= shift;
		end++;
	}
	if (*end != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

/* Add @t once; with --socket, a pinshm transport brings its twin NAME@pinshmd after it. */
static void add_transport(struct opts *o, const perf_transport_t *t)
{
	char twin[64];
	int dup = 0;

	for (size_t i = 0; i < o->ntr; i++)
		dup |= o->tr[i] == t;
	if (!dup && o->ntr < MAX_TRANSPORTS)
		o->tr[o->ntr++] = t;
	if (o->daemon && !(t->flags & PERF_DAEMON)) {
		const perf_transport_t *d;

		snprintf(twin, sizeof(twin), "%s%s", t->name, PERF_DAEMON_SUFFIX);
		d = perf_transport_find(twin);
		if (d != NULL)
			add_transport(o, d);
	}
}

/* After the options: whether NAME@pinshmd rows exist depends on --socket. */
static int parse_transports(struct opts *o, const char *list)
{
	char *copy = strdup(list), *save = NULL, *name;
	size_t n;
	const perf_transport_t *all = perf_transports(&n);
	int rc = 0;

	if (copy == NULL)
		return -ENOMEM;
	o->ntr = 0;
	for (name = strtok_r(copy, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
		const perf_transport_t *t = perf_transport_find(name);

		if (strcmp(name, "all") == 0) {
			for (size_t i = 0; i < n; i++)
				if (!(all[i].flags & PERF_DAEMON))
					add_transport(o, &all[i]);
			continue;
		}
		if (t == NULL) {
			fprintf(stderr, "%s: unknown transport '%s' (see --help)\n", prog, name);
			rc = -EINVAL;
			break;
		}
		if ((t->flags & PERF_DAEMON) && !o->daemon) {
			fprintf(stderr, "%s: transport '%s' needs --socket\n", prog, name);
			rc = -EINVAL;
			break;
		}
		add_transport(o, t);
	}
	free(copy);
	if (rc == 0 && o->ntr == 0) {
		fprintf(stderr, "%s: --transport: empty list\n", prog);
		rc = -EINVAL;
	}
	return rc;
}

static int parse_sizes(struct opts *o, const char *list)
{
	char *copy = strdup(list), *save = NULL, *item;
	int rc = 0;

	if (copy == NULL)
		return -ENOMEM;
	o->nsizes = 0;
	for (item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (parse_u64(item, &v, 1) < 0 || v > PERF_MAX_SIZE) {
			fprintf(stderr, "%s: --sizes: bad size '%s' (0 to 256M)\n", prog, item);
			rc = -EINVAL;
			break;
		}
		if (o->nsizes == MAX_SIZES) {
			fprintf(stderr, "%s: --sizes: at most %d sizes\n", prog, MAX_SIZES);
			rc = -EINVAL;
			break;
		}
		o->sizes[o->nsizes++] = (size_t)v;
	}
	free(copy);
	if (rc == 0 && o->nsizes == 0) {
		fprintf(stderr, "%s: --sizes: empty list\n", prog);
		rc = -EINVAL;
	}
	return rc;
}

static int parse_cpus(struct opts *o, const char *s)
{
	uint64_t a, b;
	char buf[64], *comma;
	cpu_set_t allowed;

	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	comma = strchr(buf, ',');
	if (comma == NULL)
		goto bad;
	*comma = '\0';
	if (parse_u64(buf, &a, 0) < 0 || parse_u64(comma + 1, &b, 0) < 0 || a >= CPU_SETSIZE ||
	    b >= CPU_SETSIZE)
		goto bad;
	if (a == b) {
		fprintf(stderr, "%s: --cpus: the two sides need two different CPUs\n", prog);
		return -EINVAL;
	}
	o->cpu[0] = (int)a;
	o->cpu[1] = (int)b;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
	    (!CPU_ISSET(o->cpu[0], &allowed) || !CPU_ISSET(o->cpu[1], &allowed))) {
		fprintf(stderr, "%s: --cpus: CPU %d or %d is not available to this process\n", prog, o->cpu[0],
			o->cpu[1]);
		return -EINVAL;
	}
	return 0;
bad:
	fprintf(stderr, "%s: --cpus: expected two CPU numbers, A,B\n", prog);
	return -EINVAL;
}

static int parse_pattern(struct opts *o, const char *s)
{
	if (strcmp(s, "pingpong") == 0)
		o->patterns = PERF_PINGPONG;
	else if (strcmp(s, "stream") == 0)
		o->patterns = PERF_STREAM;
	else if (strcmp(s, "all") == 0)
		o->patterns = PERF_PINGPONG | PERF_STREAM;
	else if (strcmp(s, "create") == 0)
		o->patterns = PERF_CREATE;
	else {
		fprintf(stderr, "%s: --pattern: expected pingpong, stream, all or create\n", prog);
		return -EINVAL;
	}
	return 0;
}

/* Option @p c with argument @p arg.  @return -1 to go on, else the exit status. */
static int parse_option(struct opts *o, int c, const char *arg, const char **tr_list)
{
	uint64_t v;

	switch (c) {
	case 't': *tr_list = arg; break;
	case 'S':
		o->daemon = 1;
		o->socket = *arg ? arg : NULL;
		break;
	case 'p': return parse_pattern(o, arg) < 0 ? 2 : -1;
	case 's': return parse_sizes(o, arg) < 0 ? 2 : -1;
	case 'n':
		if (parse_u64(arg, &o->iterations, 0) < 0 || o->iterations == 0 || o->iterations > MAX_ITERATIONS) {
			fprintf(stderr, "%s: --iterations: expected 1 to %llu\n", prog, MAX_ITERATIONS);
			return 2;
		}
		o->iterations_set = 1;
		break;
	case 'f':
		if (perf_format_parse(arg, &o->fmt) < 0) {
			fprintf(stderr, "%s: --format: expected table, csv or json\n", prog);
			return 2;
		}
		break;
	case 'c': return parse_cpus(o, arg) < 0 ? 2 : -1;
	case 'P': o->plot = arg; break;
	case 'r':
		if (parse_u64(arg, &v, 0) < 0 || v == 0 || v > PERF_MAX_ROUNDS) {
			fprintf(stderr, "%s: --rounds: expected 1 to %d\n", prog, PERF_MAX_ROUNDS);
			return 2;
		}
		o->rounds = (unsigned)v;
		break;
	case 'h': usage(stdout); return 0;
	case 'V': printf("%s (libpinshm) %s\n", prog, pinshm_version()); return 0;
	default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
	}
	return -1;
}

/* The options that do not go together.  @return 0, or -EINVAL, said. */
static int check_combinations(const struct opts *o)
{
	const char *why = NULL;

	if ((o->patterns & PERF_CREATE) && !o->daemon)
		why = "--pattern create needs --socket";
	else if (o->rounds && o->patterns == PERF_CREATE)
		why = "--rounds: not with --pattern create";
	else if (o->plot != NULL && o->patterns == PERF_CREATE)
		why = "--plot: the create pattern has no plot (ping-pong and stream have)";
	if (why)
		fprintf(stderr, "%s: %s\n", prog, why);
	return why ? -EINVAL : 0;
}

int perf_parse_options(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "transport", required_argument, NULL, 't' }, { "pattern", required_argument, NULL, 'p' },
		{ "sizes", required_argument, NULL, 's' },     { "iterations", required_argument, NULL, 'n' },
		{ "format", required_argument, NULL, 'f' },    { "cpus", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 'S' },    { "plot", required_argument, NULL, 'P' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },            { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tr_list = "all";
	int c, rc;

	if (parse_sizes(o, "8,64,1024,65536,1048576") < 0)
		return 2;
	o->patterns = PERF_PINGPONG | PERF_STREAM;
	o->iterations = DEFAULT_ITERATIONS;
	o->fmt = PERF_FMT_TABLE;
	o->cpu[0] = 0;
	o->cpu[1] = 1;
	while ((c = getopt_long(argc, argv, "t:p:s:n:f:c:S:P:r:hV", longopts, NULL)) != -1)
		if ((rc = parse_option(o, c, optarg, &tr_list)) >= 0)
			return rc;
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\nTry '%s --help'.\n", prog, argv[optind], prog);
		return 2;
	}
	if (check_combinations(o) < 0)
		return 2;
	o->create_iterations = o->iterations_set ? o->iterations : DEFAULT_CREATE_ITERATIONS;
	if (parse_transports(o, tr_list) < 0)
		return 2;
	return -1; /* go on */
}
