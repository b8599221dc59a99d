/*
 * cred.c - peer credentials and the permission check.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "cred.h"

/* Supplementary groups read at once; more are read in a second call. */
#define CRED_GROUPS_FIRST 32u
/* NGROUPS_MAX of Linux. */
#define CRED_GROUPS_MAX 65536u

int cred_from_socket(int fd, struct cred *c)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	*c = (struct cred){0};
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0)
		return -errno;
	if (len != sizeof(uc))
		return -EPROTO;
	c->pid = uc.pid;
	c->uid = uc.uid;
	c->gid = uc.gid;

	/* SO_PEERGROUPS says how much room it needs with ERANGE. */
	len = CRED_GROUPS_FIRST * sizeof(gid_t);
	for (int attempt = 0; attempt < 2; attempt++) {
		gid_t *groups = malloc(len ? len : sizeof(gid_t));
		if (!groups)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
			c->groups = groups;
			c->ngroups = len / sizeof(gid_t);
			return 0;
		}
		int err = errno;
		free(groups);
		if (err != ERANGE || len > CRED_GROUPS_MAX * sizeof(gid_t))
			return err == ERANGE ? -E2BIG : -err;
	}
	return -EAGAIN; /* the groups kept growing: cannot happen for one socket */
}

void cred_free(struct cred *c)
{
	free(c->groups);
	c->groups = NULL;
	c->ngroups = 0;
}

bool cred_in_group(const struct cred *c, gid_t gid)
{
	if (c->gid == gid)
		return true;
	for (unsigned i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

bool cred_may(const struct cred *c, uid_t owner, gid_t group, unsigned mode, unsigned want)
{
	unsigned bits;

	if (c->uid == 0)
		return true;
	if (c->uid == owner)
		bits = mode >> 6;
	else if (cred_in_group(c, group))
		bits = mode >> 3;
	else
		bits = mode;
	return (bits & want & 7u) == (want & 7u);
}
