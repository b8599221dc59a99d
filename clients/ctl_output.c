/*
 * ctl_output.c - pinshmctl's table and JSON output, and size parsing.
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_output.h"

int ctl_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0, unit = 1;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	switch (*p) {
	case '\0': break;
	case 'k': case 'K': unit = 1ull << 10; p++; break;
	case 'm': case 'M': unit = 1ull << 20; p++; break;
	case 'g': case 'G': unit = 1ull << 30; p++; break;
	default: return -EINVAL;
	}
	if (*p != '\0')
		return -EINVAL;
	if (v > UINT64_MAX / unit)
		return -ERANGE;
	*out = v * unit;
	return 0;
}

void ctl_mode_string(uint32_t mode, char *buf)
{
	static const char letters[] = "rwx";

	for (int i = 0; i < 9; i++)
		buf[i] = mode & (0400u >> i) ? letters[i % 3] : '-';
	buf[9] = '\0';
}

void ctl_size_string(uint64_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64, bytes);
		return;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	/* Whole numbers as such (64K, not 64.0K); one decimal below 10. */
	if (v == (double)(uint64_t)v || v >= 10)
		snprintf(buf, len, "%.0f%c", v, units[u]);
	else
		snprintf(buf, len, "%.1f%c", v, units[u]);
}

/* The length of the valid UTF-8 sequence at @p s, or 0 if there is none. */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

void ctl_json_string(FILE *out, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	fputc('"', out);
	while (*s) {
		size_t n = utf8_len(s);
		if (n == 0) {
			fputs("\\ufffd", out);
			s++;
		} else if (*s == '"' || *s == '\\') {
			fputc('\\', out);
			fputc(*s++, out);
		} else if (*s < 0x20 || *s == 0x7f) {
			fprintf(out, "\\u%04x", *s++);
		} else {
			fwrite(s, 1, n, out);
			s += n;
		}
	}
	fputc('"', out);
}

/* @p name (of a user or group) where there is one, else the number @p id, into @p buf. */
static const char *name_or_number(const char *name, uint32_t id, char *buf, size_t len)
{
	if (name)
		snprintf(buf, len, "%s", name);
	else
		snprintf(buf, len, "%" PRIu32, id);
	return buf;
}

/* The name of user @p uid, or its number, into @p buf. */
static const char *user_name(uint32_t uid, char *buf, size_t len)
{
	const struct passwd *pw = getpwuid((uid_t)uid);

	return name_or_number(pw ? pw->pw_name : NULL, uid, buf, len);
}

/* The name of group @p gid, or its number, into @p buf. */
static const char *group_name(uint32_t gid, char *buf, size_t len)
{
	const struct group *gr = getgrgid((gid_t)gid);

	return name_or_number(gr ? gr->gr_name : NULL, gid, buf, len);
}

/* The width of a column that holds @p s, and held @p width before. */
static int widest(int width, const char *s)
{
	int w = (int)strlen(s);

	return w > width ? w : width;
}

static const char *kind_name(const pinshm_list_entry_t *e)
{
	if (e->kind == PINSHM_QUEUE)
		return "queue";
	if (e->kind == PINSHM_TOPIC)
		return e->flags & PINSHM_OVERRUN ? "topic,overrun" : "topic";
	return "?";
}

uint64_t ctl_drops(const pinshm_list_entry_t *e)
{
	return e->lost > UINT64_MAX - e->refused ? UINT64_MAX : e->lost + e->refused;
}

const char *ctl_backend_name(const pinshm_list_entry_t *e)
{
	if (e->backend == PINSHM_BACKEND_MEMFD)
		return "memfd";
	if (e->backend == PINSHM_BACKEND_SHM)
		return e->state & PINSHM_LIST_DAMAGED ? "shm!" : "shm";
	return "?";
}

static const char *yes_no(bool b)
{
	return b ? "yes" : "no";
}

/* "yes", "no", "idle" for a pinned channel unlocked for want of use, or
 * "locking" for one being locked (not pinned yet). */
static const char *pinned_word(const pinshm_list_entry_t *e)
{
	if (!(e->state & PINSHM_LIST_PINNED))
		return e->state & PINSHM_LIST_LOCKING ? "locking" : "no";
	return e->state & PINSHM_LIST_UNLOCKED ? "idle" : "yes";
}

