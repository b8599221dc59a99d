/*
 * check_pinshmctl.c - pinshmctl, end to end, and its output module.
 *
 * The "commands" and "errors" tests start a real pinshmd --user in the
 * foreground on a socket in a fresh folder under /tmp (the one just built:
 * $PINSHMD), run the pinshmctl just built ($PINSHMCTL) against it, and check
 * its exit status, its output and what the daemon then lists.  The daemon
 * dies with the test process (PR_SET_PDEATHSIG).  The "output" tests call
 * the table/JSON module directly.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl_output.h"
#include "daemonutil.h"
#include "pinshm.h"
#include "testutil.h"

#define STOP_MS 10000 /* for it to exit */
#define RUN_MS 20000  /* for one pinshmctl run */

static const char *env_path(const char *var, const char *fallback)
{
	const char *p = getenv(var);

	return p && p[0] ? p : fallback;
}

/* pinshmd --user -f -s DIR/sock; wait until it accepts. */
static void ctl_daemon_start(struct daemon *d)
{
	struct daemon_opts o = {.tmpl = "/tmp/pinshmctl-check-XXXXXX"};

	daemon_start_opts(d, &o);
}

/* ======================================================================== */
/* running pinshmctl                                                         */
/* ======================================================================== */

struct run {
	int status; /* exit status */
	char out[32768];
	char err[4096];
};

static void read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	for (;;) {
		ssize_t r = read(fd, buf + n, len - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
}

/*
 * Run pinshmctl with @p args (NULL-terminated), its output into files in
 * @p dir; fail the test if it does not exit in time or is killed.
 */
static void ctl_runv(const char *dir, struct run *r, const char *const *args)
{
	char out[160], err[160], buf[32];
	const char *argv[32];
	int n = 0, st;

	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	argv[n++] = "pinshmctl";
	for (; *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int efd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (ofd < 0 || efd < 0 || dup2(ofd, 1) < 0 || dup2(efd, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(env_path("PINSHMCTL", "clients/pinshmctl"), (char *const *)argv);
		fprintf(stderr, "exec pinshmctl: %s\n", strerror(errno));
		_exit(127);
	}
	uint64_t deadline = tu_now_ms() + RUN_MS;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (tu_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("pinshmctl %s did not exit in %d ms", argv[1], RUN_MS);
		}
		tu_sleep_ms(2);
	}
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) < 126, "pinshmctl %s: %s", argv[1],
		      tu_status_str(st, buf, sizeof(buf)));
	r->status = WEXITSTATUS(st);
	read_file(out, r->out, sizeof(r->out));
	read_file(err, r->err, sizeof(r->err));
}

/* Run "pinshmctl -s SOCK ARGS..." and fail the test unless it exits @p want. */
#define CTL(d, r, want, ...)                                                                                  \
	do {                                                                                                  \
		ctl_runv((d)->dir, (r), (const char *const[]){"-s", (d)->sock, __VA_ARGS__, NULL});           \
		ck_assert_msg((r)->status == (want), "pinshmctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", \
			      #__VA_ARGS__, (r)->status, (want), (r)->out, (r)->err);                         \
	} while (0)

#define HAS(text, s) ck_assert_msg(strstr((text), (s)) != NULL, "'%s' not in:\n%s", (s), (text))
#define HAS_NOT(text, s) ck_assert_msg(strstr((text), (s)) == NULL, "'%s' in:\n%s", (s), (text))

/* The line of a table that starts with "@p name ". */
static const char *table_line(const char *table, const char *name, char *line, size_t len)
{
	size_t nl = strlen(name);

	for (const char *p = table; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, name, nl) == 0 && p[nl] == ' ') {
			size_t n = strcspn(p, "\n");
			snprintf(line, len, "%.*s", (int)n, p);
			return line;
		}
	return NULL;
}

/* ======================================================================== */
/* a minimal JSON checker: the whole text is one valid JSON value            */
/* ======================================================================== */

static const char *json_value(const char *p);

static const char *json_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

static const char *json_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	while (*p != '"') {
		if ((unsigned char)*p < 0x20)
			return NULL;
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
		p++;
	}
	return p + 1;
}

static const char *json_list(const char *p, char close, bool members)
{
	p = json_ws(p + 1);
	if (*p == close)
		return p + 1;
	for (;;) {
		if (members) {
			p = json_string(json_ws(p));
			if (!p || *(p = json_ws(p)) != ':')
				return NULL;
			p++;
		}
		p = json_value(p);
		if (!p)
			return NULL;
		p = json_ws(p);
		if (*p == close)
			return p + 1;
		if (*p++ != ',')
			return NULL;
	}
}

static const char *json_value(const char *p)
{
	p = json_ws(p);
	if (*p == '{')
		return json_list(p, '}', true);
	if (*p == '[')
		return json_list(p, ']', false);
	if (*p == '"')
		return json_string(p);
	for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
		if (strncmp(p, *w, strlen(*w)) == 0)
			return p + strlen(*w);
	const char *start = p;
	if (*p == '-')
		p++;
	p += strspn(p, "0123456789");
	if (*p == '.')
		p += 1 + strspn(p + 1, "0123456789");
	return p > start && p[-1] >= '0' && p[-1] <= '9' ? p : NULL;
}

