/*
 * config.c - read and check pinshmd.conf with libinih.
 *
 * libinih reads a line at a time through read_line(), which counts the
 * lines, so that a key's handler knows where it stands (the handler of
 * libinih has no line number in every build of it), a line too long for
 * libinih is an error, not two lines, and an indented line is not taken
 * for the continuation of the value above it.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"

/* Most entries of one allow_users or allow_groups list. */
#define CONFIG_MAX_LIST 1024u
/* Most [user] sections. */
#define CONFIG_MAX_USERS 4096u
/* Most connections or channels a limit may name (beyond any real one). */
#define CONFIG_MAX_COUNT 1000000000ull

struct parse {
	struct config *cfg;
	const char *path;
	FILE *f;
	unsigned line;      /* of the line read last */
	unsigned err_line;  /* of the first error, 0: none */
	int err;
	char why[320];
	unsigned seen_daemon, seen_access; /* keys given, one bit each */
};

static int perr(struct parse *p, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record the first error, at the line being read. */
static int perr(struct parse *p, int err, const char *fmt, ...)
{
	va_list ap;

	if (p->err_line)
		return err;
	int n = snprintf(p->why, sizeof(p->why), "%s:%u: ", p->path, p->line);
	if (n < 0 || (size_t)n >= sizeof(p->why))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(p->why + n, sizeof(p->why) - (size_t)n, fmt, ap);
	va_end(ap);
	p->err_line = p->line;
	p->err = err;
	return err;
}

/* libinih's reader: one line per call, counted. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse *p = stream;
	long start = ftell(p->f);

	if (!fgets(str, num, p->f))
		return NULL;
	p->line++;
	size_t len = strlen(str);
	long end = ftell(p->f);
	/* fgets() reads on past a NUL byte, which would cut the line short
	 * unseen (a NUL first: the line ignored whole). */
	if (start >= 0 && end >= 0 && (size_t)(end - start) != len) {
		perr(p, -EINVAL, "NUL byte in the line");
		str[0] = '\0';
		return str;
	}
	if (len > 0 && str[len - 1] != '\n' && !feof(p->f)) {
		int c;
		while ((c = fgetc(p->f)) != EOF && c != '\n')
			;
		perr(p, -EINVAL, "line longer than %d characters", num - 2);
		str[0] = '\0'; /* an empty line for libinih */
	}
	/* Indented lines are lines like the others, not libinih's
	 * continuation of the value above. */
	size_t blanks = strspn(str, " \t");
	if (blanks)
		memmove(str, str + blanks, strlen(str + blanks) + 1);
	return str;
}

int config_parse_size(const char *s, bool unlimited_ok, uint64_t *out)
{
	char *end;

	if (unlimited_ok && strcmp(s, "unlimited") == 0) {
		*out = CONFIG_UNLIMITED;
		return 0;
	}
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0)
		return -EINVAL;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	}
	if (shift) {
		end++;
		if (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0)
			end += strlen(end);
	}
	if (*end != '\0' || (shift && v > (UINT64_MAX >> shift)) || (v << shift) == CONFIG_UNLIMITED)
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* A count of connections or channels, or "unlimited". */
static int parse_count(const char *s, uint64_t *out)
{
	char *end;

	if (strcmp(s, "unlimited") == 0) {
		*out = CONFIG_UNLIMITED;
		return 0;
	}
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > CONFIG_MAX_COUNT)
		return -EINVAL;
	*out = v;
	return 0;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/*
 * A user name or number (with @p group: a group's) into @p id.  A number need
 * not name an existing user or group; it is below the type's all-ones value,
 * which means "none".  @return 0, -EINVAL (a bad number) or -ENOENT (no such name).
 */
static int resolve_id(const char *s, bool group, unsigned long *id)
{
	if (all_digits(s)) {
		errno = 0;
		*id = strtoul(s, NULL, 10);
		return errno != 0 || *id >= (group ? (unsigned long)(gid_t)-1 : (unsigned long)(uid_t)-1) ? -EINVAL : 0;
	}
	if (group) {
		const struct group *gr = getgrnam(s);
		if (!gr)
			return -ENOENT;
		*id = gr->gr_gid;
	} else {
		const struct passwd *pw = getpwnam(s);
		if (!pw)
			return -ENOENT;
		*id = pw->pw_uid;
	}
	return 0;
}

