/*
 * pinshmctl - look at and manage the channels of pinshmd.
 *
 * Uses only the public client API of libpinshm: one connection per run,
 * one or a few requests, then exit.  Exit status: 0 done, 1 a request
 * failed (the reason on stderr as "pinshmctl: WHAT: ERROR: DAEMON'S MESSAGE"),
 * 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pinshm.h>

#include "ctl_output.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

struct ctl {
	const char *socket; /* -s, or NULL: where libpinshm looks by default */
	bool json;
};

struct command {
	const char *name;
	int (*run)(struct ctl *o, int argc, char **argv);
	const char *args, *summary;
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Say what was wrong with the command line. @return EXIT_USAGE. */
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("pinshmctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'pinshmctl help'.\n", stderr);
	return EXIT_USAGE;
}

/* Report a failed request as "pinshmctl: WHAT[ NAME]: ERROR[: DETAIL]". @return EXIT_FAILED. */
static int request_failed(const char *what, const char *name, int rc, const char *detail)
{
	fprintf(stderr, "pinshmctl: %s", what);
	if (name)
		fprintf(stderr, " %.*s", PINSHM_NAME_MAX + 8, name);
	fprintf(stderr, ": %s", pinshm_strerror(rc));
	if (detail && detail[0])
		fprintf(stderr, ": %s", detail);
	fputc('\n', stderr);
	return EXIT_FAILED;
}

/* Connect, or report why not. @return 0 or EXIT_FAILED. */
static int ctl_connect(const struct ctl *o, pinshm_client_t **c)
{
	int rc = pinshm_connect(o->socket, c);

	return rc == 0 ? 0 : request_failed("connect", NULL, rc, pinshm_client_error(NULL));
}

/* A command's request is done (@p rc): report it where it failed, then disconnect. @return 0 or EXIT_FAILED. */
static int request_done(pinshm_client_t *c, const char *what, const char *name, int rc)
{
	if (rc != 0)
		request_failed(what, name, rc, pinshm_client_error(c));
	pinshm_disconnect(c);
	return rc == 0 ? 0 : EXIT_FAILED;
}

/* getopt_long over a command's own arguments (argv[0] is the command). */
static int next_option(int argc, char **argv, const struct option *longopts)
{
	int opt = getopt_long(argc, argv, ":", longopts, NULL);

	if (opt == '?')
		usage_error("%s: unknown option '%s'", argv[0], argv[optind - 1]);
	else if (opt == ':')
		usage_error("%s: option '%s' needs a value", argv[0], argv[optind - 1]);
	return opt;
}

static void start_options(void)
{
	optind = 0; /* glibc: start over, on a new argv */
	opterr = 0;
}

/* ---- ls, stat, status, clients ---------------------------------------- */

/* The options of a listing: --json only; its operands from optind on. @return 0 or EXIT_USAGE. */
static int json_option(struct ctl *o, int argc, char **argv)
{
	static const struct option longopts[] = {{"json", no_argument, NULL, 'j'}, {0}};
	int opt;

	start_options();
	while ((opt = next_option(argc, argv, longopts)) != -1) {
		if (opt != 'j')
			return EXIT_USAGE;
		o->json = true;
	}
	return 0;
}

/* The arguments of a listing of all: [--json] only. @return 0 or EXIT_USAGE. */
static int listing_options(struct ctl *o, int argc, char **argv)
{
	if (json_option(o, argc, argv) != 0)
		return EXIT_USAGE;
	if (optind != argc)
		return usage_error("%s: unexpected argument '%s'", argv[0], argv[optind]);
	return 0;
}

static int cmd_ls(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;
	pinshm_list_entry_t *e;
	size_t n;

	if (listing_options(o, argc, argv) != 0)
		return EXIT_USAGE;
	if (ctl_connect(o, &c) != 0 || request_done(c, "ls", NULL, pinshm_list(c, &e, &n)) != 0)
		return EXIT_FAILED;
	(o->json ? ctl_print_json : ctl_print_table)(stdout, e, n);
	free(e);
	return 0;
}