/* The NUMA node: a number, "none", or "consumer" (near the consumer, none opened yet). */
static const char *node_word(const pinshm_list_entry_t *e, char *buf, size_t len)
{
	if (e->node == PINSHM_NODE_CONSUMER)
		return "consumer";
	if (e->node < 0)
		return "none";
	snprintf(buf, len, "%" PRId32, e->node);
	return buf;
}

#define NAME_BUF 256

void ctl_print_table(FILE *out, const pinshm_list_entry_t *e, size_t n)
{
	int wname = 4, wkind = 4, wowner = 5, wgroup = 5;
	char owner[NAME_BUF], group[NAME_BUF];

	for (size_t i = 0; i < n; i++) {
		int w = (int)strnlen(e[i].name, sizeof(e[i].name));
		wname = w > wname ? w : wname;
		wkind = widest(wkind, kind_name(&e[i]));
		wowner = widest(wowner, user_name(e[i].uid, owner, sizeof(owner)));
		wgroup = widest(wgroup, group_name(e[i].gid, group, sizeof(group)));
	}
	fprintf(out, "%-*s  %-*s  %-*s  %-*s  %-9s  %-7s  %6s  %-8s  %-7s  %-6s  %-10s  %9s  %9s  %10s  %6s  %8s\n",
		wname, "NAME", wkind, "KIND", wowner, "OWNER", wgroup, "GROUP", "MODE", "BACKEND", "SIZE", "NODE",
		"PINNED", "SEALED",
		"PERSISTENT", "PRODUCERS", "CONSUMERS", "MESSAGES", "BYTES", "DROPS");
	for (size_t i = 0; i < n; i++) {
		char mode[10], size[16], prod[24], cons[24], bytes[16], node[16];
		ctl_mode_string(e[i].mode, mode);
		ctl_size_string(e[i].size, size, sizeof(size));
		ctl_size_string(e[i].bytes, bytes, sizeof(bytes));
		snprintf(prod, sizeof(prod), "%" PRIu32 "/%" PRIu32, e[i].producers, e[i].max_producers);
		snprintf(cons, sizeof(cons), "%" PRIu32 "/%" PRIu32, e[i].consumers, e[i].max_consumers);
		fprintf(out, "%-*.*s  %-*s  %-*s  %-*s  %-9s  %-7s  %6s  %-8s  %-7s  %-6s  %-10s  %9s  %9s  %10" PRIu64
			     "  %6s  %8" PRIu64 "\n",
			wname,
			(int)sizeof(e[i].name) - 1, e[i].name, wkind, kind_name(&e[i]), wowner,
			user_name(e[i].uid, owner, sizeof(owner)), wgroup, group_name(e[i].gid, group, sizeof(group)),
			mode, ctl_backend_name(&e[i]), size, node_word(&e[i], node, sizeof(node)), pinned_word(&e[i]),
			yes_no(e[i].state & PINSHM_LIST_SEALED),
			yes_no(e[i].state & PINSHM_LIST_PERSISTENT), prod, cons, e[i].messages, bytes,
			ctl_drops(&e[i]));
	}
}

static void json_field_str(FILE *out, const char *key, const char *value)
{
	fprintf(out, ",\n    \"%s\": ", key);
	ctl_json_string(out, value);
}

static void json_field_u64(FILE *out, const char *key, uint64_t value)
{
	fprintf(out, ",\n    \"%s\": %" PRIu64, key, value);
}

static void json_field_bool(FILE *out, const char *key, bool value)
{
	fprintf(out, ",\n    \"%s\": %s", key, value ? "true" : "false");
}