static bool json_valid(const char *text)
{
	const char *end = json_value(text);

	return end && *json_ws(end) == '\0';
}

/* ======================================================================== */
/* output                                                                    */
/* ======================================================================== */

START_TEST(test_parse_size)
{
	uint64_t v;

	TU_RC(ctl_parse_size("4096", &v), 0);
	ck_assert_uint_eq(v, 4096);
	TU_RC(ctl_parse_size("64k", &v), 0);
	ck_assert_uint_eq(v, 65536);
	TU_RC(ctl_parse_size("2M", &v), 0);
	ck_assert_uint_eq(v, 2u << 20);
	TU_RC(ctl_parse_size("4g", &v), 0);
	ck_assert_uint_eq(v, 4ull << 30);
	TU_RC(ctl_parse_size("", &v), -EINVAL);
	TU_RC(ctl_parse_size("k", &v), -EINVAL);
	TU_RC(ctl_parse_size("-1", &v), -EINVAL);
	TU_RC(ctl_parse_size("1kb", &v), -EINVAL);
	TU_RC(ctl_parse_size("1t", &v), -EINVAL);
	TU_RC(ctl_parse_size("0x10", &v), -EINVAL);
	TU_RC(ctl_parse_size("18446744073709551616", &v), -ERANGE);
	TU_RC(ctl_parse_size("17179869184g", &v), -ERANGE);
}
END_TEST

START_TEST(test_mode_size_strings)
{
	char buf[32];

	ctl_mode_string(0640, buf);
	ck_assert_str_eq(buf, "rw-r-----");
	ctl_mode_string(0777, buf);
	ck_assert_str_eq(buf, "rwxrwxrwx");
	ctl_mode_string(0, buf);
	ck_assert_str_eq(buf, "---------");
	ctl_size_string(512, buf, sizeof(buf));
	ck_assert_str_eq(buf, "512");
	ctl_size_string(65536, buf, sizeof(buf));
	ck_assert_str_eq(buf, "64K");
	ctl_size_string(1536 * 1024, buf, sizeof(buf));
	ck_assert_str_eq(buf, "1.5M");
	ctl_size_string(3ull << 30, buf, sizeof(buf));
	ck_assert_str_eq(buf, "3G");
}
END_TEST

/* ctl_json_string(@p in) into @p buf. */
static void json_of(const char *in, char *buf, size_t len)
{
	FILE *f = fmemopen(buf, len, "w");

	ck_assert_ptr_nonnull(f);
	ctl_json_string(f, in);
	fclose(f);
}

START_TEST(test_json_string)
{
	char buf[128];

	json_of("plain-name.1", buf, sizeof(buf));
	ck_assert_str_eq(buf, "\"plain-name.1\"");
	json_of("a\"b\\c", buf, sizeof(buf));
	ck_assert_str_eq(buf, "\"a\\\"b\\\\c\"");
	json_of("tab\there\nnl\x01\x7f", buf, sizeof(buf));
	ck_assert_str_eq(buf, "\"tab\\u0009here\\u000anl\\u0001\\u007f\"");
	json_of("caf\xc3\xa9 \xe2\x82\xac", buf, sizeof(buf)); /* valid UTF-8 stays */
	ck_assert_str_eq(buf, "\"caf\xc3\xa9 \xe2\x82\xac\"");
	json_of("bad\xff\xc3(\xed\xa0\x80", buf, sizeof(buf)); /* invalid bytes, a surrogate */
	ck_assert_str_eq(buf, "\"bad\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffd\"");
	ck_assert(json_valid(buf));
}
END_TEST

START_TEST(test_json_list)
{
	pinshm_list_entry_t e[2] = {
		{.name = "q", .kind = PINSHM_QUEUE, .capacity = 65536, .max_producers = 2, .max_consumers = 1,
		 .state = PINSHM_LIST_PINNED, .uid = 4000000001u, .gid = 4000000001u, .mode = 0640, .size = 200000},
		{.name = "t", .kind = PINSHM_TOPIC, .flags = PINSHM_OVERRUN, .capacity = 4096, .max_producers = 1,
		 .max_consumers = 3, .state = PINSHM_LIST_SEALED | PINSHM_LIST_PERSISTENT, .mode = 0600,
		 .backend = PINSHM_BACKEND_SHM},
	};
	char buf[4096];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	ctl_print_json(f, e, 2);
	fclose(f);
	ck_assert_msg(json_valid(buf), "invalid JSON:\n%s", buf);
	HAS(buf, "\"owner\": \"4000000001\""); /* no such user: the number */
	HAS(buf, "\"mode\": \"0640\"");
	HAS(buf, "\"permissions\": \"rw-r-----\"");
	HAS(buf, "\"overrun\": true");
	HAS(buf, "\"backend\": \"?\""); /* a value this version does not know */
	HAS(buf, "\"backend\": \"shm\"");
	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_json(f, e, 0);
	fclose(f);
	ck_assert_str_eq(buf, "[]\n");
}
END_TEST

