/*
 * client_error.c - a client's errors: each thread's message about its last
 * request, a connection out of step (broken), a reply that does not fit
 * its request.  Used by client.c and peer_fetch.c alike.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "protocol.h"

char *client_error_buf(pinshm_client_t *c)
{
	pthread_t self = pthread_self();
	struct client_error *e;

	pthread_mutex_lock(&c->error_lock);
	for (e = c->errors; e && !pthread_equal(e->thread, self); e = e->next)
		;
	if (!e && (e = calloc(1, sizeof(*e))) != NULL) {
		e->thread = self;
		e->next = c->errors;
		c->errors = e;
	}
	pthread_mutex_unlock(&c->error_lock);
	return e ? e->text : c->error;
}

int client_fail(pinshm_client_t *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(client_error_buf(c), CLIENT_ERROR_MAX, fmt, ap);
	va_end(ap);
	return err;
}

/* The connection can no longer be trusted to be in step. */
int client_break(pinshm_client_t *c, int err)
{
	c->broken = true;
	c->broken_err = err;
	return err;
}

int client_check_reply(pinshm_client_t *c, uint16_t type, uint32_t seq, const struct proto_msg *rep, int rc,
		       unsigned nfds)
{
	if (rc == 0 && rep->h.seq != seq)
		rc = client_fail(c, -EPROTO, "pinshmd answered request %u to request %u", rep->h.seq, seq);
	else if (rc == 0 && rep->h.type != (type | PROTO_REPLY) && rep->h.type != PROTO_ERROR)
		rc = client_fail(c, -EPROTO, "pinshmd answered %s with %s", proto_type_name(type),
				 proto_type_name(rep->h.type));
	else if (rc == 0 && (rep->status == 0 && proto_reply_gives_fd(rep->h.type)) != (nfds == 1))
		rc = client_fail(c, -EPROTO, "pinshmd sent %u descriptors with its %s reply", nfds,
				 proto_type_name(type));
	else if (rc == -EPROTO)
		rc = client_fail(c, -EPROTO, "pinshmd speaks protocol version %u, this library %u", rep->h.version,
				 PROTO_VERSION);
	else if (rc != 0)
		rc = client_fail(c, -EPROTO, "malformed reply from pinshmd to %s (%s)", proto_type_name(type),
				 strerror(-rc));
	return rc;
}