/* Half of physical memory, the default budget. */
static uint64_t half_of_ram(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

	return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : CONFIG_UNLIMITED;
}

/* budget = SIZE or N% of physical memory, above 0. */
static int parse_budget(struct parse *p, const char *value)
{
	size_t len = strlen(value);
	uint64_t v;

	if (len > 1 && value[len - 1] == '%') {
		char num[16];
		char *end;
		if (len - 1 >= sizeof(num))
			return perr(p, -EINVAL, "budget: bad percentage '%s'", value);
		memcpy(num, value, len - 1);
		num[len - 1] = '\0';
		unsigned long pct = strtoul(num, &end, 10);
		if (!all_digits(num) || *end || pct < 1 || pct > 100)
			return perr(p, -EINVAL, "budget: '%s' is not a percentage of 1%% to 100%%", value);
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
		if (pages <= 0 || page <= 0)
			return perr(p, -EINVAL, "budget: the size of physical memory is not known; give bytes");
		p->cfg->budget = (uint64_t)pages * (uint64_t)page / 100 * pct;
		return 0;
	}
	if (config_parse_size(value, false, &v) != 0 || v == 0)
		return perr(p, -EINVAL, "budget: '%s' is not a size above 0 (bytes, with K, M, G or T) or a percentage",
			    value);
	p->cfg->budget = v;
	return 0;
}

static int set_size(struct parse *p, const char *key, const char *value, bool unlimited_ok, uint64_t *out)
{
	if (config_parse_size(value, unlimited_ok, out) != 0)
		return perr(p, -EINVAL, "%s: '%s' is not a size (bytes, with K, M, G or T%s)", key, value,
			    unlimited_ok ? ", or unlimited" : "");
	return 0;
}

static int set_count(struct parse *p, const char *key, const char *value, uint64_t *out)
{
	if (parse_count(value, out) != 0)
		return perr(p, -EINVAL, "%s: '%s' is not a number of 0 to %llu, or unlimited", key, value,
			    CONFIG_MAX_COUNT);
	return 0;
}

/* Mark key @p bit of a section as given; a second time is an error. */
static int once(struct parse *p, unsigned *seen, unsigned bit, const char *section, const char *key)
{
	if (*seen & (1u << bit))
		return perr(p, -EINVAL, "%s: given twice in [%s]", key, section);
	*seen |= 1u << bit;
	return 0;
}

/* pool_segments = N, 0..CONFIG_POOL_MAX_SEGMENTS. */
static int parse_pool_segments(struct parse *p, const char *value)
{
	uint64_t n;

	if (parse_count(value, &n) != 0 || n > CONFIG_POOL_MAX_SEGMENTS)
		return perr(p, -EINVAL, "pool_segments: '%s' is not a number of 0 to %u", value,
			    CONFIG_POOL_MAX_SEGMENTS);
	p->cfg->pool_segments = (unsigned)n;
	p->cfg->pool_segments_set = true;
	return 0;
}

/* pool_sizes = SIZE..., separated by commas or blanks; may be empty. */
static int parse_pool_sizes(struct parse *p, const char *value)
{
	struct config *cfg = p->cfg;
	char *copy = strdup(value), *save = NULL;
	int rc = 0;

	if (!copy)
		return perr(p, -ENOMEM, "out of memory");
	cfg->npool_sizes = 0;
	for (char *tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		uint64_t v;
		if (cfg->npool_sizes == CONFIG_POOL_MAX_SIZES) {
			rc = perr(p, -EINVAL, "pool_sizes: more than %u sizes", CONFIG_POOL_MAX_SIZES);
			break;
		}
		if (config_parse_size(tok, false, &v) != 0 || v == 0 || v > CONFIG_POOL_MAX_SIZE) {
			rc = perr(p, -EINVAL, "pool_sizes: '%s' is not a size of 1 byte to 1G", tok);
			break;
		}
		cfg->pool_sizes[cfg->npool_sizes++] = v;
	}
	free(copy);
	return rc;
}