/* ======================================================================== */
/* commands                                                                  */
/* ======================================================================== */

START_TEST(test_create_ls_rm)
{
	struct daemon d;
	struct run r;
	char line[512], mode[10];

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "ls");
	HAS(r.out, "NAME");
	HAS_NOT(r.out, "q1");

	CTL(&d, &r, 0, "create", "q1", "--capacity", "64k", "--producers", "2", "--consumers", "3",
	    "--mode", "640");
	ck_assert_str_eq(r.out, "");
	CTL(&d, &r, 0, "create", "--topic", "--overrun", "t.1", "--max-message", "1k", "--mode",
	    "0604", "--backend", "shm");
	CTL(&d, &r, 2, "create", "bad-backend", "--backend", "tmpfs");
	HAS(r.err, "--backend must be auto, memfd or shm");
	CTL(&d, &r, 0, "ls");
	HAS(r.out, "BACKEND");
	ck_assert_ptr_nonnull(table_line(r.out, "q1", line, sizeof(line)));
	HAS(line, " memfd ");
	HAS(line, "queue");
	HAS(line, "rw-r-----");
	HAS(line, "0/2");
	HAS(line, "0/3");
	ck_assert_ptr_nonnull(table_line(r.out, "t.1", line, sizeof(line)));
	HAS(line, "topic,overrun");
	HAS(line, " shm ");
	ctl_mode_string(0604, mode);
	HAS(line, mode);

	/* What the daemon holds is what was asked for. */
	pinshm_client_t *c;
	pinshm_list_entry_t *e;
	size_t n;
	TU_RC(pinshm_connect(d.sock, &c), 0);
	TU_RC(pinshm_list(c, &e, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(e[0].name, "q1");
	ck_assert_uint_eq(e[0].kind, PINSHM_QUEUE);
	ck_assert_uint_eq(e[0].capacity, 65536);
	ck_assert_uint_eq(e[0].max_producers, 2);
	ck_assert_uint_eq(e[0].max_consumers, 3);
	ck_assert_uint_eq(e[0].mode, 0640);
	ck_assert_uint_eq(e[0].uid, geteuid());
	ck_assert(e[0].state & PINSHM_LIST_PERSISTENT);
	ck_assert_str_eq(e[1].name, "t.1");
	ck_assert_uint_eq(e[1].kind, PINSHM_TOPIC);
	ck_assert_uint_eq(e[1].flags, PINSHM_OVERRUN);
	ck_assert_uint_eq(e[1].max_message, 1024);
	ck_assert_uint_eq(e[0].backend, PINSHM_BACKEND_MEMFD);
	ck_assert_uint_eq(e[1].backend, PINSHM_BACKEND_SHM);
	free(e);

	/* Attached endpoints show up. */
	pinshm_channel_t *ch;
	TU_RC(pinshm_open(c, "q1", PINSHM_CONSUMER, &ch), 0);
	CTL(&d, &r, 0, "ls");
	ck_assert_ptr_nonnull(table_line(r.out, "q1", line, sizeof(line)));
	HAS(line, "1/3");
	pinshm_channel_close(ch);
	pinshm_disconnect(c);

	CTL(&d, &r, 0, "rm", "q1");
	ck_assert_str_eq(r.out, "");
	CTL(&d, &r, 0, "ls");
	ck_assert_ptr_null(table_line(r.out, "q1", line, sizeof(line)));
	ck_assert_ptr_nonnull(table_line(r.out, "t.1", line, sizeof(line)));
	CTL(&d, &r, 0, "rm", "t.1");
	daemon_stop(&d);
}
END_TEST

START_TEST(test_ls_json)
{
	struct daemon d;
	struct run r;

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "ls", "--json");
	ck_assert_str_eq(r.out, "[]\n");
	CTL(&d, &r, 0, "create", "js-a", "--capacity", "8k", "--mode", "600", "--backend", "memfd");
	CTL(&d, &r, 0, "create", "js_b", "--topic", "--consumers", "4");
	CTL(&d, &r, 0, "ls", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	HAS(r.out, "\"name\": \"js-a\"");
	HAS(r.out, "\"name\": \"js_b\"");
	HAS(r.out, "\"kind\": \"topic\"");
	HAS(r.out, "\"capacity\": 8192");
	HAS(r.out, "\"mode\": \"0600\"");
	HAS(r.out, "\"persistent\": true");
	HAS(r.out, "\"max_consumers\": 4");
	HAS(r.out, "\"backend\": \"memfd\"");
	HAS(r.out, "\"damaged\": false");
	static const char *const fields[] = {"owner", "group", "uid", "gid", "permissions", "size", "pinned",
					     "sealed", "producers", "consumers", "max_message", "overrun",
					     "messages", "bytes", "lost", "refused", "drops"};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		char key[32];
		snprintf(key, sizeof(key), "\"%s\": ", fields[i]);
		HAS(r.out, key);
	}
	/* --json before the command means the same. */
	struct run g;
	CTL(&d, &g, 0, "--json", "ls");
	ck_assert_str_eq(g.out, r.out);
	daemon_stop(&d);
}
END_TEST