static int cmd_stat(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;
	pinshm_list_entry_t e;

	if (json_option(o, argc, argv) != 0)
		return EXIT_USAGE;
	if (optind + 1 != argc)
		return optind == argc ? usage_error("stat: which channel? (stat NAME)")
				      : usage_error("stat: unexpected argument '%s'", argv[optind + 1]);
	const char *name = argv[optind];
	if (ctl_connect(o, &c) != 0 || request_done(c, "stat", name, pinshm_stat(c, name, &e)) != 0)
		return EXIT_FAILED;
	(o->json ? ctl_print_stat_json : ctl_print_stat)(stdout, &e);
	return 0;
}

static int cmd_status(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;
	pinshm_status_t st;
	pinshm_pool_t pool;
	pinshm_user_usage_t *u;
	size_t n;

	if (listing_options(o, argc, argv) != 0)
		return EXIT_USAGE;
	if (ctl_connect(o, &c) != 0 ||
	    request_done(c, "status", NULL, pinshm_status_pool(c, &st, &pool, &u, &n)) != 0)
		return EXIT_FAILED;
	(o->json ? ctl_print_status_json : ctl_print_status)(stdout, &st, &pool, u, n);
	free(u);
	return 0;
}

static int cmd_clients(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;
	pinshm_client_info_t *e;
	size_t n;

	if (listing_options(o, argc, argv) != 0)
		return EXIT_USAGE;
	if (ctl_connect(o, &c) != 0 || request_done(c, "clients", NULL, pinshm_clients(c, &e, &n)) != 0)
		return EXIT_FAILED;
	(o->json ? ctl_print_clients_json : ctl_print_clients)(stdout, e, n);
	free(e);
	return 0;
}

/* ---- create ------------------------------------------------------------ */

/* Parse a count of endpoints: decimal, in [1, max]. */
static bool parse_count(const char *s, unsigned max, uint32_t *out)
{
	unsigned long v = 0;

	if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 6)
		return false;
	v = strtoul(s, NULL, 10);
	if (v < 1 || v > max)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Parse permission bits: octal digits, 0..0777. */
static bool parse_mode(const char *s, unsigned *out)
{
	char *end;

	if (!*s || strspn(s, "01234567") != strlen(s))
		return false;
	errno = 0;
	unsigned long v = strtoul(s, &end, 8);
	if (errno || v > 0777)
		return false;
	*out = (unsigned)v;
	return true;
}

/* Check the geometry before asking, to say which part is wrong. */
static int check_geometry(const pinshm_channel_attr_t *a)
{
	size_t size;

	if ((a->flags & PINSHM_OVERRUN) && a->kind != PINSHM_TOPIC)
		return usage_error("create: --overrun applies to topics only (add --topic)");
	if (a->capacity < PINSHM_MIN_CAPACITY || a->capacity > PINSHM_MAX_CAPACITY ||
	    (a->capacity & (a->capacity - 1)) != 0)
		return usage_error("create: --capacity must be a power of two from %uk to %llug",
				   PINSHM_MIN_CAPACITY / 1024, PINSHM_MAX_CAPACITY >> 30);
	if (a->max_message > a->capacity / 2 - 32)
		return usage_error("create: --max-message must be at most capacity / 2 - 32 = %" PRIu64,
				   a->capacity / 2 - 32);
	if (pinshm_segment_size(a, &size) != 0)
		return usage_error("create: invalid channel geometry");
	return 0;
}