/* pin_idle = always | SECONDS (1..CONFIG_PIN_IDLE_MAX). */
static int parse_pin_idle(struct parse *p, const char *value)
{
	char *end;

	if (strcmp(value, "always") == 0) {
		p->cfg->pin_idle = 0;
		return 0;
	}
	errno = 0;
	unsigned long long n = strtoull(value, &end, 10);
	if (!isdigit((unsigned char)value[0]) || errno != 0 || *end != '\0' || n < 1 || n > CONFIG_PIN_IDLE_MAX)
		return perr(p, -EINVAL, "pin_idle: '%s' is not always or a number of seconds, 1 to %u", value,
			    CONFIG_PIN_IDLE_MAX);
	p->cfg->pin_idle = (uint32_t)n;
	return 0;
}

/* backend = auto | memfd | shm. */
static int parse_backend(struct parse *p, const char *value)
{
	if (strcmp(value, "auto") == 0)
		p->cfg->backend = CONFIG_BACKEND_AUTO;
	else if (strcmp(value, "memfd") == 0)
		p->cfg->backend = CONFIG_BACKEND_MEMFD;
	else if (strcmp(value, "shm") == 0)
		p->cfg->backend = CONFIG_BACKEND_SHM;
	else
		return perr(p, -EINVAL, "backend: '%s' is not auto, memfd or shm", value);
	return 0;
}

/* Bits of parse.seen_daemon: the index of the key in daemon_key()'s list. */
enum { KEY_DEFAULT_USER_QUOTA = 2, KEY_MAX_SEGMENT_SIZE = 5 };