/* stat NAME: one channel in full, as a table of lines or a JSON object. */
START_TEST(test_stat)
{
	struct daemon d;
	struct run r;

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "create", "st.q", "--capacity", "64k", "--producers", "2", "--mode", "0640", "--backend",
	    "shm", "--pin", "300");
	CTL(&d, &r, 0, "create", "st.a", "--pin", "always");
	CTL(&d, &r, 2, "create", "st.b", "--pin", "0");
	HAS(r.err, "--pin must be always or seconds");
	CTL(&d, &r, 2, "create", "st.b", "--pin", "5s");
	CTL(&d, &r, 0, "stat", "st.a");
	HAS(r.out, "pin_policy   always\n");
	CTL(&d, &r, 0, "stat", "st.q");
	HAS(r.out, "name         st.q\n");
	HAS(r.out, "kind         queue\n");
	HAS(r.out, "mode         rw-r----- (0640)\n");
	HAS(r.out, "backend      shm\n");
	HAS(r.out, "capacity     64K per producer\n");
	HAS(r.out, "persistent   yes\n");
	HAS(r.out, "pin_policy   unlocked after 300 s unused\n");
	HAS(r.out, "damaged      no\n");
	HAS(r.out, "producers    0/2\n");
	HAS(r.out, "messages     0\n");
	HAS(r.out, "drops        0 (lost 0, refused 0)\n");

	/* Statistics: what the daemon sums from the segment. */
	pinshm_client_t *c;
	pinshm_channel_t *tx;
	char ten[10] = {0};
	TU_RC(pinshm_connect(d.sock, &c), 0);
	TU_RC(pinshm_open(c, "st.q", PINSHM_PRODUCER, &tx), 0);
	for (int i = 0; i < 3; i++)
		TU_RC(pinshm_send(tx, ten, sizeof(ten), 1000), 0);
	CTL(&d, &r, 0, "stat", "st.q");
	HAS(r.out, "messages     3\n");
	HAS(r.out, "bytes        30\n");
	CTL(&d, &r, 0, "ls");
	HAS(r.out, "MESSAGES");
	HAS(r.out, "DROPS");
	CTL(&d, &r, 0, "stat", "--json", "st.q");
	HAS(r.out, "\"messages\": 3");
	HAS(r.out, "\"bytes\": 30");
	HAS(r.out, "\"drops\": 0");
	HAS(r.out, "\"pin_idle\": 300");
	HAS(r.out, "\"unlocked\": false");
	pinshm_channel_close(tx);
	pinshm_disconnect(c);
	CTL(&d, &r, 0, "stat", "--json", "st.q");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_msg(r.out[0] == '{', "not an object:\n%s", r.out);
	HAS(r.out, "\"name\": \"st.q\"");
	HAS(r.out, "\"backend\": \"shm\"");
	HAS(r.out, "\"max_producers\": 2");
	CTL(&d, &r, 1, "stat", "st.none");
	HAS(r.err, "no channel 'st.none'");
	CTL(&d, &r, 2, "stat");
	CTL(&d, &r, 2, "stat", "st.q", "st.q");
	daemon_stop(&d);
}
END_TEST

/* --node: a node, none, or near the consumer: shown as "consumer" in stat,
 * ls and --json (node -3) until a consumer opens it, then on its node. */
START_TEST(test_create_node)
{
	struct daemon d;
	struct run r;

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "create", "nd.0", "--node", "0");
	CTL(&d, &r, 0, "create", "nd.any", "--node", "any");
	CTL(&d, &r, 0, "create", "nd.c", "--node", "consumer");
	CTL(&d, &r, 1, "create", "nd.9", "--node", "1023");
	HAS(r.err, "no NUMA node 1023");
	CTL(&d, &r, 0, "stat", "nd.0");
	HAS(r.out, "node         0\n");
	CTL(&d, &r, 0, "stat", "nd.any");
	HAS(r.out, "node         none\n");
	CTL(&d, &r, 0, "stat", "nd.c");
	HAS(r.out, "node         consumer (unplaced until a consumer opens it)\n");
	CTL(&d, &r, 0, "stat", "--json", "nd.c");
	HAS(r.out, "\"node\": -3");
	CTL(&d, &r, 0, "ls");
	HAS(r.out, "NODE");
	HAS(r.out, "consumer");

	pinshm_client_t *c;
	pinshm_channel_t *rx;
	TU_RC(pinshm_connect(d.sock, &c), 0);
	TU_RC(pinshm_open(c, "nd.c", PINSHM_CONSUMER, &rx), 0);
	CTL(&d, &r, 0, "stat", "nd.c"); /* on this process's node now */
	ck_assert_msg(strstr(r.out, "node         consumer") == NULL && strstr(r.out, "node         none") == NULL,
		      "not placed:\n%s", r.out);
	CTL(&d, &r, 0, "ls");
	ck_assert_msg(strstr(r.out, "consumer") == NULL, "still unplaced:\n%s", r.out);
	pinshm_channel_close(rx);
	pinshm_disconnect(c);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_create_persists)
{
	struct daemon d;
	struct run r;

	ctl_daemon_start(&d);
	/* The channel outlives pinshmctl's connection, until rm. */
	CTL(&d, &r, 0, "create", "kept");
	HAS_NOT(r.err, "persistent");
	CTL(&d, &r, 0, "ls", "--json");
	HAS(r.out, "\"kept\"");
	HAS(r.out, "\"persistent\": true");
	CTL(&d, &r, 0, "rm", "kept");
	CTL(&d, &r, 0, "ls", "--json");
	ck_assert_str_eq(r.out, "[]\n");
	daemon_stop(&d);
}
END_TEST