/* One channel as a JSON object, its members indented by @p indent. */
static void print_json_entry(FILE *out, const pinshm_list_entry_t *e, const char *indent)
{
	char buf[NAME_BUF], name[PINSHM_NAME_MAX + 1], mode[10], octal[8];

	/* The entry's name is terminated by the library; be safe anyway. */
	snprintf(name, sizeof(name), "%.*s", (int)sizeof(name) - 1, e->name);
	ctl_mode_string(e->mode, mode);
	snprintf(octal, sizeof(octal), "%04" PRIo32, e->mode & 07777u);
	fprintf(out, "{\n    \"name\": ");
	ctl_json_string(out, name);
	json_field_str(out, "kind", e->kind == PINSHM_TOPIC ? "topic" : e->kind == PINSHM_QUEUE ? "queue" : "unknown");
	json_field_bool(out, "overrun", e->flags & PINSHM_OVERRUN);
	json_field_str(out, "owner", user_name(e->uid, buf, sizeof(buf)));
	json_field_u64(out, "uid", e->uid);
	json_field_str(out, "group", group_name(e->gid, buf, sizeof(buf)));
	json_field_u64(out, "gid", e->gid);
	json_field_str(out, "mode", octal);
	json_field_str(out, "permissions", mode);
	json_field_u64(out, "capacity", e->capacity);
	json_field_u64(out, "max_message", e->max_message);
	json_field_u64(out, "size", e->size);
	json_field_str(out, "backend", ctl_backend_name(e));
	json_field_bool(out, "damaged", e->state & PINSHM_LIST_DAMAGED);
	json_field_bool(out, "pinned", e->state & PINSHM_LIST_PINNED);
	json_field_bool(out, "sealed", e->state & PINSHM_LIST_SEALED);
	json_field_bool(out, "persistent", e->state & PINSHM_LIST_PERSISTENT);
	json_field_bool(out, "hugepages", e->state & PINSHM_LIST_HUGEPAGES);
	json_field_bool(out, "unlocked", e->state & PINSHM_LIST_UNLOCKED);
	json_field_bool(out, "locking", e->state & PINSHM_LIST_LOCKING);
	json_field_u64(out, "pin_idle", e->pin_idle);
	fprintf(out, ",\n    \"node\": %" PRId32, e->node);
	json_field_u64(out, "producers", e->producers);
	json_field_u64(out, "max_producers", e->max_producers);
	json_field_u64(out, "consumers", e->consumers);
	json_field_u64(out, "max_consumers", e->max_consumers);
	json_field_u64(out, "messages", e->messages);
	json_field_u64(out, "bytes", e->bytes);
	json_field_u64(out, "lost", e->lost);
	json_field_u64(out, "refused", e->refused);
	json_field_u64(out, "drops", ctl_drops(e));
	json_field_u64(out, "device_registrations", e->device_regs);
	fprintf(out, ",\n    \"device_kinds\": [%s%s%s]", e->device_kinds & 1u << PINSHM_DEVICE_CUDA ? "\"cuda\"" : "",
		(e->device_kinds & 1u << PINSHM_DEVICE_CUDA) && (e->device_kinds & 1u << PINSHM_DEVICE_OPENCL) ? ", " : "",
		e->device_kinds & 1u << PINSHM_DEVICE_OPENCL ? "\"opencl\"" : "");
	fprintf(out, "\n%s}", indent);
}

void ctl_print_json(FILE *out, const pinshm_list_entry_t *e, size_t n)
{
	fputc('[', out);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ",\n  " : "\n  ", out);
		print_json_entry(out, &e[i], "  ");
	}
	fputs(n ? "\n]\n" : "]\n", out);
}

void ctl_print_stat_json(FILE *out, const pinshm_list_entry_t *e)
{
	print_json_entry(out, e, "");
	fputc('\n', out);
}

