/*
 * cred.h - who is on the other end of a connection, and what they may do.
 */
#ifndef PINSHMD_CRED_H
#define PINSHMD_CRED_H

#include <stdbool.h>
#include <sys/types.h>

struct cred {
	pid_t pid; /* at connect time (informational) */
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* supplementary groups */
	unsigned ngroups;
};

/* Access wanted, as the permission bits of a file's class. */
#define CRED_READ 4u
#define CRED_WRITE 2u

/**
 * Read the peer's credentials of Unix socket @p fd: SO_PEERCRED, and its
 * supplementary groups with SO_PEERGROUPS.
 * @return 0 or -errno; free with cred_free().
 */
int cred_from_socket(int fd, struct cred *c);

void cred_free(struct cred *c);

/** @return whether @p gid is @p c's primary or one of its supplementary groups. */
bool cred_in_group(const struct cred *c, gid_t gid);

/**
 * Whether @p c may have access @p want (CRED_READ | CRED_WRITE) to an object
 * owned by @p owner and @p group with permission bits @p mode, as for a
 * file: root may do anything; the owner gets the owner bits, a member of
 * the group (primary or supplementary) the group bits, anyone else the
 * other bits.
 */
bool cred_may(const struct cred *c, uid_t owner, gid_t group, unsigned mode, unsigned want);

#endif /* PINSHMD_CRED_H */