START_TEST(test_shutdown)
{
	struct daemon d;
	struct run r;
	char buf[32];

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "shutdown");
	int st = daemon_wait_exit(&d, STOP_MS);
	ck_assert_msg(st != -1, "pinshmd did not exit after shutdown");
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinshmd: %s", tu_status_str(st, buf, sizeof(buf)));
	/* Nobody answers now. */
	CTL(&d, &r, 1, "ls");
	HAS(r.err, "pinshmctl: connect: ");
	daemon_stop(&d);
}
END_TEST

START_TEST(test_version)
{
	struct daemon d;
	struct run r;
	char want[64];

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "version");
	snprintf(want, sizeof(want), "library   %s\n", pinshm_version());
	HAS(r.out, want);
	snprintf(want, sizeof(want), "protocol  %d\n", PINSHM_PROTOCOL_VERSION);
	HAS(r.out, want);
	snprintf(want, sizeof(want), "layout    %d\n", PINSHM_LAYOUT_VERSION);
	HAS(r.out, want);
	HAS(r.out, "daemon    reachable");
	CTL(&d, &r, 0, "--json", "version");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	HAS(r.out, "\"reachable\": true");

	/* No daemon there: still the versions, and why it does not answer. */
	char none[160];
	snprintf(none, sizeof(none), "%s/none", d.dir);
	ctl_runv(d.dir, &r, (const char *const[]){"-s", none, "version", NULL});
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "daemon    not reachable: ");
	ctl_runv(d.dir, &r, (const char *const[]){"-s", none, "--json", "version", NULL});
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	HAS(r.out, "\"reachable\": false");
	daemon_stop(&d);
}
END_TEST

/* ======================================================================== */
/* status, clients                                                           */
/* ======================================================================== */

/* The number after the first "KEY": that follows @p from in @p text. */
static uint64_t json_u64(const char *text, const char *from, const char *key)
{
	char pat[64];
	const char *p = from ? strstr(text, from) : text;

	ck_assert_msg(p != NULL, "'%s' not in:\n%s", from, text);
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(p, pat);
	ck_assert_msg(p != NULL, "'%s' not in:\n%s", pat, text);
	p += strlen(pat);
	ck_assert_msg(*p >= '0' && *p <= '9', "%s is not a number in:\n%s", pat, text);
	return strtoull(p, NULL, 10);
}

/* What the daemon should report: the sums over what LIST shows. */
struct expect {
	uint64_t pinned, charged;
	uint32_t channels_pinned, channels_unpinned;
};

static struct expect expect_from_list(pinshm_client_t *c)
{
	struct expect x = {0};
	pinshm_list_entry_t *e;
	size_t n;

	TU_RC(pinshm_list(c, &e, &n), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(e[i].uid, geteuid());
		x.charged += e[i].size;
		if (e[i].state & PINSHM_LIST_PINNED) {
			x.pinned += e[i].size;
			x.channels_pinned++;
		} else {
			x.channels_unpinned++;
		}
	}
	free(e);
	return x;
}

/* pinshm_status() reports exactly @p x, @p connections, one user: us. */
static void check_status(pinshm_client_t *c, const struct expect *x, uint32_t connections)
{
	pinshm_status_t st;
	pinshm_user_usage_t *u;
	size_t n;

	TU_RC(pinshm_status(c, &st, &u, &n), 0);
	ck_assert_uint_gt(st.pid, 0);
	ck_assert_uint_ne(st.pid, (uint32_t)getpid());
	ck_assert(st.flags & PINSHM_STATUS_USER_MODE);
	ck_assert_uint_gt(st.budget, 0);
	ck_assert_uint_eq(st.pinned, x->pinned);
	ck_assert_uint_eq(st.channels_pinned, x->channels_pinned);
	ck_assert_uint_eq(st.channels_unpinned, x->channels_unpinned);
	ck_assert_uint_eq(st.connections, connections);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(u[0].uid, geteuid());
	ck_assert_uint_eq(u[0].channels, x->channels_pinned + x->channels_unpinned);
	ck_assert_uint_eq(u[0].connections, connections);
	ck_assert_uint_eq(u[0].pinned, x->pinned);
	ck_assert_uint_eq(u[0].charged, x->charged);
	ck_assert_uint_eq(u[0].quota, UINT64_MAX); /* no configuration: unlimited */
	free(u);

	/* Without the users: the same figures. */
	pinshm_status_t again;
	TU_RC(pinshm_status(c, &again, NULL, NULL), 0);
	ck_assert_uint_eq(again.pinned, st.pinned);
	ck_assert_uint_eq(again.connections, st.connections);
}

