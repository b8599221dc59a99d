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
#include <grp.h>
#include <poll.h>
#include <pwd.h>
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

/*
 * Run pinshmctl with @p args (NULL-terminated), as @p as (NULL: as this
 * process), its output into files in @p dir; fail the test if it does not
 * exit in time or is killed.
 */
static void ctl_runv_as(const char *dir, struct run *r, const struct ident *as, const char *const *args)
{
	char out[160], err[160];
	const char *argv[32];
	int n = 0;

	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	argv[n++] = "pinshmctl";
	for (; *args && n < 31; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	r->status = prog_run(env_path("PINSHMCTL", "clients/pinshmctl"), argv, as, out, err, RUN_MS);
	tu_read_file(out, r->out, sizeof(r->out));
	tu_read_file(err, r->err, sizeof(r->err));
}

static void ctl_runv(const char *dir, struct run *r, const char *const *args)
{
	ctl_runv_as(dir, r, NULL, args);
}

/* Run "pinshmctl -s SOCK ARGS..." and fail the test unless it exits @p want. */
#define CTL(d, r, want, ...)                                                                                  \
	do {                                                                                                  \
		ctl_runv((d)->dir, (r), (const char *const[]){"-s", (d)->sock, __VA_ARGS__, NULL});           \
		ck_assert_msg((r)->status == (want), "pinshmctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", \
			      #__VA_ARGS__, (r)->status, (want), (r)->out, (r)->err);                         \
	} while (0)

/* The same, as @p as (a struct ident *). */
#define CTL_AS(d, r, as, want, ...)                                                                           \
	do {                                                                                                  \
		ctl_runv_as((d)->dir, (r), (as), (const char *const[]){"-s", (d)->sock, __VA_ARGS__, NULL});  \
		ck_assert_msg((r)->status == (want), "pinshmctl %s as uid %u: exit %d, want %d\nstdout: %s\nstderr: %s", \
			      #__VA_ARGS__, (unsigned)(as)->uid, (r)->status, (want), (r)->out, (r)->err);     \
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

/* The words of one line of a table (runs of non-blanks): where each starts and ends. */
struct columns {
	int n;
	int start[32], end[32];
};

static void columns_of(const char *line, struct columns *c)
{
	c->n = 0;
	for (int i = 0; line[i] && line[i] != '\n';) {
		if (line[i] == ' ') {
			i++;
			continue;
		}
		ck_assert_int_lt(c->n, 32);
		c->start[c->n] = i;
		while (line[i] && line[i] != '\n' && line[i] != ' ')
			i++;
		c->end[c->n++] = i;
	}
}

/* Word @p i of @p line, into @p buf. */
static const char *word_of(const char *line, int i, char *buf, size_t len)
{
	struct columns c;

	columns_of(line, &c);
	ck_assert_msg(i < c.n, "no word %d in: %s", i, line);
	snprintf(buf, len, "%.*s", c.end[i] - c.start[i], line + c.start[i]);
	return buf;
}

/* The line of @p table whose word @p col is @p value, into @p line; or NULL. */
static const char *row_with(const char *table, int col, const char *value, char *line, size_t len)
{
	char w[256];

	for (const char *p = table; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		struct columns c;
		columns_of(p, &c);
		if (col < c.n && strcmp(word_of(p, col, w, sizeof(w)), value) == 0) {
			snprintf(line, len, "%.*s", (int)strcspn(p, "\n"), p);
			return line;
		}
	}
	return NULL;
}

/*
 * Fail unless each row of the table in @p text whose header is the line
 * holding @p header_word lines up with that header: as many words, each
 * starting where the header's starts (a left-aligned column) or ending
 * where it ends (a right-aligned one).  The rows: the lines after the
 * header, up to an empty line or the end.
 *
 * And the columns whose headers @p fitted names (NULL-terminated) are as
 * wide as their widest cell, header included: two blanks after it, the
 * next column's leftmost cell starts (for a right-aligned next column that
 * is its field's start where one of its cells fills it, as the tests here
 * make sure).  @return the rows checked.
 */
static unsigned assert_aligned(const char *text, const char *header_word, const char *const *fitted)
{
	const char *h = strstr(text, header_word);
	struct columns hc, rc;
	unsigned rows = 0;
	int max_end[32], min_start[32];

	ck_assert_msg(h != NULL, "no '%s' header in:\n%s", header_word, text);
	while (h > text && h[-1] != '\n')
		h--;
	const int hlen = (int)strcspn(h, "\n");
	columns_of(h, &hc);
	memcpy(max_end, hc.end, sizeof(max_end));
	memcpy(min_start, hc.start, sizeof(min_start));
	for (const char *p = strchr(h, '\n'); p && p[1] && p[1] != '\n'; p = strchr(p + 1, '\n')) {
		const char *row = p + 1;
		int len = (int)strcspn(row, "\n");
		columns_of(row, &rc);
		ck_assert_msg(rc.n == hc.n, "%d words, the header %d:\n%.*s\n%.*s", rc.n, hc.n, hlen, h, len, row);
		for (int i = 0; i < hc.n; i++) {
			ck_assert_msg(rc.start[i] == hc.start[i] || rc.end[i] == hc.end[i],
				      "column %d at %d..%d, the header's at %d..%d:\n%.*s\n%.*s", i, rc.start[i],
				      rc.end[i], hc.start[i], hc.end[i], hlen, h, len, row);
			max_end[i] = rc.end[i] > max_end[i] ? rc.end[i] : max_end[i];
			min_start[i] = rc.start[i] < min_start[i] ? rc.start[i] : min_start[i];
		}
		rows++;
	}
	for (; fitted && *fitted; fitted++) {
		int i = 0;
		while (i < hc.n && !(hc.end[i] - hc.start[i] == (int)strlen(*fitted) &&
				     strncmp(h + hc.start[i], *fitted, strlen(*fitted)) == 0))
			i++;
		ck_assert_msg(i + 1 < hc.n, "no column %s before another in: %.*s", *fitted, hlen, h);
		ck_assert_msg(max_end[i] + 2 == min_start[i + 1],
			      "column %s: its widest cell ends at %d, the next column starts at %d, in:\n%s", *fitted,
			      max_end[i], min_start[i + 1], h);
	}
	return rows;
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

/* The members of the JSON object at @p obj, one by one: @p i-th member's key
 * (quotes included) and raw value text.  @return false past the last, or if
 * @p obj is not an object. */
static bool json_nth_member(const char *obj, size_t i, const char **key, size_t *keylen, const char **val,
			    size_t *vallen)
{
	const char *p = json_ws(obj);

	if (*p != '{')
		return false;
	p = json_ws(p + 1);
	for (size_t k = 0; *p == '"'; k++) {
		const char *kend = json_string(p);
		if (!kend || *(kend = json_ws(kend)) != ':')
			return false;
		const char *v = json_ws(kend + 1), *vend = json_value(v);
		if (!vend)
			return false;
		if (k == i) {
			*key = p;
			*keylen = (size_t)(json_string(p) - p);
			*val = v;
			*vallen = (size_t)(vend - v);
			return true;
		}
		p = json_ws(vend);
		if (*p == ',')
			p = json_ws(p + 1);
	}
	return false;
}

/* The raw text of member @p key of the JSON object at @p obj ("\"root\"",
 * "0", "true"), into @p val.  @return false where there is no such member. */
static bool json_member(const char *obj, const char *key, char *val, size_t len)
{
	const char *k, *v;
	size_t kl, vl;

	for (size_t i = 0; json_nth_member(obj, i, &k, &kl, &v, &vl); i++)
		if (kl == strlen(key) + 2 && strncmp(k + 1, key, kl - 2) == 0) {
			snprintf(val, len, "%.*s", (int)vl, v);
			return true;
		}
	return false;
}

/* The element of the JSON array @p arr whose member @p key has the raw text
 * @p want, or NULL. */
static const char *json_find(const char *arr, const char *key, const char *want)
{
	const char *p = json_ws(arr);
	char val[256];

	if (*p != '[')
		return NULL;
	p = json_ws(p + 1);
	while (*p && *p != ']') {
		if (json_member(p, key, val, sizeof(val)) && strcmp(val, want) == 0)
			return p;
		p = json_value(p);
		if (!p)
			return NULL;
		p = json_ws(p);
		if (*p == ',')
			p = json_ws(p + 1);
	}
	return NULL;
}

/* Fail unless member @p key of the JSON object @p obj has the raw text @p want. */
#define JSON_IS(obj, key, want)                                                                               \
	do {                                                                                                  \
		char v_[256];                                                                                 \
		ck_assert_msg(json_member((obj), (key), v_, sizeof(v_)), "no member \"%s\" in:\n%.600s", (key),  \
			      (obj));                                                                         \
		ck_assert_msg(strcmp(v_, (want)) == 0, "\"%s\": %s, want %s, in:\n%.600s", (key), v_, (want), \
			      (obj));                                                                         \
	} while (0)

/* The JSON text of a number, or of a string (quoted, for names without escapes). */
static const char *json_num(uint64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

static const char *json_str(const char *s, char *buf, size_t len)
{
	snprintf(buf, len, "\"%s\"", s);
	return buf;
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
		 .max_consumers = 3, .state = PINSHM_LIST_SEALED | PINSHM_LIST_PERSISTENT | PINSHM_LIST_LOCKING,
		 .mode = 0600, .backend = PINSHM_BACKEND_SHM},
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
	HAS(buf, "\"locking\": true"); /* being locked: not pinned yet */
	HAS(buf, "\"locking\": false");
	f = fmemopen(buf, sizeof(buf), "w");
	ctl_print_table(f, e, 2);
	fclose(f);
	HAS(buf, "  locking  ");
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
/* The default quota of a daemon with no configuration (pinshmd.conf(5)):
 * derived from its budget. */
static uint64_t derived_quota(uint64_t budget)
{
	return budget / 4 > (1088ull << 20) ? budget / 4 : 1088ull << 20;
}

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
	ck_assert_uint_eq(u[0].quota, derived_quota(st.budget));
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
	ck_assert_uint_eq(json_u64(r.out, "\"users\"", "quota"), derived_quota(json_u64(r.out, NULL, "budget")));
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

/* What ctl_print_status() (text), or ctl_print_status_json() (@p json: then
 * checked valid), prints of @p st, @p pool and @p n users @p u, into @p buf. */
static void status_out(char *buf, size_t len, bool json, const pinshm_status_t *st, const pinshm_pool_t *pool,
		       const pinshm_user_usage_t *u, size_t n)
{
	FILE *f = fmemopen(buf, len, "w");

	ck_assert_ptr_nonnull(f);
	if (json)
		ctl_print_status_json(f, st, pool, u, n);
	else
		ctl_print_status(f, st, pool, u, n);
	fclose(f);
	if (json)
		ck_assert_msg(json_valid(buf), "invalid JSON:\n%s", buf);
}

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

	status_out(buf, sizeof(buf), true, &st, NULL, u, 2);
	HAS(buf, "\"budget\": null");
	HAS(buf, "\"channels\": 3");
	HAS(buf, "\"user\": \"4000000001\"");
	HAS(buf, "\"quota\": 1073741824");
	HAS_NOT(buf, "\"pool\"");
	status_out(buf, sizeof(buf), true, &st, NULL, u, 0);
	HAS(buf, "\"users\": []");

	status_out(buf, sizeof(buf), false, &st, NULL, u, 2);
	HAS_NOT(buf, "pool");
	HAS(buf, "pid 42, system mode, up 1h02m03s");
	HAS(buf, "64K of unlimited budget (65536 bytes)");
	HAS(buf, "channels     3 (1 pinned, 2 unpinned)");

	FILE *f = fmemopen(buf, sizeof(buf), "w");
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
/* owners: names where the system has them, numbers where not; columns       */
/* ======================================================================== */

/* A user and a group with names longer than any header, made when missing. */
#define NAMED_USER "pinshm-ctl-long-user-name-x"
#define NAMED_GROUP "pinshm-ctl-long-group-name"
/* A channel name of PINSHM_NAME_MAX characters. */
#define LONG_CHANNEL "ow.channel-with-a-name-as-long-as-any-may-be-0123456789abcdefgh"
#define WAIT_MS 20000

/*
 * A system-mode pinshmd and three owners of one channel each: NAMED_USER
 * (its group NAMED_GROUP) owns ow.named, @p anon (an id that is neither a
 * user's nor a group's, for both) owns ow.anon, and root owns LONG_CHANNEL.
 * The first two create theirs with pinshmctl run as them.
 */
struct owners {
	struct daemon d;
	struct ident named, anon, root;
	char anon_id[16]; /* anon's uid (= gid) as text */
	char root_user[64], root_group[64];
};

/* @return false (with a note) where it cannot be: not root.  As root, a
 * user that cannot be made fails the test. */
static bool owners_start(struct owners *o)
{
	struct daemon_opts dopts = {.tmpl = "/tmp/pinshmctl-check-XXXXXX", .system_mode = true};
	struct run r;
	int rc;

	_Static_assert(sizeof(LONG_CHANNEL) == PINSHM_NAME_MAX + 1, "LONG_CHANNEL is as long as a name may be");
	if (geteuid() != 0) {
		fprintf(stderr, "note: not root: the tests of owners' names are skipped\n");
		return false;
	}
	if (!getgrnam(NAMED_GROUP)) {
		rc = system("groupadd " NAMED_GROUP " >/dev/null 2>&1");
		(void)rc;
	}
	if (!getpwnam(NAMED_USER)) {
		rc = system("useradd -M -N " NAMED_USER " >/dev/null 2>&1");
		(void)rc;
	}
	const struct passwd *pw = getpwnam(NAMED_USER);
	const struct group *gr = getgrnam(NAMED_GROUP);
	ck_assert_msg(pw && gr, "cannot make the user %s and group %s (useradd, groupadd)", NAMED_USER, NAMED_GROUP);
	o->named = (struct ident){pw->pw_uid, gr->gr_gid};
	ck_assert_uint_ne(o->named.uid, 0);
	o->anon.uid = 3999999001u;
	while (getpwuid(o->anon.uid) || getgrgid((gid_t)o->anon.uid))
		o->anon.uid++;
	o->anon.gid = (gid_t)o->anon.uid;
	snprintf(o->anon_id, sizeof(o->anon_id), "%u", (unsigned)o->anon.uid);
	o->root = (struct ident){0, 0};
	snprintf(o->root_user, sizeof(o->root_user), "%s", getpwuid(0) ? getpwuid(0)->pw_name : "0");
	snprintf(o->root_group, sizeof(o->root_group), "%s", getgrgid(0) ? getgrgid(0)->gr_name : "0");

	daemon_start_opts(&o->d, &dopts);
	CTL_AS(&o->d, &r, &o->named, 0, "create", "ow.named", "--mode", "0644");
	CTL_AS(&o->d, &r, &o->anon, 0, "create", "ow.anon", "--mode", "0644");
	CTL(&o->d, &r, 0, "create", LONG_CHANNEL);
	return true;
}

/* A process connected to the daemon as another user, until released. */
struct holder {
	pid_t pid;
	int hold; /* closing it lets the holder go */
	char pid_text[16];
};

static void holder_start(struct holder *h, const struct daemon *d, const struct ident *as)
{
	int ready[2], hold[2];
	char byte;

	ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(hold, O_CLOEXEC), 0);
	fflush(stdout);
	fflush(stderr);
	h->pid = fork();
	ck_assert_msg(h->pid >= 0, "fork: %s", strerror(errno));
	if (h->pid == 0) {
		pinshm_client_t *c;
		close(ready[0]);
		close(hold[1]);
		if (setgroups(0, NULL) != 0 || setgid(as->gid) != 0 || setuid(as->uid) != 0)
			_exit(2);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* after setuid, which clears it */
		if (pinshm_connect(d->sock, &c) != 0 || write(ready[1], "r", 1) != 1)
			_exit(3);
		while (read(hold[0], &byte, 1) > 0)
			;
		pinshm_disconnect(c);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	h->hold = hold[1];
	snprintf(h->pid_text, sizeof(h->pid_text), "%d", (int)h->pid);
	struct pollfd pf = {.fd = ready[0], .events = POLLIN};
	ck_assert_msg(poll(&pf, 1, WAIT_MS) == 1 && read(ready[0], &byte, 1) == 1, "the holder as uid %u did not connect",
		      (unsigned)as->uid);
	close(ready[0]);
}

/* Let the @p n holders go (all at once: each has the others' ends of the
 * pipes that hold them), and check that they end well. */
static void holders_end(struct holder *h, int n)
{
	int st;
	char buf[32];

	for (int i = 0; i < n; i++)
		close(h[i].hold);
	uint64_t deadline = tu_now_ms() + WAIT_MS;
	for (int i = 0; i < n; i++) {
		while (waitpid(h[i].pid, &st, WNOHANG) != h[i].pid) {
			if (tu_now_ms() > deadline) {
				kill(h[i].pid, SIGKILL);
				waitpid(h[i].pid, &st, 0);
				ck_abort_msg("holder %d did not exit", i);
			}
			tu_sleep_ms(2);
		}
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder %d: %s", i,
			      tu_status_str(st, buf, sizeof(buf)));
	}
}

/* Fail unless words @p col and @p col + 1 of @p line are @p user and @p group. */
static void assert_owner_words(const char *line, int col, const char *user, const char *group)
{
	char w[256];

	ck_assert_msg(strcmp(word_of(line, col, w, sizeof(w)), user) == 0, "user %s, want %s, in: %s", w, user, line);
	ck_assert_msg(strcmp(word_of(line, col + 1, w, sizeof(w)), group) == 0, "group %s, want %s, in: %s", w, group,
		      line);
}

/* Fail unless the JSON object @p obj has @p ukey @p user, uid, @p gkey @p group, gid. */
static void assert_owner_json(const char *obj, const char *ukey, const char *gkey, const struct ident *id,
			      const char *user, const char *group)
{
	char want[128];

	JSON_IS(obj, ukey, json_str(user, want, sizeof(want)));
	JSON_IS(obj, "uid", json_num(id->uid, want, sizeof(want)));
	if (gkey) {
		JSON_IS(obj, gkey, json_str(group, want, sizeof(want)));
		JSON_IS(obj, "gid", json_num(id->gid, want, sizeof(want)));
	}
}

/* ls and stat: OWNER and GROUP by name where the system has one, else by number. */
START_TEST(test_owner_names_ls)
{
	struct owners o;
	struct run r;
	char line[512], want[64];
	const char *e;

	if (!owners_start(&o))
		return;
	CTL(&o.d, &r, 0, "ls");
	ck_assert_ptr_nonnull(table_line(r.out, "ow.named", line, sizeof(line)));
	assert_owner_words(line, 2, NAMED_USER, NAMED_GROUP);
	ck_assert_ptr_nonnull(table_line(r.out, "ow.anon", line, sizeof(line)));
	assert_owner_words(line, 2, o.anon_id, o.anon_id);
	ck_assert_ptr_nonnull(table_line(r.out, LONG_CHANNEL, line, sizeof(line)));
	assert_owner_words(line, 2, o.root_user, o.root_group);

	CTL(&o.d, &r, 0, "ls", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_ptr_nonnull(e = json_find(r.out, "name", "\"ow.named\""));
	assert_owner_json(e, "owner", "group", &o.named, NAMED_USER, NAMED_GROUP);
	ck_assert_ptr_nonnull(e = json_find(r.out, "name", "\"ow.anon\""));
	assert_owner_json(e, "owner", "group", &o.anon, o.anon_id, o.anon_id);
	ck_assert_ptr_nonnull(e = json_find(r.out, "name", "\"" LONG_CHANNEL "\""));
	assert_owner_json(e, "owner", "group", &o.root, o.root_user, o.root_group);

	CTL(&o.d, &r, 0, "stat", "ow.named");
	snprintf(want, sizeof(want), "owner        %s (%u)\n", NAMED_USER, (unsigned)o.named.uid);
	HAS(r.out, want);
	snprintf(want, sizeof(want), "group        %s (%u)\n", NAMED_GROUP, (unsigned)o.named.gid);
	HAS(r.out, want);
	CTL(&o.d, &r, 0, "stat", "ow.anon");
	snprintf(want, sizeof(want), "owner        %s (%s)\n", o.anon_id, o.anon_id);
	HAS(r.out, want);
	snprintf(want, sizeof(want), "group        %s (%s)\n", o.anon_id, o.anon_id);
	HAS(r.out, want);
	daemon_stop(&o.d);
}
END_TEST

/* status: the users that own channels, by name, else by number. */
START_TEST(test_owner_names_status)
{
	struct owners o;
	struct run r;
	char line[512], num[16], uid[16];
	const char *users, *e;

	if (!owners_start(&o))
		return;
	CTL(&o.d, &r, 0, "status");
	ck_assert_ptr_nonnull(row_with(r.out, 0, NAMED_USER, line, sizeof(line)));
	ck_assert_str_eq(word_of(line, 1, uid, sizeof(uid)), json_num(o.named.uid, num, sizeof(num)));
	ck_assert_ptr_nonnull(row_with(r.out, 0, o.anon_id, line, sizeof(line)));
	assert_owner_words(line, 0, o.anon_id, o.anon_id); /* USER, then UID: the number twice */
	ck_assert_ptr_nonnull(row_with(r.out, 0, o.root_user, line, sizeof(line)));
	ck_assert_str_eq(word_of(line, 1, num, sizeof(num)), "0");

	CTL(&o.d, &r, 0, "status", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_ptr_nonnull(users = strstr(r.out, "\"users\": ["));
	users += strlen("\"users\": ");
	ck_assert_ptr_nonnull(e = json_find(users, "uid", json_num(o.named.uid, num, sizeof(num))));
	assert_owner_json(e, "user", NULL, &o.named, NAMED_USER, NULL);
	ck_assert_ptr_nonnull(e = json_find(users, "uid", o.anon_id));
	assert_owner_json(e, "user", NULL, &o.anon, o.anon_id, NULL);
	ck_assert_ptr_nonnull(e = json_find(users, "uid", "0"));
	assert_owner_json(e, "user", NULL, &o.root, o.root_user, NULL);
	daemon_stop(&o.d);
}
END_TEST

/* clients: who connected, by name, else by number. */
START_TEST(test_owner_names_clients)
{
	struct owners o;
	struct holder h[2];
	struct run r;
	char line[512];
	const char *e;

	if (!owners_start(&o))
		return;
	holder_start(&h[0], &o.d, &o.named);
	holder_start(&h[1], &o.d, &o.anon);
	CTL(&o.d, &r, 0, "clients");
	ck_assert_ptr_nonnull(row_with(r.out, 1, h[0].pid_text, line, sizeof(line)));
	assert_owner_words(line, 2, NAMED_USER, NAMED_GROUP);
	ck_assert_ptr_nonnull(row_with(r.out, 1, h[1].pid_text, line, sizeof(line)));
	assert_owner_words(line, 2, o.anon_id, o.anon_id);

	CTL(&o.d, &r, 0, "clients", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_ptr_nonnull(e = json_find(r.out, "pid", h[0].pid_text));
	assert_owner_json(e, "user", "group", &o.named, NAMED_USER, NAMED_GROUP);
	ck_assert_ptr_nonnull(e = json_find(r.out, "pid", h[1].pid_text));
	assert_owner_json(e, "user", "group", &o.anon, o.anon_id, o.anon_id);
	holders_end(h, 2);
	daemon_stop(&o.d);
}
END_TEST

/* The pool in status: a line of what it holds of the pinned figure, a
 * table of its classes (LOCKED only for the one being filled), and the same
 * in JSON; "none" without a pool, and a stopped pool says so. */
START_TEST(test_status_pool_output)
{
	pinshm_status_t st = {.pid = 42, .budget = 64u << 20, .pinned = 12u << 20, .connections = 1};
	pinshm_pool_t pool = {
		.pinned = 10u << 20,
		.hits = 3,
		.misses = 1,
		.count = 2,
		.classes = {{.size = 1u << 20, .wanted = 2, .ready = 2},
			    {.size = 4u << 20, .wanted = 2, .ready = 1, .filling = 1, .locked = 2u << 20}},
	};
	char buf[4096];

	status_out(buf, sizeof(buf), false, &st, &pool, NULL, 0);
	HAS(buf, "pinned       12M of 64M budget (12582912 bytes)\n"
		 "pool         10M of it (10485760 bytes), charged to no user; 3 hits, 1 miss\n");
	HAS(buf, "   CLASS  WANTED  READY  FILLING    LOCKED    PINNED\n"
		 "      1M       2      2        0         -        2M\n"
		 "      4M       2      1        1        2M        8M\n");
	HAS_NOT(buf, "stopped");

	status_out(buf, sizeof(buf), true, &st, &pool, NULL, 0);
	HAS(buf, "\"pool\": {\n    \"pinned\": 10485760,\n    \"hits\": 3,\n    \"misses\": 1,\n"
		 "    \"stopped\": false,\n    \"classes\": [\n"
		 "      {\"size\": 1048576, \"wanted\": 2, \"ready\": 2, \"filling\": 0, \"locked\": 0},\n"
		 "      {\"size\": 4194304, \"wanted\": 2, \"ready\": 1, \"filling\": 1, \"locked\": 2097152}\n"
		 "    ]\n  },\n  \"users\": []");
	ck_assert_uint_eq(json_u64(buf, NULL, "pinned"), 12u << 20); /* the daemon's comes first */

	/* Stopped, nothing ready: said so, and one hit and many misses. */
	pool = (pinshm_pool_t){.hits = 1, .misses = 7, .flags = PINSHM_POOL_STOPPED, .count = 1,
			       .classes = {{.size = 16u << 20, .wanted = 1}}};
	status_out(buf, sizeof(buf), false, &st, &pool, NULL, 0);
	HAS(buf, "pool         0 of it (0 bytes), charged to no user; 1 hit, 7 misses; stopped: a segment could not "
		 "be made or locked (see the log)\n");
	HAS(buf, "     16M       1      0        0         -         0\n");
	status_out(buf, sizeof(buf), true, &st, &pool, NULL, 0);
	HAS(buf, "\"stopped\": true");

	/* No pool. */
	pool = (pinshm_pool_t){0};
	status_out(buf, sizeof(buf), false, &st, &pool, NULL, 0);
	HAS(buf, "pool         none\n");
	HAS_NOT(buf, "CLASS");
	status_out(buf, sizeof(buf), true, &st, &pool, NULL, 0);
	HAS(buf, "\"classes\": []\n  },");

	/* A count beyond the array (not from the library, which bounds it) prints the array only. */
	pool.count = 1000;
	status_out(buf, sizeof(buf), true, &st, &pool, NULL, 0);
}
END_TEST

/* A daemon with a pool of 2 classes of 2 segments: pinshmctl status shows
 * them once ready, as pinshm_status_pool() reports them, text and JSON. */
START_TEST(test_status_pool_daemon)
{
	struct daemon_opts o = {.tmpl = "/tmp/pinshmctl-check-XXXXXX", .config = true};
	struct daemon d;
	struct run r;
	pinshm_status_t st;
	pinshm_pool_t pool;
	pinshm_client_t *c;
	char want[160];
	int i;

	if (geteuid() != 0) {
		fprintf(stderr, "note: not root, the daemon may not lock its pool: test_status_pool_daemon skipped\n");
		return;
	}
	daemon_start_config(&d, &o, "[daemon]\npool_segments = 2\npool_sizes = 2M, 512K\n");
	TU_RC(pinshm_connect(d.sock, &c), 0);
	for (i = 0; i < 5000; i++) {
		TU_RC(pinshm_status_pool(c, &st, &pool, NULL, NULL), 0);
		if (pool.count == 2 && pool.classes[0].ready == 2 && pool.classes[1].ready == 2)
			break;
		tu_sleep_ms(10);
	}
	ck_assert_msg(i < 5000, "the pool never filled");
	pinshm_disconnect(c);
	ck_assert_uint_eq(pool.pinned, 2 * (512u << 10) + 2 * (2u << 20));
	ck_assert_uint_eq(st.pinned, pool.pinned); /* no channel: all of it the pool's */

	CTL(&d, &r, 0, "status");
	snprintf(want, sizeof(want), "pool         5M of it (%llu bytes), charged to no user; 0 hits, 0 misses\n",
		 (unsigned long long)pool.pinned);
	HAS(r.out, want);
	HAS(r.out, "    512K       2      2        0         -        1M\n"
		   "      2M       2      2        0         -        4M\n");
	CTL(&d, &r, 0, "status", "--json");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_uint_eq(json_u64(r.out, "\"pool\"", "pinned"), pool.pinned);
	ck_assert_uint_eq(json_u64(r.out, "\"classes\"", "size"), 512u << 10);
	ck_assert_uint_eq(json_u64(r.out, "\"classes\"", "wanted"), 2);
	ck_assert_uint_eq(json_u64(r.out, "\"classes\"", "ready"), 2);
	ck_assert_uint_eq(json_u64(r.out, "\"size\": 2097152", "ready"), 2);
	daemon_stop(&d);
}
END_TEST

/* A long channel name, a long user and group name and long numbers widen
 * their columns: every row of ls, status and clients lines up with its header. */
START_TEST(test_columns_aligned)
{
	struct owners o;
	struct holder h[2];
	struct run r;

	if (!owners_start(&o))
		return;
	holder_start(&h[0], &o.d, &o.named);
	holder_start(&h[1], &o.d, &o.anon);
	CTL(&o.d, &r, 0, "ls");
	ck_assert_uint_eq(assert_aligned(r.out, "NAME", (const char *const[]){"NAME", "KIND", "OWNER", "GROUP", NULL}),
			  3);
	/* UID: the id without a name fills its 10 digits. */
	CTL(&o.d, &r, 0, "status");
	ck_assert_uint_eq(assert_aligned(r.out, "QUOTA", (const char *const[]){"USER", NULL}), 3);
	/* The holders and pinshmctl; CHANNELS fills its field. */
	CTL(&o.d, &r, 0, "clients");
	ck_assert_uint_eq(assert_aligned(r.out, "ENDPOINTS", (const char *const[]){"USER", "GROUP", NULL}), 3);
	holders_end(h, 2);
	daemon_stop(&o.d);
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

/* stat's usage errors: the message, "Try 'pinshmctl help'." and exit 2, nothing on stdout;
 * a channel that is not there: exit 1 and the daemon's reason. */
START_TEST(test_stat_errors)
{
	static const struct {
		const char *args[4];
		const char *err;
	} bad[] = {
		{{"stat"}, "pinshmctl: stat: which channel? (stat NAME)\n"},
		{{"stat", "--json"}, "pinshmctl: stat: which channel? (stat NAME)\n"},
		{{"stat", "st.a", "st.b"}, "pinshmctl: stat: unexpected argument 'st.b'\n"},
		{{"stat", "--json", "st.a", "st.b"}, "pinshmctl: stat: unexpected argument 'st.b'\n"},
		{{"stat", "--bogus", "st.a"}, "pinshmctl: stat: unknown option '--bogus'\n"},
		{{"stat", "st.a", "-x"}, "pinshmctl: stat: unknown option '-x'\n"},
	};
	struct daemon d;
	struct run r;
	char want[256];

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "create", "st.a");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *args[8] = {"-s", d.sock};
		for (int j = 0; j < 4 && bad[i].args[j]; j++)
			args[2 + j] = bad[i].args[j];
		ctl_runv(d.dir, &r, args);
		snprintf(want, sizeof(want), "%sTry 'pinshmctl help'.\n", bad[i].err);
		ck_assert_msg(r.status == 2, "case %zu: exit %d, want 2\nstderr: %s", i, r.status, r.err);
		ck_assert_msg(strcmp(r.err, want) == 0, "case %zu: stderr\n%s, want\n%s", i, r.err, want);
		ck_assert_msg(r.out[0] == '\0', "case %zu: stdout: %s", i, r.out);
	}

	snprintf(want, sizeof(want), "pinshmctl: stat st.none: %s: no channel 'st.none'\n", pinshm_strerror(-ENOENT));
	CTL(&d, &r, 1, "stat", "st.none");
	ck_assert_str_eq(r.err, want);
	ck_assert_str_eq(r.out, "");
	CTL(&d, &r, 1, "stat", "--json", "st.none");
	ck_assert_str_eq(r.err, want);
	ck_assert_str_eq(r.out, ""); /* no half of an object */
	CTL(&d, &r, 0, "stat", "st.a"); /* the daemon still serves */
	HAS(r.out, "name         st.a\n");
	daemon_stop(&d);
}
END_TEST

/* stat --json: one object that parses, with the members of ls --json and
 * the values that the client API reports, which are what was asked for. */
START_TEST(test_stat_json)
{
	static const char *const members[] = {
		"name", "kind", "overrun", "owner", "uid", "group", "gid", "mode", "permissions", "capacity",
		"max_message", "size", "backend", "damaged", "pinned", "sealed", "persistent", "hugepages", "unlocked",
		"locking", "pin_idle", "node", "producers", "max_producers", "consumers", "max_consumers", "messages", "bytes",
		"lost", "refused", "drops", "device_registrations", "device_kinds"};
	const size_t nmembers = sizeof(members) / sizeof(members[0]);
	pinshm_list_entry_t e;
	pinshm_client_t *c;
	pinshm_channel_t *tx;
	struct daemon d;
	struct run r, ls;
	char want[128], user[64], group[64];
	const char *k, *v;
	size_t kl, vl, n;

	ctl_daemon_start(&d);
	CTL(&d, &r, 0, "create", "sj.q", "--capacity", "64k", "--producers", "2", "--consumers", "3", "--mode", "0640",
	    "--backend", "shm", "--pin", "300", "--max-message", "1k");
	CTL(&d, &r, 0, "create", "sj.t", "--topic", "--overrun");
	CTL(&d, &r, 1, "create", "sj.pci", "--pci", "0000:3b:00.0/..");
	ck_assert_msg(strstr(r.err, "invalid PCI bus id"), "%s", r.err);
	CTL(&d, &r, 2, "create", "sj.pci", "--pci", "0000:3b:00.0", "--node", "0");
	TU_RC(pinshm_connect(d.sock, &c), 0);
	TU_RC(pinshm_open(c, "sj.q", PINSHM_PRODUCER, &tx), 0);
	for (int i = 0; i < 3; i++)
		TU_RC(pinshm_send(tx, "0123456789", 10, 1000), 0);

	CTL(&d, &r, 0, "stat", "sj.q");
	ck_assert_msg(strstr(r.out, "\ndevices      0 registrations\n"), "%s", r.out);
	CTL(&d, &r, 0, "stat", "--json", "sj.q");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	ck_assert_msg(r.out[0] == '{', "not an object:\n%s", r.out);
	for (n = 0; json_nth_member(r.out, n, &k, &kl, &v, &vl); n++)
		ck_assert_msg(n < nmembers && kl == strlen(members[n]) + 2 && strncmp(k + 1, members[n], kl - 2) == 0,
			      "member %zu is %.*s, want \"%s\"", n, (int)kl, k, n < nmembers ? members[n] : "none");
	ck_assert_uint_eq(n, nmembers);

	/* What was asked for, and what the daemon reports to the API. */
	TU_RC(pinshm_stat(c, "sj.q", &e), 0);
	snprintf(user, sizeof(user), "%s", getpwuid(geteuid()) ? getpwuid(geteuid())->pw_name : "?");
	snprintf(group, sizeof(group), "%s", getgrgid(getegid()) ? getgrgid(getegid())->gr_name : "?");
	JSON_IS(r.out, "name", "\"sj.q\"");
	JSON_IS(r.out, "kind", "\"queue\"");
	JSON_IS(r.out, "overrun", "false");
	JSON_IS(r.out, "owner", json_str(user, want, sizeof(want)));
	JSON_IS(r.out, "uid", json_num(geteuid(), want, sizeof(want)));
	JSON_IS(r.out, "group", json_str(group, want, sizeof(want)));
	JSON_IS(r.out, "gid", json_num(getegid(), want, sizeof(want)));
	JSON_IS(r.out, "mode", "\"0640\"");
	JSON_IS(r.out, "permissions", "\"rw-r-----\"");
	JSON_IS(r.out, "capacity", "65536");
	JSON_IS(r.out, "max_message", "1024");
	JSON_IS(r.out, "size", json_num(e.size, want, sizeof(want)));
	JSON_IS(r.out, "backend", "\"shm\"");
	JSON_IS(r.out, "damaged", "false");
	JSON_IS(r.out, "pinned", e.state & PINSHM_LIST_PINNED ? "true" : "false");
	JSON_IS(r.out, "sealed", "false");
	JSON_IS(r.out, "persistent", "true");
	JSON_IS(r.out, "hugepages", "false");
	JSON_IS(r.out, "unlocked", "false");
	JSON_IS(r.out, "locking", "false");
	JSON_IS(r.out, "pin_idle", "300");
	snprintf(want, sizeof(want), "%d", (int)e.node);
	JSON_IS(r.out, "node", want);
	JSON_IS(r.out, "producers", "1");
	JSON_IS(r.out, "max_producers", "2");
	JSON_IS(r.out, "consumers", "0");
	JSON_IS(r.out, "max_consumers", "3");
	JSON_IS(r.out, "messages", "3");
	JSON_IS(r.out, "bytes", "30");
	JSON_IS(r.out, "lost", "0");
	JSON_IS(r.out, "refused", "0");
	JSON_IS(r.out, "drops", "0");

	/* The same object as the channel's in ls --json; a topic's kind and overrun. */
	CTL(&d, &ls, 0, "ls", "--json");
	const char *in_ls = json_find(ls.out, "name", "\"sj.q\"");
	ck_assert_ptr_nonnull(in_ls);
	for (size_t i = 0; i < nmembers; i++) {
		char mine[256];
		ck_assert(json_member(r.out, members[i], mine, sizeof(mine)));
		JSON_IS(in_ls, members[i], mine);
	}
	CTL(&d, &r, 0, "--json", "stat", "sj.t");
	ck_assert_msg(json_valid(r.out), "invalid JSON:\n%s", r.out);
	JSON_IS(r.out, "name", "\"sj.t\"");
	JSON_IS(r.out, "kind", "\"topic\"");
	JSON_IS(r.out, "overrun", "true");
	JSON_IS(r.out, "sealed", "true");
	JSON_IS(r.out, "backend", "\"memfd\"");
	pinshm_channel_close(tx);
	pinshm_disconnect(c);
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
		{"create", "a", "--producers", "1025"},
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
	tcase_add_test(tc, test_status_pool_output);
	suite_add_tcase(s, tc);

	tc = tcase_create("status");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_status_figures);
	tcase_add_test(tc, test_status_pool_daemon);
	tcase_add_test(tc, test_clients);
	suite_add_tcase(s, tc);

	tc = tcase_create("commands");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_create_ls_rm);
	tcase_add_test(tc, test_ls_json);
	tcase_add_test(tc, test_stat);
	tcase_add_test(tc, test_stat_json);
	tcase_add_test(tc, test_create_node);
	tcase_add_test(tc, test_create_persists);
	tcase_add_test(tc, test_shutdown);
	tcase_add_test(tc, test_version);
	suite_add_tcase(s, tc);

	tc = tcase_create("owners");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_owner_names_ls);
	tcase_add_test(tc, test_owner_names_status);
	tcase_add_test(tc, test_owner_names_clients);
	tcase_add_test(tc, test_columns_aligned);
	suite_add_tcase(s, tc);

	tc = tcase_create("errors");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_request_errors);
	tcase_add_test(tc, test_usage);
	tcase_add_test(tc, test_stat_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run_suite(pinshmctl_suite(), true) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