/* --node: a node number, any, local (the creator's) or consumer (the first consumer's). */
static bool parse_node(const char *s, int *node)
{
	static const struct {
		const char *word;
		int node;
	} words[] = {{"any", PINSHM_NODE_ANY}, {"local", PINSHM_NODE_LOCAL}, {"consumer", PINSHM_NODE_CONSUMER}};
	char *end;

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcmp(s, words[i].word) == 0) {
			*node = words[i].node;
			return true;
		}
	errno = 0;
	unsigned long n = strtoul(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || errno || *end || n > 1023) /* libnuma's most nodes */
		return false;
	*node = (int)n;
	return true;
}

static int cmd_create(struct ctl *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"topic", no_argument, NULL, 't'},           {"overrun", no_argument, NULL, 'o'},
		{"capacity", required_argument, NULL, 'c'},  {"max-message", required_argument, NULL, 'm'},
		{"producers", required_argument, NULL, 'P'}, {"consumers", required_argument, NULL, 'C'},
		{"mode", required_argument, NULL, 'M'},      {"backend", required_argument, NULL, 'B'},
		{"pin", required_argument, NULL, 'p'},       {"node", required_argument, NULL, 'N'},
		{"pci", required_argument, NULL, 'D'},       {0}};
	pinshm_channel_attr_t attr;
	unsigned mode = 0600, backend = 0;
	uint32_t pin_idle = PINSHM_PIN_DEFAULT;
	int node = PINSHM_NODE_ANY;
	const char *pci = NULL;
	uint64_t v;
	int opt;

	pinshm_channel_attr_init(&attr);
	start_options();
	while ((opt = next_option(argc, argv, longopts)) != -1) {
		switch (opt) {
		case 't': attr.kind = PINSHM_TOPIC; break;
		case 'o': attr.flags |= PINSHM_OVERRUN; break;
		case 'c':
			if (ctl_parse_size(optarg, &v) != 0)
				return usage_error("create: bad --capacity '%s' (a size: 65536, 64k, 1m)", optarg);
			attr.capacity = v;
			break;
		case 'm':
			if (ctl_parse_size(optarg, &v) != 0 || v > UINT32_MAX)
				return usage_error("create: bad --max-message '%s' (a size: 1024, 4k)", optarg);
			attr.max_message = (uint32_t)v;
			break;
		case 'P':
			if (!parse_count(optarg, PINSHM_MAX_PRODUCERS, &attr.max_producers))
				return usage_error("create: --producers must be from 1 to %u", PINSHM_MAX_PRODUCERS);
			break;
		case 'C':
			if (!parse_count(optarg, PINSHM_MAX_CONSUMERS, &attr.max_consumers))
				return usage_error("create: --consumers must be from 1 to %u", PINSHM_MAX_CONSUMERS);
			break;
		case 'M':
			if (!parse_mode(optarg, &mode))
				return usage_error("create: --mode must be octal permission bits, 0 to 0777");
			break;
		case 'B':
			if (strcmp(optarg, "memfd") == 0)
				backend = PINSHM_USE_MEMFD;
			else if (strcmp(optarg, "shm") == 0)
				backend = PINSHM_USE_SHM;
			else if (strcmp(optarg, "auto") == 0)
				backend = 0;
			else
				return usage_error("create: --backend must be auto, memfd or shm");
			break;
		case 'p':
			if (strcmp(optarg, "always") == 0) {
				pin_idle = PINSHM_PIN_ALWAYS;
			} else {
				char *end;
				errno = 0;
				unsigned long n = strtoul(optarg, &end, 10);
				if (optarg[0] < '0' || optarg[0] > '9' || errno || *end || n < 1 || n > PINSHM_PIN_IDLE_MAX)
					return usage_error("create: --pin must be always or seconds, 1 to %u",
							   PINSHM_PIN_IDLE_MAX);
				pin_idle = (uint32_t)n;
			}
			break;
		case 'N':
			if (!parse_node(optarg, &node))
				return usage_error("create: --node must be a node number, any, local or consumer");
			break;
		case 'D': pci = optarg; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind + 1 != argc)
		return optind == argc ? usage_error("create: which channel? (create NAME [OPTION]...)")
				      : usage_error("create: unexpected argument '%s'", argv[optind + 1]);
	const char *name = argv[optind];
	int rc = check_geometry(&attr);
	if (rc != 0)
		return rc;
	if (pci && node != PINSHM_NODE_ANY)
		return usage_error("create: --node or --pci, not both");

	pinshm_client_t *c;
	if (ctl_connect(o, &c) != 0)
		return EXIT_FAILED;
	/* Persistent: the channel outlives this command, until `rm`. */
	rc = pci ? pinshm_create_near_pci(c, name, &attr, (mode_t)mode, PINSHM_PERSISTENT | backend, pci, pin_idle)
		 : pinshm_create_full(c, name, &attr, (mode_t)mode, PINSHM_PERSISTENT | backend, node, pin_idle);
	if (rc == 0 && pinshm_client_error(c)[0]) /* a warning, such as "created unpinned" */
		fprintf(stderr, "pinshmctl: create %.*s: pinshmd says: %s\n", PINSHM_NAME_MAX + 8, name,
			pinshm_client_error(c));
	return request_done(c, "create", name, rc);
}

