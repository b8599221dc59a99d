/* error.c - the library's version and error names. */
#include <errno.h>
#include <string.h>

#include "pinshm.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *pinshm_version(void)
{
	return STR(PINSHM_VERSION_MAJOR) "." STR(PINSHM_VERSION_MINOR) "." STR(PINSHM_VERSION_PATCH);
}

const char *pinshm_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EAGAIN:
		return "would block";
	case -ETIMEDOUT:
		return "timed out";
	case -EPIPE:
		return "no peer left on the channel";
	case -EMSGSIZE:
		return "message too large";
	case -EBADMSG:
		return "channel is corrupt";
	case -EPROTO:
		return "another version (segment layout or protocol)";
	case -ESTALE:
		return "message overwritten by the publisher";
	case -ENOBUFS:
		return "too many messages held in place";
	case -EBUSY:
		return "every endpoint of that role is taken";
	case -EINVAL:
		return "invalid argument";
	default:
		return err < 0 ? strerror(-err) : "unknown error";
	}
}
