/*
 * names.c - the name rules of names.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "protocol.h"

/* A prefix of [names]: 1..PINSHM_NAME_MAX characters that can start a
 * shared name ([A-Za-z0-9._-], not '.' first; so never '@'). */
static bool prefix_valid(const char *prefix)
{
	return prefix[0] != '@' && proto_name_valid(prefix);
}

int names_rule_add(struct names *n, const char *prefix, const char *value,
		   int (*resolve)(const char *s, bool group, unsigned long *id), char *why, size_t whylen)
{
	static const struct {
		const char *tag;
		bool group, number;
	} kinds[] = {{"user:", false, false}, {"uid:", false, true}, {"group:", true, false}, {"gid:", true, true}};
	unsigned k;
	unsigned long id;

	if (!prefix_valid(prefix)) {
		snprintf(why, whylen, "'%s': a prefix is 1 to %d characters of A-Z a-z 0-9 . _ -, not starting with '.'",
			 prefix, PINSHM_NAME_MAX);
		return -EINVAL;
	}
	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (strncmp(value, kinds[k].tag, strlen(kinds[k].tag)) == 0)
			break;
	if (k == sizeof(kinds) / sizeof(kinds[0])) {
		snprintf(why, whylen, "%s: '%s' is not user:NAME, uid:N, group:NAME or gid:N", prefix, value);
		return -EINVAL;
	}
	const char *who = value + strlen(kinds[k].tag);
	bool digits = who[0] != '\0' && strspn(who, "0123456789") == strlen(who);
	if ((kinds[k].number && !digits) || resolve(who, kinds[k].group, &id) != 0) {
		snprintf(why, whylen, "%s: no %s '%s'", prefix, kinds[k].group ? "group" : "user", who);
		return -EINVAL;
	}
	if (n->nrules >= NAMES_MAX_RULES) {
		snprintf(why, whylen, "more than %u lines in [names]", NAMES_MAX_RULES);
		return -EINVAL;
	}
	struct names_rule *r = realloc(n->rules, (n->nrules + 1) * sizeof(*r));
	if (!r) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	n->rules = r;
	r = &n->rules[n->nrules++];
	snprintf(r->prefix, sizeof(r->prefix), "%s", prefix);
	r->group = kinds[k].group;
	r->id = (uint32_t)id;
	return 0;
}

int names_shared(struct names *n, const char *value, char *why, size_t whylen)
{
	if (n->closed_set) {
		snprintf(why, whylen, "shared_names: given twice in [daemon]");
		return -EINVAL;
	}
	if (strcmp(value, "yes") != 0 && strcmp(value, "no") != 0) {
		snprintf(why, whylen, "shared_names: '%s' is not yes or no", value);
		return -EINVAL;
	}
	n->closed = strcmp(value, "no") == 0;
	n->closed_set = true;
	return 0;
}

void names_free(struct names *n)
{
	free(n->rules);
	n->rules = NULL;
	n->nrules = 0;
}

static bool rule_admits(const struct names_rule *r, const struct cred *c)
{
	return r->group ? cred_in_group(c, (gid_t)r->id) : c->uid == (uid_t)r->id;
}

/* The reserved prefix of @p name (the longest one), and whether one of its
 * lines admits @p c.  @return the first line of that prefix, or NULL. */
static const struct names_rule *reserved(const struct names *n, const struct cred *c, const char *name, bool *admits)
{
	const struct names_rule *best = NULL;
	size_t best_len = 0;

	*admits = false;
	for (unsigned i = 0; i < n->nrules; i++) {
		const struct names_rule *r = &n->rules[i];
		size_t len = strlen(r->prefix);
		if (len < best_len || strncmp(name, r->prefix, len) != 0)
			continue;
		if (len > best_len) {
			best = r;
			best_len = len;
			*admits = false;
		}
		*admits = *admits || rule_admits(r, c);
	}
	return best;
}

int names_may_create(const struct names *n, const struct cred *c, const char *name, char *why, size_t whylen)
{
	uid_t owner;
	bool admits;

	if (c->uid == 0)
		return 0;
	if (proto_name_owner(name, &owner)) {
		if (owner == c->uid)
			return 0;
		snprintf(why, whylen, "'%s' belongs to uid %lu by its form: uid %lu may not create it", name,
			 (unsigned long)owner, (unsigned long)c->uid);
		return -EPERM;
	}
	const struct names_rule *r = reserved(n, c, name, &admits);
	if (r && admits)
		return 0;
	if (r) {
		snprintf(why, whylen, "names starting with '%s' are reserved to %s %lu (pinshmd.conf [names]): uid %lu "
				      "may not create '%s'",
			 r->prefix, r->group ? "group" : "uid", (unsigned long)r->id, (unsigned long)c->uid, name);
		return -EPERM;
	}
	if (!n->closed)
		return 0;
	snprintf(why, whylen, "shared names are off (pinshmd.conf shared_names = no): uid %lu may create @%lu.NAME "
			      "and names reserved to it, not '%s'",
		 (unsigned long)c->uid, (unsigned long)c->uid, name);
	return -EPERM;
}