/* ---- rm, shutdown ------------------------------------------------------ */

static int cmd_rm(struct ctl *o, int argc, char **argv)
{
	static const struct option longopts[] = {{0}};
	pinshm_client_t *c;
	int status = 0;

	start_options();
	if (next_option(argc, argv, longopts) != -1)
		return EXIT_USAGE;
	if (optind == argc)
		return usage_error("rm: which channel? (rm NAME...)");
	if (ctl_connect(o, &c) != 0)
		return EXIT_FAILED;
	for (int i = optind; i < argc; i++) {
		int rc = pinshm_unlink(c, argv[i]);
		if (rc != 0)
			status = request_failed("rm", argv[i], rc, pinshm_client_error(c));
	}
	pinshm_disconnect(c);
	return status;
}

static int cmd_shutdown(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;

	if (argc > 1)
		return usage_error("shutdown: unexpected argument '%s'", argv[1]);
	if (ctl_connect(o, &c) != 0)
		return EXIT_FAILED;
	return request_done(c, "shutdown", NULL, pinshm_daemon_shutdown(c));
}

/* ---- version, help ----------------------------------------------------- */

static int cmd_version(struct ctl *o, int argc, char **argv)
{
	pinshm_client_t *c;

	if (argc > 1)
		return usage_error("version: unexpected argument '%s'", argv[1]);
	/* Connecting succeeds only with a daemon of our protocol version. */
	int rc = pinshm_connect(o->socket, &c);
	const char *why = rc == 0 ? "" : pinshm_client_error(NULL)[0] ? pinshm_client_error(NULL) : pinshm_strerror(rc);
	if (o->json) {
		printf("{\n  \"pinshmctl\": \"%d.%d.%d\",\n  \"library\": ", PINSHM_VERSION_MAJOR, PINSHM_VERSION_MINOR,
		       PINSHM_VERSION_PATCH);
		ctl_json_string(stdout, pinshm_version());
		printf(",\n  \"protocol\": %d,\n  \"layout\": %d,\n  \"daemon\": {\"reachable\": %s", PINSHM_PROTOCOL_VERSION,
		       PINSHM_LAYOUT_VERSION, rc == 0 ? "true" : "false");
		if (rc == 0) {
			printf(", \"protocol\": %d}\n}\n", PINSHM_PROTOCOL_VERSION);
		} else {
			fputs(", \"error\": ", stdout);
			ctl_json_string(stdout, why);
			fputs("}\n}\n", stdout);
		}
	} else {
		printf("pinshmctl %d.%d.%d\n", PINSHM_VERSION_MAJOR, PINSHM_VERSION_MINOR, PINSHM_VERSION_PATCH);
		printf("library   %s\nprotocol  %d\nlayout    %d\n", pinshm_version(), PINSHM_PROTOCOL_VERSION,
		       PINSHM_LAYOUT_VERSION);
		if (rc == 0)
			printf("daemon    reachable, protocol %d\n", PINSHM_PROTOCOL_VERSION);
		else
			printf("daemon    not reachable: %s\n", why);
	}
	pinshm_disconnect(c);
	return 0;
}

