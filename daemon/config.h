/*
 * config.h - pinshmd's configuration file (pinshmd.conf(5)).
 *
 * An INI file read with libinih.  config_load() reads one whole file into
 * a fresh struct config, or fails with the first error as "FILE:LINE:
 * what" and leaves nothing behind: the daemon refuses to start on it, and
 * a reload keeps the configuration it had.  Every key is checked: an
 * unknown section or key, a key given twice, a bad value, a user or group
 * that does not exist are errors.
 *
 * What the values mean is for the other modules: the budget and the limits
 * for account.h, the access lists for config_admits(), the name rules for
 * names.h.  A config is never changed once loaded; a reload makes a new one.
 */
#ifndef PINSHMD_CONFIG_H
#define PINSHMD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cred.h"
#include "names.h"

/* The configuration file of a system daemon started without -c. */
#define CONFIG_SYSTEM_FILE "/etc/pinshm/pinshmd.conf"

/* Most sizes of pool_sizes, most pool_segments, largest pool size. */
#define CONFIG_POOL_MAX_SIZES 8u
#define CONFIG_POOL_MAX_SEGMENTS 64u
#define CONFIG_POOL_MAX_SIZE (1ull << 30)

/* The longest pin_idle (PINSHM_PIN_IDLE_MAX). */
#define CONFIG_PIN_IDLE_MAX 31536000u

/* A limit that is not set. */
#define CONFIG_UNLIMITED UINT64_MAX

/* The default per-user limits of connections and channels: half of what
 * the daemon takes in all (1024 connections, 4096 channels), so that one
 * user cannot take every slot from the others. */
#define CONFIG_DEFAULT_MAX_CONNECTIONS 512u
#define CONFIG_DEFAULT_MAX_CHANNELS 2048u

/*
 * The defaults of default_user_quota and max_segment_size, derived from
 * the budget (half of RAM unless set) where the file sets neither
 * (config_derived_limits()):
 *   quota       = max(CONFIG_MPI_NODE_BYTES, budget / 4)
 *   max segment = max(CONFIG_SEGMENT_FLOOR, budget / 64)
 * (over a small budget, the budget is what binds, as before).
 * CONFIG_MPI_NODE_BYTES: the channels the MPI plugin makes for one node by
 * default, all of one user: 1 GiB of rings (PINSHM_MPI_NODE_RINGS) and
 * their headers (1037 MiB at 256 ranks).  CONFIG_SEGMENT_FLOOR: well above
 * its largest queue (44 MiB at 22 ranks) and the 4 MiB default channel.
 */
#define CONFIG_MPI_NODE_BYTES (1088ull << 20)
#define CONFIG_SEGMENT_FLOOR (256ull << 20)

/* The limits of one user; each CONFIG_UNLIMITED where none applies. */
struct config_limits {
	uint64_t quota;           /* bytes of the user's channels' segments */
	uint64_t max_connections; /* connections open at once */
	uint64_t max_channels;    /* channels owned, alive (named or not) */
};

/* A [user NAME] section: what it sets, the rest from [daemon]. */
struct config_user {
	uid_t uid;
	bool has_quota, has_connections, has_channels;
	struct config_limits limits;
};

/* How channels get their segment when the request leaves it to the daemon
 * (segment.h): the backend key of [daemon]. */
enum config_backend {
	CONFIG_BACKEND_AUTO,  /* sealed memfd where the mode admits another user, shm otherwise */
	CONFIG_BACKEND_MEMFD, /* always the sealed memfd */
	CONFIG_BACKEND_SHM,   /* always shm (huge pages still take a memfd) */
};

struct config {
	char *path;                 /* the file read, NULL: no file (every default) */
	char *socket;               /* [daemon] socket, NULL: not set */
	uint64_t budget;            /* pinned bytes, all users together (default: half of RAM) */
	uint64_t max_segment_size;  /* bytes of one channel's segment (default: derived, see above) */
	unsigned pool_segments;     /* ready segments per pool size, 0: no pool */
	bool pool_segments_set;     /* given in the file (else 0 in user mode) */
	uint64_t pool_sizes[CONFIG_POOL_MAX_SIZES]; /* segment sizes of the pool (pool.h) */
	unsigned npool_sizes;
	enum config_backend backend; /* default backend of a channel (auto) */
	uint32_t pin_idle;          /* default working-set pinning: seconds idle before a channel is
				     * unlocked, 0: always pinned (the default) */
	struct config_limits user_default; /* default_user_quota (default: derived), max_*_per_user */
	struct config_user *users;  /* [user ...] sections, in file order */
	unsigned nusers;
	bool access_set;            /* [access] has allow_users or allow_groups */
	uid_t *allow_uids;
	unsigned nallow_uids;
	gid_t *allow_gids;
	unsigned nallow_gids;
	struct names names;         /* [names] and shared_names: who may create which names */
};

/**
 * Read the configuration file @p path (NULL: none, every default).
 * @param out    set to a new config (free with config_free()) on success.
 * @param why    on failure, "PATH:LINE: what is wrong" (or "PATH: ..."
 *               for a file that cannot be read or is not safe).
 * @return 0; -ENOENT, -EACCES...: the file cannot be opened; -EPERM: run
 *         as root, a file that another user owns or may write; -EINVAL: a
 *         syntax error or a bad key or value; -ENOMEM.
 */
int config_load(const char *path, struct config **out, char *why, size_t whylen);

/**
 * config_load() of the file contents @p buf, @p len bytes (any bytes), as if
 * read from a file named @p name (in messages), without the checks of the
 * file itself.  For the fuzz target and the tests.
 */
int config_load_buffer(const char *name, const void *buf, size_t len, struct config **out, char *why,
		       size_t whylen);

void config_free(struct config *cfg);

/**
 * The default quota and max_segment_size for a budget of @p budget bytes,
 * by the rule above (both CONFIG_UNLIMITED for an unlimited budget).
 */
void config_derived_limits(uint64_t budget, uint64_t *quota, uint64_t *max_segment);

/** The limits that apply to @p uid: its [user] section over the defaults. */
struct config_limits config_limits_of(const struct config *cfg, uid_t uid);

/**
 * Whether the [access] lists admit a connection of @p c: always when no
 * list is set, always root and @p daemon_uid; otherwise its uid is in
 * allow_users or its primary or a supplementary group is in allow_groups.
 */
bool config_admits(const struct config *cfg, const struct cred *c, uid_t daemon_uid);

/**
 * A user name or number (with @p group: a group's) into @p id, as the file's
 * keys take them.  @return 0, -EINVAL (a bad number) or -ENOENT (no such name).
 */
int config_resolve_id(const char *s, bool group, unsigned long *id);

/**
 * Parse a size: digits, then optionally K, M, G or T (powers of 1024, case
 * ignored, an optional "iB" or "B" after it), or "unlimited" where
 * @p unlimited_ok.  @return 0 or -EINVAL (also on overflow).
 */
int config_parse_size(const char *s, bool unlimited_ok, uint64_t *out);

#endif /* PINSHMD_CONFIG_H */