static int daemon_key(struct parse *p, const char *key, const char *value)
{
	static const char *const keys[] = {"socket", "budget", "default_user_quota", "max_connections_per_user",
					   "max_channels_per_user", "max_segment_size", "pool_segments", "pool_sizes",
					   "backend", "pin_idle"};
	struct config *cfg = p->cfg;
	unsigned k;
	int rc;

	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		if (strcmp(key, keys[k]) == 0)
			break;
	if (k == sizeof(keys) / sizeof(keys[0]))
		return perr(p, -EINVAL, "unknown key '%s' in [daemon]", key);
	rc = once(p, &p->seen_daemon, k, "daemon", key);
	if (rc != 0)
		return rc;
	switch (k) {
	case 0:
		if (value[0] != '/' || strlen(value) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return perr(p, -EINVAL, "socket: '%s' is not an absolute path of at most %zu characters",
				    value, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		cfg->socket = strdup(value);
		return cfg->socket ? 0 : perr(p, -ENOMEM, "out of memory");
	case 1:
		return parse_budget(p, value);
	case KEY_DEFAULT_USER_QUOTA:
		return set_size(p, key, value, true, &cfg->user_default.quota);
	case 3:
		return set_count(p, key, value, &cfg->user_default.max_connections);
	case 4:
		return set_count(p, key, value, &cfg->user_default.max_channels);
	case 6:
		return parse_pool_segments(p, value);
	case 7:
		return parse_pool_sizes(p, value);
	case 8:
		return parse_backend(p, value);
	case 9:
		return parse_pin_idle(p, value);
	default:
		rc = set_size(p, key, value, true, &cfg->max_segment_size);
		if (rc == 0 && cfg->max_segment_size == 0)
			return perr(p, -EINVAL, "max_segment_size: must be above 0");
		return rc;
	}
}

/* Add the names or numbers of @p value, separated by commas or blanks. */
static int access_list(struct parse *p, const char *key, const char *value, bool groups)
{
	struct config *cfg = p->cfg;
	unsigned *n = groups ? &cfg->nallow_gids : &cfg->nallow_uids;
	char *copy = strdup(value), *save = NULL;
	int rc = 0;

	static_assert(sizeof(uid_t) == sizeof(gid_t), "one array growth serves both lists");
	if (!copy)
		return perr(p, -ENOMEM, "out of memory");
	for (char *tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
		unsigned long id;
		if (*n >= CONFIG_MAX_LIST) {
			rc = perr(p, -EINVAL, "%s: more than %u entries", key, CONFIG_MAX_LIST);
			break;
		}
		if (resolve_id(tok, groups, &id) != 0) {
			rc = perr(p, -EINVAL, "%s: no %s '%s'", key, groups ? "group" : "user", tok);
			break;
		}
		void *a = realloc(groups ? (void *)cfg->allow_gids : (void *)cfg->allow_uids, (*n + 1) * sizeof(uid_t));
		if (!a) {
			rc = perr(p, -ENOMEM, "out of memory");
			break;
		}
		if (groups) {
			cfg->allow_gids = a;
			cfg->allow_gids[(*n)++] = (gid_t)id;
		} else {
			cfg->allow_uids = a;
			cfg->allow_uids[(*n)++] = (uid_t)id;
		}
	}
	free(copy);
	cfg->access_set = true;
	return rc;
}

static int access_key(struct parse *p, const char *key, const char *value)
{
	bool groups;
	int rc;

	if (strcmp(key, "allow_users") == 0)
		groups = false;
	else if (strcmp(key, "allow_groups") == 0)
		groups = true;
	else
		return perr(p, -EINVAL, "unknown key '%s' in [access]", key);
	rc = once(p, &p->seen_access, groups, "access", key);
	return rc != 0 ? rc : access_list(p, key, value, groups);
}

/* The entry of [user @p who], made if new. */
static int user_entry(struct parse *p, const char *who, struct config_user **out)
{
	struct config *cfg = p->cfg;
	unsigned long id;

	if (resolve_id(who, false, &id) != 0)
		return perr(p, -EINVAL, "[user %s]: no such user", who);
	uid_t uid = (uid_t)id;
	for (unsigned i = 0; i < cfg->nusers; i++)
		if (cfg->users[i].uid == uid) {
			*out = &cfg->users[i];
			return 0;
		}
	if (cfg->nusers >= CONFIG_MAX_USERS)
		return perr(p, -EINVAL, "more than %u [user] sections", CONFIG_MAX_USERS);
	struct config_user *u = realloc(cfg->users, (cfg->nusers + 1) * sizeof(*u));
	if (!u)
		return perr(p, -ENOMEM, "out of memory");
	cfg->users = u;
	u = &cfg->users[cfg->nusers++];
	*u = (struct config_user){.uid = uid};
	*out = u;
	return 0;
}

static int user_key(struct parse *p, const char *section, const char *who, const char *key, const char *value)
{
	struct config_user *u = NULL;
	int rc;

	while (*who == ' ' || *who == '\t')
		who++;
	if (!*who)
		return perr(p, -EINVAL, "[%s]: a user name or number must follow 'user'", section);
	rc = user_entry(p, who, &u);
	if (rc != 0)
		return rc;
	if (strcmp(key, "quota") == 0) {
		if (u->has_quota)
			return perr(p, -EINVAL, "quota: given twice for user %s", who);
		u->has_quota = true;
		return set_size(p, key, value, true, &u->limits.quota);
	}
	if (strcmp(key, "max_connections") == 0) {
		if (u->has_connections)
			return perr(p, -EINVAL, "max_connections: given twice for user %s", who);
		u->has_connections = true;
		return set_count(p, key, value, &u->limits.max_connections);
	}
	if (strcmp(key, "max_channels") == 0) {
		if (u->has_channels)
			return perr(p, -EINVAL, "max_channels: given twice for user %s", who);
		u->has_channels = true;
		return set_count(p, key, value, &u->limits.max_channels);
	}
	return perr(p, -EINVAL, "unknown key '%s' in [%s]", key, section);
}

int config_resolve_id(const char *s, bool group, unsigned long *id)
{
	return resolve_id(s, group, id);
}

/* [names] PREFIX = WHO, and [daemon] shared_names (names.h). */
static int names_key(struct parse *p, bool rule, const char *key, const char *value)
{
	char why[256];
	int rc = rule ? names_rule_add(&p->cfg->names, key, value, config_resolve_id, why, sizeof(why))
		      : names_shared(&p->cfg->names, value, why, sizeof(why));

	return rc != 0 ? perr(p, rc, "%s", why) : 0;
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
	struct parse *p = user;
	int rc;

	if (strcmp(section, "daemon") == 0 && strcmp(key, "shared_names") == 0)
		rc = names_key(p, false, key, value);
	else if (strcmp(section, "names") == 0)
		rc = names_key(p, true, key, value);
	else if (strcmp(section, "daemon") == 0)
		rc = daemon_key(p, key, value);
	else if (strcmp(section, "access") == 0)
		rc = access_key(p, key, value);
	else if (strncmp(section, "user", 4) == 0 && (section[4] == ' ' || section[4] == '\t'))
		rc = user_key(p, section, section + 5, key, value);
	else if (section[0] == '\0')
		rc = perr(p, -EINVAL, "'%s' before any section ([daemon], [access], [names] or [user NAME])", key);
	else
		rc = perr(p, -EINVAL, "unknown section [%s]", section);
	return rc == 0;
}

#if INI_HANDLER_LINENO
static int on_key_lineno(void *user, const char *section, const char *key, const char *value, int lineno)
{
	(void)lineno; /* read_line() counts */
	return on_key(user, section, key, value);
}
#define ON_KEY on_key_lineno
#else
#define ON_KEY on_key
#endif

void config_derived_limits(uint64_t budget, uint64_t *quota, uint64_t *max_segment)
{
	if (budget == CONFIG_UNLIMITED) {
		*quota = *max_segment = CONFIG_UNLIMITED;
		return;
	}
	*quota = budget / 4 > CONFIG_MPI_NODE_BYTES ? budget / 4 : CONFIG_MPI_NODE_BYTES;
	*max_segment = budget / 64 > CONFIG_SEGMENT_FLOOR ? budget / 64 : CONFIG_SEGMENT_FLOOR;
}

/* The limits left unset (@p quota_set, @p segment_set: given in the file),
 * derived from the budget in force. */
static void derive_limits(struct config *cfg, bool quota_set, bool segment_set)
{
	uint64_t quota, segment;

	config_derived_limits(cfg->budget, &quota, &segment);
	if (!quota_set)
		cfg->user_default.quota = quota;
	if (!segment_set)
		cfg->max_segment_size = segment;
}

static struct config *config_defaults(void)
{
	struct config *cfg = calloc(1, sizeof(*cfg));

	if (!cfg)
		return NULL;
	cfg->budget = half_of_ram();
	cfg->max_segment_size = CONFIG_UNLIMITED;
	cfg->user_default = (struct config_limits){CONFIG_UNLIMITED, CONFIG_DEFAULT_MAX_CONNECTIONS,
						   CONFIG_DEFAULT_MAX_CHANNELS};
	/* The segments of a queue of 1 MiB and one producer, and of the
	 * channel of pinshm_channel_attr_init() (1 MiB for each of 4). */
	cfg->pool_segments = 2;
	cfg->pool_sizes[0] = 1032 * 1024;
	cfg->pool_sizes[1] = 4104 * 1024;
	cfg->npool_sizes = 2;
	return cfg;
}

/* The file must be a regular file; run as root, owned by root and
 * writable by no one else (it sets who may pin what). */
static int check_file(FILE *f, const char *path, char *why, size_t whylen)
{
	struct stat st;

	if (fstat(fileno(f), &st) != 0) {
		int err = errno;
		snprintf(why, whylen, "%s: %s", path, strerror(err));
		return -err;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: not a regular file", path);
		return -EINVAL;
	}
	if (geteuid() == 0 && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
		snprintf(why, whylen, "%s: owned by uid %u, mode %03o: refusing a file that anyone but root may change",
			 path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	return 0;
}

/* Read the stream p->f into p->cfg.  @return 0, or as config_load() with
 * @p why set. */
static int parse_stream(struct parse *p, char *why, size_t whylen)
{
	int line = ini_parse_stream(read_line, p, ON_KEY, p);

	if (line < 0) {
		snprintf(why, whylen, "%s: out of memory", p->path);
		return -ENOMEM;
	}
	if (line > 0 && (!p->err_line || (unsigned)line < p->err_line)) {
		snprintf(why, whylen, "%s:%d: syntax error: expected [section], 'key = value' or a comment", p->path,
			 line);
		return -EINVAL;
	}
	if (p->err_line) {
		snprintf(why, whylen, "%s", p->why);
		return p->err;
	}
	if (ferror(p->f)) {
		snprintf(why, whylen, "%s: read error", p->path);
		return -EIO;
	}
	return 0;
}

/*
 * Read the configuration @p name from @p f (NULL where it did not open, for
 * the reason @p open_err), checking it as a file first where @p is_file, and
 * close @p f.  @return as config_load().
 */
static int load_stream(const char *name, FILE *f, int open_err, bool is_file, struct config **out, char *why,
		       size_t whylen)
{
	struct parse p = {.path = name, .f = f};
	int rc;

	*out = NULL;
	p.cfg = config_defaults();
	if (p.cfg)
		p.cfg->path = strdup(name);
	if (!p.cfg || !p.cfg->path || !f) {
		rc = !p.cfg || !p.cfg->path ? -ENOMEM : -open_err;
		snprintf(why, whylen, "%s: %s", name, strerror(-rc));
	} else {
		rc = is_file ? check_file(f, name, why, whylen) : 0;
		if (rc == 0)
			rc = parse_stream(&p, why, whylen);
	}
	if (f)
		fclose(f);
	if (rc != 0) {
		config_free(p.cfg);
		return rc;
	}
	derive_limits(p.cfg, p.seen_daemon & (1u << KEY_DEFAULT_USER_QUOTA), p.seen_daemon & (1u << KEY_MAX_SEGMENT_SIZE));
	*out = p.cfg;
	return 0;
}

int config_load(const char *path, struct config **out, char *why, size_t whylen)
{
	if (!path) {
		*out = config_defaults();
		if (*out) {
			derive_limits(*out, false, false);
			return 0;
		}
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	FILE *f = fopen(path, "re");
	return load_stream(path, f, errno, true, out, why, whylen);
}

int config_load_buffer(const char *name, const void *buf, size_t len, struct config **out, char *why,
		       size_t whylen)
{
	/* Read only ("r"): fmemopen() does not write to buf.  It refuses 0
	 * bytes, so an empty file is read as an empty string. */
	FILE *f = fmemopen(len ? (void *)buf : "", len ? len : 1, "r");
	return load_stream(name, f, errno, false, out, why, whylen);
}

void config_free(struct config *cfg)
{
	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->socket);
	free(cfg->users);
	free(cfg->allow_uids);
	free(cfg->allow_gids);
	names_free(&cfg->names);
	free(cfg);
}

struct config_limits config_limits_of(const struct config *cfg, uid_t uid)
{
	struct config_limits l = cfg->user_default;

	for (unsigned i = 0; i < cfg->nusers; i++) {
		const struct config_user *u = &cfg->users[i];
		if (u->uid != uid)
			continue;
		if (u->has_quota)
			l.quota = u->limits.quota;
		if (u->has_connections)
			l.max_connections = u->limits.max_connections;
		if (u->has_channels)
			l.max_channels = u->limits.max_channels;
		break;
	}
	return l;
}

bool config_admits(const struct config *cfg, const struct cred *c, uid_t daemon_uid)
{
	if (!cfg->access_set || c->uid == 0 || c->uid == daemon_uid)
		return true;
	for (unsigned i = 0; i < cfg->nallow_uids; i++)
		if (cfg->allow_uids[i] == c->uid)
			return true;
	for (unsigned i = 0; i < cfg->nallow_gids; i++)
		if (cred_in_group(c, cfg->allow_gids[i]))
			return true;
	return false;
}