START_TEST(test_status_figures)
{
	pinshm_channel_attr_t small, big, topic;
	size_t s_small, s_big, s_topic;
	pinshm_client_t *c;
	pinshm_channel_t *ch;
	struct daemon d;
	struct run r;
	char want[96];

	ctl_daemon_start(&d);
	TU_RC(pinshm_connect(d.sock, &c), 0);
	struct expect none = {0};
	check_status(c, &none, 1);

	/* Channels of known sizes; one over the daemon's RLIMIT_MEMLOCK of a user
	 * (8 MiB here) is unpinned unless the daemon may lock more. */
	tu_attr(&small, PINSHM_QUEUE, 64 * 1024, 2, 1);
	tu_attr(&topic, PINSHM_TOPIC, 16 * 1024, 1, 3);
	tu_attr(&big, PINSHM_QUEUE, 8u << 20, 1, 1);
	TU_RC(pinshm_segment_size(&small, &s_small), 0);
	TU_RC(pinshm_segment_size(&topic, &s_topic), 0);
	TU_RC(pinshm_segment_size(&big, &s_big), 0);
	TU_RC(pinshm_create(c, "st-small", &small, 0600, 0), 0);
	TU_RC(pinshm_create(c, "st-topic", &topic, 0600, PINSHM_PERSISTENT), 0);
	TU_RC(pinshm_create(c, "st-big", &big, 0600, 0), 0);
	struct expect x = expect_from_list(c);
	ck_assert_uint_eq(x.charged, s_small + s_topic + s_big);
	ck_assert_uint_eq(x.channels_pinned + x.channels_unpinned, 3);
	check_status(c, &x, 1);

	/* pinshmctl's own connection is the second. */
	CTL(&d, &r, 0, "status", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_uint_eq(json_u64(r.out, NULL, "pinned"), x.pinned);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels"), 3);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels_pinned"), x.channels_pinned);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels_unpinned"), x.channels_unpinned);
	ck_assert_uint_eq(json_u64(r.out, NULL, "connections"), 2);
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "uid"), geteuid());
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "channels"), 3);
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "connections"), 2);
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "pinned"), x.pinned);
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "charged"), x.charged);
	HAS(r.out, "\"user_mode\": true");
	HAS(r.out, "\"quota\": null");
	CTL(&d, &r, 0, "status");
	snprintf(want, sizeof(want), "(%llu bytes)", (unsigned long long)x.pinned);
	HAS(r.out, want);
	HAS(r.out, "channels     3 (");
	HAS(r.out, "connections  2\n");
	HAS(r.out, "USER");
	HAS(r.out, "user mode");

	/* An attached endpoint changes nothing in the sums. */
	TU_RC(pinshm_open(c, "st-small", PINSHM_CONSUMER, &ch), 0);
	check_status(c, &x, 1);
	pinshm_channel_close(ch);

	/* Unlinked but still referenced: still counted and charged. */
	TU_RC(pinshm_unlink(c, "st-small"), 0);
	check_status(c, &x, 1);

	/* Disconnected: only the persistent topic is left, then nothing. */
	pinshm_disconnect(c);
	TU_RC(pinshm_connect(d.sock, &c), 0);
	x = expect_from_list(c);
	ck_assert_uint_eq(x.charged, s_topic);
	check_status(c, &x, 1);
	TU_RC(pinshm_unlink(c, "st-topic"), 0);
	check_status(c, &none, 1);
	pinshm_disconnect(c);
	CTL(&d, &r, 0, "--json", "status");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_uint_eq(json_u64(r.out, NULL, "pinned"), 0);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels"), 0);
	ck_assert_uint_eq(json_u64(r.out, NULL, "connections"), 1);
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "charged"), 0);
	daemon_stop(&d);
}
END_TEST

#define NCLIENTS 150 /* more than one page of CLIENTS (128) */

/* Rows of a `clients` table (header excluded) whose PID is @p pid. */
static unsigned rows_of_pid(const char *table, pid_t pid)
{
	char want[32];
	unsigned n = 0;

	snprintf(want, sizeof(want), "  %10d  ", (int)pid);
	for (const char *p = strstr(table, want); p; p = strstr(p + 1, want))
		n++;
	return n;
}