void ctl_print_stat(FILE *out, const pinshm_list_entry_t *e)
{
	char buf[NAME_BUF], mode[10], size[16], cap[16];

	ctl_mode_string(e->mode, mode);
	ctl_size_string(e->size, size, sizeof(size));
	ctl_size_string(e->capacity, cap, sizeof(cap));
	fprintf(out, "name         %.*s\n", (int)sizeof(e->name) - 1, e->name);
	fprintf(out, "kind         %s\n", kind_name(e));
	fprintf(out, "owner        %s (%" PRIu32 ")\n", user_name(e->uid, buf, sizeof(buf)), e->uid);
	fprintf(out, "group        %s (%" PRIu32 ")\n", group_name(e->gid, buf, sizeof(buf)), e->gid);
	fprintf(out, "mode         %s (%04" PRIo32 ")\n", mode, e->mode & 07777u);
	fprintf(out, "backend      %s\n", ctl_backend_name(e));
	fprintf(out, "size         %s (%" PRIu64 " bytes)\n", size, e->size);
	fprintf(out, "capacity     %s per producer\n", cap);
	fprintf(out, "max_message  %" PRIu32 "\n", e->max_message);
	fprintf(out, "pinned       %s\n", pinned_word(e));
	if (e->pin_idle)
		fprintf(out, "pin_policy   unlocked after %" PRIu32 " s unused\n", e->pin_idle);
	else
		fprintf(out, "pin_policy   always\n");
	fprintf(out, "sealed       %s\n", yes_no(e->state & PINSHM_LIST_SEALED));
	fprintf(out, "persistent   %s\n", yes_no(e->state & PINSHM_LIST_PERSISTENT));
	fprintf(out, "hugepages    %s\n", yes_no(e->state & PINSHM_LIST_HUGEPAGES));
	fprintf(out, "damaged      %s\n", yes_no(e->state & PINSHM_LIST_DAMAGED));
	char node[16];
	fprintf(out, "node         %s%s\n", node_word(e, node, sizeof(node)),
		e->node == PINSHM_NODE_CONSUMER ? " (unplaced until a consumer opens it)" : "");
	fprintf(out, "producers    %" PRIu32 "/%" PRIu32 "\n", e->producers, e->max_producers);
	fprintf(out, "consumers    %" PRIu32 "/%" PRIu32 "\n", e->consumers, e->max_consumers);
	fprintf(out, "messages     %" PRIu64 "\n", e->messages);
	fprintf(out, "bytes        %" PRIu64 "\n", e->bytes);
	fprintf(out, "drops        %" PRIu64 " (lost %" PRIu64 ", refused %" PRIu64 ")\n", ctl_drops(e), e->lost,
		e->refused);
	fprintf(out, "devices      %" PRIu32 " registration%s%s%s%s%s\n", e->device_regs, e->device_regs == 1 ? "" : "s",
		e->device_kinds ? " (" : "", e->device_kinds & 1u << PINSHM_DEVICE_CUDA ? "cuda" : "",
		e->device_kinds == (1u << PINSHM_DEVICE_CUDA | 1u << PINSHM_DEVICE_OPENCL) ? ", opencl" :
		e->device_kinds & 1u << PINSHM_DEVICE_OPENCL ? "opencl" : "",
		e->device_kinds ? ")" : "");
}

void ctl_duration_string(uint64_t ms, char *buf, size_t len)
{
	uint64_t s = ms / 1000, m = s / 60, h = m / 60, d = h / 24;

	if (d > 0)
		snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h%02" PRIu64 "m", d, h % 24, m % 60);
	else if (h > 0)
		snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m%02" PRIu64 "s", h, m % 60, s % 60);
	else if (m > 0)
		snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", m, s % 60);
	else
		snprintf(buf, len, "%" PRIu64 "s", s);
}

/* A size, or "unlimited" for UINT64_MAX. */
static const char *limit_string(uint64_t bytes, char *buf, size_t len)
{
	if (bytes == UINT64_MAX)
		snprintf(buf, len, "unlimited");
	else
		ctl_size_string(bytes, buf, len);
	return buf;
}

/* The pool's line: what it holds of the pinned figure, and whether it fills. */
static void print_pool_line(FILE *out, const pinshm_pool_t *pool)
{
	char b1[32];

	if (pool->count == 0 && pool->pinned == 0) {
		fprintf(out, "pool         none\n");
		return;
	}
	ctl_size_string(pool->pinned, b1, sizeof(b1));
	fprintf(out, "pool         %s of it (%" PRIu64 " bytes), charged to no user; %" PRIu64 " hit%s, %" PRIu64 " miss%s%s\n",
		b1, pool->pinned, pool->hits, pool->hits == 1 ? "" : "s", pool->misses, pool->misses == 1 ? "" : "es",
		pool->flags & PINSHM_POOL_STOPPED ? "; stopped: a segment could not be made or locked (see the log)"
						  : "");
}