static void usage(FILE *to);

static int cmd_help(struct ctl *o, int argc, char **argv)
{
	(void)o, (void)argc, (void)argv;
	usage(stdout);
	return 0;
}

static const struct command commands[] = {
	{"ls", cmd_ls, "[--json]",
	 "list the channels: name, kind, owner, group, mode, backend, size, pinned, sealed, persistent,\n"
	 "      endpoints"},
	{"stat", cmd_stat, "NAME [--json]", "one channel in full: the fields of ls, one a line"},
	{"status", cmd_status, "[--json]",
	 "the daemon's figures: pid, uptime, pinned bytes of the budget, its pool of ready segments\n"
	 "      (per size class), channels, connections; per user"},
	{"clients", cmd_clients, "[--json]",
	 "list the connections: id, pid, user, group, channels and endpoints held (pinshmctl's own included)"},
	{"create", cmd_create,
	 "NAME [--topic [--overrun]] [--capacity SIZE] [--max-message SIZE]\n"
	 "         [--producers N] [--consumers N] [--mode OCTAL] [--backend auto|memfd|shm]\n"
	 "         [--pin always|SECONDS] [--node N|any|local|consumer] [--pci BUS]",
	 "create a channel (default: a queue, 1m per producer, 4 producers, 1 consumer, mode 0600,\n"
	 "      the daemon's default backend)"},
	{"rm", cmd_rm, "NAME...", "remove channel names (users that opened them keep them)"},
	{"shutdown", cmd_shutdown, "", "stop the daemon (mapped channels keep working)"},
	{"version", cmd_version, "", "print the library, protocol and layout versions; whether the daemon answers"},
	{"help", cmd_help, "", "print this help"},
	{NULL, NULL, NULL, NULL},
};

static void usage(FILE *to)
{
	fputs("usage: pinshmctl [-s SOCKET] [--json] COMMAND [ARG]...\n"
	      "  -s, --socket SOCKET  the daemon's socket (default: $PINSHM_SOCKET, then the\n"
	      "                       user-mode socket, then /run/pinshm/socket)\n"
	      "  -j, --json           print listings as JSON\n"
	      "  -h, --help           print this help\n"
	      "  -V, --version        same as the version command\n"
	      "commands:\n",
	      to);
	for (const struct command *cmd = commands; cmd->name; cmd++)
		fprintf(to, "  %s%s%s\n      %s\n", cmd->name, cmd->args[0] ? " " : "", cmd->args, cmd->summary);
	fputs("sizes take a k, m or g suffix (powers of 1024).\n"
	      "exit status: 0 done, 1 a request failed, 2 bad usage.  See pinshmctl(1).\n",
	      to);
}

static const struct command *find_command(const char *name)
{
	for (const struct command *cmd = commands; cmd->name; cmd++)
		if (strcmp(cmd->name, name) == 0)
			return cmd;
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
		{0}};
	struct ctl o = {0};
	bool version = false;
	int opt;

	opterr = 0;
	/* '+': stop at the command, whose options are its own. */
	while ((opt = getopt_long(argc, argv, "+:s:jhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o.socket = optarg; break;
		case 'j': o.json = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': version = true; break;
		case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
		default: return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (version)
		return cmd_version(&o, 1, (char *[]){"version", NULL});
	if (optind == argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const struct command *cmd = find_command(argv[optind]);
	if (!cmd)
		return usage_error("unknown command '%s'", argv[optind]);
	return cmd->run(&o, argc - optind, argv + optind);
}