START_TEST(test_clients)
{
	static pinshm_client_t *cs[NCLIENTS];
	pinshm_client_info_t *e;
	pinshm_channel_t *ch;
	struct daemon d;
	struct run r;
	size_t n;

	ctl_daemon_start(&d);
	for (int i = 0; i < NCLIENTS; i++)
		TU_RC(pinshm_connect(d.sock, &cs[i]), 0);
	TU_RC(pinshm_create(cs[1], "cl-q", NULL, 0600, 0), 0);
	TU_RC(pinshm_open(cs[2], "cl-q", PINSHM_PRODUCER, &ch), 0);

	TU_RC(pinshm_clients(cs[0], &e, &n), 0);
	ck_assert_uint_eq(n, NCLIENTS);
	for (size_t i = 0; i < n; i++) {
		ck_assert(i == 0 || e[i].id > e[i - 1].id);
		ck_assert_uint_eq(e[i].pid, (uint32_t)getpid());
		ck_assert_uint_eq(e[i].uid, geteuid());
		ck_assert_uint_eq(e[i].gid, getegid());
		/* In the order of connection: cs[1] created, cs[2] opened. */
		ck_assert_uint_eq(e[i].channels, i == 1 || i == 2);
		ck_assert_uint_eq(e[i].endpoints, i == 2);
	}
	free(e);

	CTL(&d, &r, 0, "clients");
	HAS(r.out, "ENDPOINTS");
	ck_assert_uint_eq(rows_of_pid(r.out, getpid()), NCLIENTS);
	CTL(&d, &r, 0, "clients", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	char want[48];
	snprintf(want, sizeof(want), "\"pid\": %d,", (int)getpid());
	unsigned found = 0;
	for (const char *p = strstr(r.out, want); p; p = strstr(p + 1, want))
		found++;
	ck_assert_uint_eq(found, NCLIENTS);
	HAS(r.out, "\"endpoints\": 1");

	/* A closed endpoint no longer counts, and with it goes the reference
	 * of the connection that opened it (CLOSE); the creator's stays. */
	TU_RC(pinshm_channel_close(ch), 0);
	TU_RC(pinshm_clients(cs[0], &e, &n), 0);
	ck_assert_uint_eq(e[2].channels, 0);
	ck_assert_uint_eq(e[2].endpoints, 0);
	ck_assert_uint_eq(e[1].channels, 1);
	free(e);

	for (int i = 0; i < NCLIENTS; i++)
		pinshm_disconnect(cs[i]);
	/* Only pinshmctl's own connection is left. */
	CTL(&d, &r, 0, "clients", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels"), 0);
	HAS_NOT(r.out, "},");
	CTL(&d, &r, 0, "status", "--json");
	ck_assert_uint_eq(json_u64(r.out, NULL, "connections"), 1);
	ck_assert_uint_eq(json_u64(r.out, NULL, "channels"), 0);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_status_output)
{
	pinshm_status_t st = {.pid = 42, .uptime_ms = 3723000, .budget = UINT64_MAX, .pinned = 65536,
			      .channels_pinned = 1, .channels_unpinned = 2, .connections = 3};
	pinshm_user_usage_t u[2] = {
		{.uid = 4000000001u, .channels = 3, .connections = 3, .pinned = 65536, .charged = 1 << 20,
		 .quota = UINT64_MAX},
		{.uid = 4000000002u, .quota = 1 << 30},
	};
	pinshm_client_info_t c[1] = {{.id = 7, .pid = 99, .uid = 4000000001u, .gid = 4000000001u, .channels = 2,
				      .endpoints = 1}};
	char buf[4096], dur[32];

	ctl_duration_string(3723000, dur, sizeof(dur));
	ck_assert_str_eq(dur, "1h02m03s");
	ctl_duration_string(59999, dur, sizeof(dur));
	ck_assert_str_eq(dur, "59s");
	ctl_duration_string(90061000, dur, sizeof(dur));
	ck_assert_str_eq(dur, "1d01h01m");

	FILE *f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_status_json(f, &st, u, 2);
	fclose(f);
	ck_assert_msg(json_valid(buf), "invalid JSON:\n%s", buf);
	HAS(buf, "\"budget\": null");
	HAS(buf, "\"channels\": 3");
	HAS(buf, "\"user\": \"4000000001\"");
	HAS(buf, "\"quota\": 1073741824");
	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_status_json(f, &st, u, 0);
	fclose(f);
	ck_assert_msg(json_valid(buf), "invalid JSON:\n%s", buf);
	HAS(buf, "\"users\": []");

	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_status(f, &st, u, 2);
	fclose(f);
	HAS(buf, "pid 42, system mode, up 1h02m03s");
	HAS(buf, "64K of unlimited budget (65536 bytes)");
	HAS(buf, "channels     3 (1 pinned, 2 unpinned)");

	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_clients_json(f, c, 1);
	fclose(f);
	ck_assert_msg(json_valid(buf), "invalid JSON:\n%s", buf);
	HAS(buf, "\"id\": 7");
	HAS(buf, "\"group\": \"4000000001\"");
	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_clients_json(f, c, 0);
	fclose(f);
	ck_assert_str_eq(buf, "[]\n");
}
END_TEST

/* ======================================================================== */
/* errors                                                                    */
/* ======================================================================== */

START_TEST(test_request_errors)
{
	struct daemon d;
	struct run r;
	char want[128];

	ctl_daemon_start(&d);
	CTL(&d, &r, 1, "rm", "missing");
	snprintf(want, sizeof(want), "pinshmctl: rm missing: %s", pinshm_strerror(-ENOENT));
	HAS(r.err, want);
	ck_assert_str_eq(r.out, "");

	CTL(&d, &r, 0, "create", "dup");
	CTL(&d, &r, 1, "create", "dup");
	snprintf(want, sizeof(want), "pinshmctl: create dup: %s: ", pinshm_strerror(-EEXIST));
	HAS(r.err, want); /* and the daemon's message after it */

	/* One of several names missing: the others are removed, exit 1. */
	CTL(&d, &r, 1, "rm", "nope", "dup");
	HAS(r.err, "rm nope: ");
	HAS_NOT(r.err, "rm dup");
	CTL(&d, &r, 0, "ls", "--json");
	ck_assert_str_eq(r.out, "[]\n");

	/* A name the library refuses. */
	CTL(&d, &r, 1, "create", ".hidden");
	HAS(r.err, "pinshmctl: create .hidden: ");

	/* No daemon there. */
	char none[160];
	snprintf(none, sizeof(none), "%s/none", d.dir);
	ctl_runv(d.dir, &r, (const char *const[]){"-s", none, "ls", NULL});
	ck_assert_int_eq(r.status, 1);
	snprintf(want, sizeof(want), "pinshmctl: connect: %s", pinshm_strerror(-ENOENT));
	HAS(r.err, want);
	daemon_stop(&d);
}
END_TEST

START_TEST(test_usage)
{
	static const char *const bad[][8] = {
		{"frobnicate"},
		{"ls", "extra"},
		{"ls", "--bogus"},
		{"create"},
		{"create", "a", "b"},
		{"create", "a", "--capacity"},
		{"create", "a", "--capacity", "3000"},
		{"create", "a", "--capacity", "1x"},
		{"create", "a", "--capacity", "2k"},
		{"create", "a", "--capacity", "8k", "--max-message", "8k"},
		{"create", "a", "--producers", "0"},
		{"create", "a", "--producers", "257"},
		{"create", "a", "--consumers", "65"},
		{"create", "a", "--consumers", "x"},
		{"create", "a", "--mode", "800"},
		{"create", "a", "--mode", "1777"},
		{"create", "a", "--overrun"},
		{"create", "a", "--node", "near"},
		{"create", "a", "--node", "-1"},
		{"create", "a", "--node", "1x"},
		{"rm"},
		{"shutdown", "now"},
		{"status", "extra"},
		{"status", "--bogus"},
		{"clients", "extra"},
	};
	struct daemon d;
	struct run r;

	ctl_daemon_start(&d);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *args[12] = {"-s", d.sock};
		for (int j = 0; j < 8 && bad[i][j]; j++)
			args[2 + j] = bad[i][j];
		ctl_runv(d.dir, &r, args);
		ck_assert_msg(r.status == 2, "pinshmctl %s %s %s %s: exit %d, want 2\nstderr: %s", bad[i][0],
			      bad[i][1] ? bad[i][1] : "", bad[i][2] ? bad[i][2] : "", bad[i][3] ? bad[i][3] : "",
			      r.status, r.err);
		HAS(r.err, "pinshmctl: ");
	}
	/* Nothing was created by any of them, and the daemon still serves. */
	CTL(&d, &r, 0, "ls", "--json");
	ck_assert_str_eq(r.out, "[]\n");

	/* Without a command; a global option without its value. */
	ctl_runv(d.dir, &r, (const char *const[]){NULL});
	ck_assert_int_eq(r.status, 2);
	HAS(r.err, "usage: pinshmctl");
	ctl_runv(d.dir, &r, (const char *const[]){"-s", NULL});
	ck_assert_int_eq(r.status, 2);
	CTL(&d, &r, 0, "help");
	HAS(r.out, "usage: pinshmctl");
	ctl_runv(d.dir, &r, (const char *const[]){"--help", NULL});
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "create NAME");
	daemon_stop(&d);
}
END_TEST

static Suite *pinshmctl_suite(void)
{
	Suite *s = suite_create("pinshmctl");
	TCase *tc;

	tc = tcase_create("output");
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_mode_size_strings);
	tcase_add_test(tc, test_json_string);
	tcase_add_test(tc, test_json_list);
	tcase_add_test(tc, test_status_output);
	suite_add_tcase(s, tc);

	tc = tcase_create("status");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_status_figures);
	tcase_add_test(tc, test_clients);
	suite_add_tcase(s, tc);

	tc = tcase_create("commands");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_create_ls_rm);
	tcase_add_test(tc, test_ls_json);
	tcase_add_test(tc, test_stat);
	tcase_add_test(tc, test_create_node);
	tcase_add_test(tc, test_create_persists);
	tcase_add_test(tc, test_shutdown);
	tcase_add_test(tc, test_version);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_request_errors);
	tcase_add_test(tc, test_usage);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(pinshmctl_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