/* The pool's classes: one row each. */
static void print_pool_classes(FILE *out, const pinshm_pool_t *pool)
{
	char size[32], locked[32], pinned[32];
	uint32_t count = pool->count < PINSHM_POOL_CLASSES_MAX ? pool->count : PINSHM_POOL_CLASSES_MAX;

	if (count == 0)
		return;
	fprintf(out, "\n%8s  %6s  %5s  %7s  %8s  %8s\n", "CLASS", "WANTED", "READY", "FILLING", "LOCKED", "PINNED");
	for (uint32_t i = 0; i < count; i++) {
		const pinshm_pool_class_t *c = &pool->classes[i];
		ctl_size_string(c->size, size, sizeof(size));
		if (c->filling)
			ctl_size_string(c->locked, locked, sizeof(locked));
		else
			snprintf(locked, sizeof(locked), "-");
		/* Charged: its ready segments and the one being filled, whole. */
		uint64_t segs = (uint64_t)c->ready + c->filling;
		ctl_size_string(c->size && segs > UINT64_MAX / c->size ? UINT64_MAX : segs * c->size, pinned,
				sizeof(pinned));
		fprintf(out, "%8s  %6" PRIu32 "  %5" PRIu32 "  %7" PRIu32 "  %8s  %8s\n", size, c->wanted, c->ready,
			c->filling, locked, pinned);
	}
}

void ctl_print_status(FILE *out, const pinshm_status_t *st, const pinshm_pool_t *pool, const pinshm_user_usage_t *u,
		      size_t n)
{
	char b1[32], b2[32], b3[32], name[NAME_BUF];
	int wuser = 4;

	ctl_duration_string(st->uptime_ms, b1, sizeof(b1));
	fprintf(out, "daemon       pid %" PRIu32 ", %s mode, up %s\n", st->pid,
		st->flags & PINSHM_STATUS_USER_MODE ? "user" : "system", b1);
	ctl_size_string(st->pinned, b1, sizeof(b1));
	fprintf(out, "pinned       %s of %s budget (%" PRIu64 " bytes)\n", b1, limit_string(st->budget, b2, sizeof(b2)),
		st->pinned);
	if (pool)
		print_pool_line(out, pool);
	fprintf(out, "channels     %" PRIu64 " (%" PRIu32 " pinned, %" PRIu32 " unpinned)\n",
		(uint64_t)st->channels_pinned + st->channels_unpinned, st->channels_pinned, st->channels_unpinned);
	fprintf(out, "connections  %" PRIu32 "\n", st->connections);
	if (pool)
		print_pool_classes(out, pool);
	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		wuser = widest(wuser, user_name(u[i].uid, name, sizeof(name)));
	fprintf(out, "\n%-*s  %10s  %8s  %11s  %8s  %8s  %9s\n", wuser, "USER", "UID", "CHANNELS", "CONNECTIONS",
		"PINNED", "CHARGED", "QUOTA");
	for (size_t i = 0; i < n; i++) {
		ctl_size_string(u[i].pinned, b1, sizeof(b1));
		ctl_size_string(u[i].charged, b2, sizeof(b2));
		fprintf(out, "%-*s  %10" PRIu32 "  %8" PRIu32 "  %11" PRIu32 "  %8s  %8s  %9s\n", wuser,
			user_name(u[i].uid, name, sizeof(name)), u[i].uid, u[i].channels, u[i].connections, b1, b2,
			limit_string(u[i].quota, b3, sizeof(b3)));
	}
}

/* A byte count, or null for UINT64_MAX (unlimited). */
static void json_limit(FILE *out, uint64_t v)
{
	if (v == UINT64_MAX)
		fputs("null", out);
	else
		fprintf(out, "%" PRIu64, v);
}

/* The pool as a JSON object (members indented by 4), after "pool": . */
static void print_pool_json(FILE *out, const pinshm_pool_t *pool)
{
	uint32_t count = pool->count < PINSHM_POOL_CLASSES_MAX ? pool->count : PINSHM_POOL_CLASSES_MAX;

	fprintf(out, "{\n    \"pinned\": %" PRIu64 ",\n    \"hits\": %" PRIu64 ",\n    \"misses\": %" PRIu64
		",\n    \"stopped\": %s,\n    \"classes\": [",
		pool->pinned, pool->hits, pool->misses, pool->flags & PINSHM_POOL_STOPPED ? "true" : "false");
	for (uint32_t i = 0; i < count; i++) {
		const pinshm_pool_class_t *c = &pool->classes[i];
		fprintf(out, "%s\n      {\"size\": %" PRIu64 ", \"wanted\": %" PRIu32 ", \"ready\": %" PRIu32
			", \"filling\": %" PRIu32 ", \"locked\": %" PRIu64 "}",
			i ? "," : "", c->size, c->wanted, c->ready, c->filling, c->locked);
	}
	fputs(count ? "\n    ]\n  }" : "]\n  }", out);
}

