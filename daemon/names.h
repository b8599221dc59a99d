/*
 * names.h - who may create which channel names (pinshmd.conf(5), [names]).
 *
 * Three rules, checked at CREATE (and when a client hands back a channel
 * the daemon does not know, HANDBACK: a name it may not create is not given):
 *
 * - a name of the owned form "@UID.REST" (proto_name_owner()) belongs to
 *   that uid: only it may create it;
 * - a name that starts with a prefix of [names] is reserved to the user or
 *   the group (its members, primary or supplementary) of the longest such
 *   prefix (several lines of one prefix: any of them);
 * - any other name is shared: anyone may create it, unless shared_names is
 *   off ([daemon] shared_names = no).
 *
 * Root may create any name.  Users and groups are resolved when the file
 * is read (a reload reads them again): no lookup on the request path.
 */
#ifndef PINSHMD_NAMES_H
#define PINSHMD_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cred.h"
#include "pinshm.h"

/* Most lines of [names]. */
#define NAMES_MAX_RULES 1024u

/* One line of [names]: names starting with prefix are reserved to a user
 * (uid) or a group (gid). */
struct names_rule {
	char prefix[PINSHM_NAME_MAX + 1];
	bool group;
	uint32_t id;
};

struct names {
	struct names_rule *rules; /* in file order */
	unsigned nrules;
	bool closed;     /* shared_names = no */
	bool closed_set; /* shared_names given (once only) */
};

/**
 * Add the [names] line "@p prefix = @p value", value "user:NAME",
 * "uid:N", "group:NAME" or "gid:N" (NAME resolved now, by @p resolve:
 * config_resolve_id()).  @return 0, or -EINVAL/-ENOMEM with @p why.
 */
int names_rule_add(struct names *n, const char *prefix, const char *value,
		   int (*resolve)(const char *s, bool group, unsigned long *id), char *why, size_t whylen);

/** [daemon] shared_names = yes | no.  @return 0, or -EINVAL with @p why. */
int names_shared(struct names *n, const char *value, char *why, size_t whylen);

void names_free(struct names *n);

/**
 * Whether @p c may create a channel named @p name (a valid name) under the
 * rules of @p n.  @return 0, or -EPERM with the reason in @p why.
 */
int names_may_create(const struct names *n, const struct cred *c, const char *name, char *why, size_t whylen);

#endif /* PINSHMD_NAMES_H */
