/*
 * fuzz_config.c - libFuzzer target: pinshmd.conf parsing on arbitrary file
 * contents, through config_load_buffer() (the parser of config_load()
 * without the checks of the file itself).
 *
 * Invariants: the result is 0 or -EINVAL/-ENOMEM/-EIO; a failure leaves no
 * config and says why, naming the file; a file with a NUL byte fails; a
 * success gives a config within its
 * limits (lists, users, socket path, budget and segment size above 0) whose
 * queries (config_limits_of, config_admits) answer for every user it names.
 */
#include <errno.h>
#include <string.h>
#include <sys/un.h>

#include "config.h"
#include "fuzz.h"

#define NAME "fuzz.conf"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *cfg = (struct config *)1;
	char why[256];

	memset(why, 'x', sizeof(why));
	int rc = config_load_buffer(NAME, data, size, &cfg, why, sizeof(why));

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM || rc == -EIO);
	if (rc != 0) {
		FUZZ_CHECK(cfg == NULL);
		FUZZ_CHECK(memchr(why, '\0', sizeof(why)) != NULL);
		FUZZ_CHECK(strncmp(why, NAME, strlen(NAME)) == 0 || rc == -ENOMEM);
		return 0;
	}
	FUZZ_CHECK(cfg != NULL && cfg->path && strcmp(cfg->path, NAME) == 0);
	/* A NUL byte is refused: it used to hide the rest of its line (or
	 * all of it: "\0allow_users = ..." dropped the access list). */
	FUZZ_CHECK(memchr(data, '\0', size) == NULL);
	FUZZ_CHECK(!cfg->socket ||
		   (cfg->socket[0] == '/' && strlen(cfg->socket) < sizeof(((struct sockaddr_un *)0)->sun_path)));
	FUZZ_CHECK(cfg->budget > 0 && cfg->max_segment_size > 0);
	FUZZ_CHECK(cfg->nallow_uids <= 1024 && cfg->nallow_gids <= 1024 && cfg->nusers <= 4096);
	FUZZ_CHECK(cfg->access_set || (cfg->nallow_uids == 0 && cfg->nallow_gids == 0));

	gid_t groups[1] = {0};
	struct cred c = {.pid = 1, .groups = groups, .ngroups = 1};
	for (unsigned i = 0; i < cfg->nusers; i++) {
		const struct config_user *u = &cfg->users[i];
		struct config_limits l = config_limits_of(cfg, u->uid);
		/* The first section of a uid is the one that applies, and
		 * there is only one per uid. */
		for (unsigned j = 0; j < i; j++)
			FUZZ_CHECK(cfg->users[j].uid != u->uid);
		FUZZ_CHECK(!u->has_quota || l.quota == u->limits.quota);
		FUZZ_CHECK(!u->has_connections || l.max_connections == u->limits.max_connections);
		FUZZ_CHECK(!u->has_channels || l.max_channels == u->limits.max_channels);
		c.uid = u->uid;
		c.gid = u->uid;
		(void)config_admits(cfg, &c, 12345);
	}
	for (unsigned i = 0; i < cfg->nallow_uids; i++) {
		c.uid = cfg->allow_uids[i];
		FUZZ_CHECK(config_admits(cfg, &c, 12345));
	}
	c.uid = 0;
	FUZZ_CHECK(config_admits(cfg, &c, 12345)); /* root always */
	config_free(cfg);
	return 0;
}