void ctl_print_status_json(FILE *out, const pinshm_status_t *st, const pinshm_pool_t *pool,
			   const pinshm_user_usage_t *u, size_t n)
{
	char name[NAME_BUF];

	fprintf(out, "{\n  \"pid\": %" PRIu32 ",\n  \"user_mode\": %s,\n  \"uptime_ms\": %" PRIu64 ",\n  \"budget\": ",
		st->pid, st->flags & PINSHM_STATUS_USER_MODE ? "true" : "false", st->uptime_ms);
	json_limit(out, st->budget);
	fprintf(out, ",\n  \"pinned\": %" PRIu64 ",\n  \"channels\": %" PRIu64 ",\n  \"channels_pinned\": %" PRIu32
		",\n  \"channels_unpinned\": %" PRIu32 ",\n  \"connections\": %" PRIu32 ",\n",
		st->pinned, (uint64_t)st->channels_pinned + st->channels_unpinned, st->channels_pinned,
		st->channels_unpinned, st->connections);
	if (pool) {
		fputs("  \"pool\": ", out);
		print_pool_json(out, pool);
		fputs(",\n", out);
	}
	fputs("  \"users\": [", out);
	for (size_t i = 0; i < n; i++) {
		fputs(i ? ",\n    {\"user\": " : "\n    {\"user\": ", out);
		ctl_json_string(out, user_name(u[i].uid, name, sizeof(name)));
		fprintf(out, ", \"uid\": %" PRIu32 ", \"channels\": %" PRIu32 ", \"connections\": %" PRIu32
			", \"pinned\": %" PRIu64 ", \"charged\": %" PRIu64 ", \"quota\": ",
			u[i].uid, u[i].channels, u[i].connections, u[i].pinned, u[i].charged);
		json_limit(out, u[i].quota);
		fputc('}', out);
	}
	fputs(n ? "\n  ]\n}\n" : "]\n}\n", out);
}

void ctl_print_clients(FILE *out, const pinshm_client_info_t *c, size_t n)
{
	char user[NAME_BUF], group[NAME_BUF];
	int wuser = 4, wgroup = 5;

	for (size_t i = 0; i < n; i++) {
		wuser = widest(wuser, user_name(c[i].uid, user, sizeof(user)));
		wgroup = widest(wgroup, group_name(c[i].gid, group, sizeof(group)));
	}
	fprintf(out, "%8s  %10s  %-*s  %-*s  %8s  %9s\n", "ID", "PID", wuser, "USER", wgroup, "GROUP", "CHANNELS",
		"ENDPOINTS");
	for (size_t i = 0; i < n; i++)
		fprintf(out, "%8" PRIu64 "  %10" PRIu32 "  %-*s  %-*s  %8" PRIu32 "  %9" PRIu32 "\n", c[i].id, c[i].pid,
			wuser, user_name(c[i].uid, user, sizeof(user)), wgroup,
			group_name(c[i].gid, group, sizeof(group)), c[i].channels, c[i].endpoints);
}

void ctl_print_clients_json(FILE *out, const pinshm_client_info_t *c, size_t n)
{
	char buf[NAME_BUF];

	fputc('[', out);
	for (size_t i = 0; i < n; i++) {
		fprintf(out, "%s\n  {\n    \"id\": %" PRIu64, i ? "," : "", c[i].id);
		json_field_u64(out, "pid", c[i].pid);
		json_field_str(out, "user", user_name(c[i].uid, buf, sizeof(buf)));
		json_field_u64(out, "uid", c[i].uid);
		json_field_str(out, "group", group_name(c[i].gid, buf, sizeof(buf)));
		json_field_u64(out, "gid", c[i].gid);
		json_field_u64(out, "channels", c[i].channels);
		json_field_u64(out, "endpoints", c[i].endpoints);
		fputs("\n  }", out);
	}
	fputs(n ? "\n]\n" : "]\n", out);
}
