/*
 * unexp.c - unexpected messages: the envelopes (and an EAGER's payload)
 * kept until a receive matches them, found in the order they came, their
 * entries recycled; those of a context not known yet kept apart until its
 * communicator comes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "wire.h"

struct pm_unexp *pm_unexp_find(struct pm_comm *c, int source, int tag)
{
	for (struct pm_link *l = c->unexp.head; l; l = l->next) {
		struct pm_unexp *u = pm_container(l, struct pm_unexp, link);
		if (pm_matches(source, tag, u->src, u->tag))
			return u;
	}
	return NULL;
}

/*
 * Unexpected messages are common (a send that comes before its receive):
 * their entries are recycled, with payload room up to UNEXP_KEEP bytes, so
 * that keeping one allocates nothing once as many have been kept at once.
 */
#define UNEXP_KEEP 4096   /* payload room a recycled entry keeps */
#define UNEXP_SPARES 1024 /* recycled entries kept at most */

static struct pm_link *spare_unexp;
static unsigned nspare_unexp;

void pm_unexp_free(struct pm_unexp *u)
{
	if (nspare_unexp == UNEXP_SPARES) {
		free(u->data);
		free(u);
		return;
	}
	if (u->room > UNEXP_KEEP) {
		free(u->data);
		u->data = NULL;
		u->room = 0;
	}
	u->link.next = spare_unexp;
	spare_unexp = &u->link;
	nspare_unexp++;
}

void pm_unexp_teardown(void)
{
	while (pm.orphans.head) {
		struct pm_link *l = pm.orphans.head;
		pm_list_remove(&pm.orphans, l);
		pm_unexp_free(pm_container(l, struct pm_unexp, link));
	}
	while (spare_unexp) {
		struct pm_unexp *u = pm_container(spare_unexp, struct pm_unexp, link);
		spare_unexp = u->link.next;
		free(u->data);
		free(u);
	}
	nspare_unexp = 0;
}

/* Keep a copy of envelope @p e (and of an EAGER's payload) until a receive
 * matches it; @p c NULL: its communicator is not known yet. */
void pm_unexp_keep(struct pm_comm *c, const struct pm_unexp *e, const void *payload)
{
	struct pm_unexp *u = NULL;
	char *data = NULL;
	size_t room = 0;
	if (spare_unexp) {
		u = pm_container(spare_unexp, struct pm_unexp, link);
		spare_unexp = u->link.next;
		nspare_unexp--;
		data = u->data;
		room = u->room;
	} else {
		u = malloc(sizeof(*u));
	}
	size_t len = e->type == REC_EAGER ? e->len : 0;
	if (u && len > room) {
		free(data);
		room = len;
		data = malloc(room);
	}
	if (!u || (len && !data)) {
		fprintf(stderr, "pinshm-mpi: out of memory for an unexpected message\n");
		PMPI_Abort(MPI_COMM_WORLD, MPI_ERR_NO_MEM);
		return;
	}
	*u = *e;
	u->data = data;
	u->room = room;
	if (len)
		memcpy(u->data, payload, len);
	pm_list_push(c ? &c->unexp : &pm.orphans, &u->link);
}

void pm_unexp_move_orphans(struct pm_comm *c)
{
	struct pm_link *l = pm.orphans.head;
	while (l) {
		struct pm_link *next = l->next;
		struct pm_unexp *u = pm_container(l, struct pm_unexp, link);
		if (u->ctx == c->ctx) {
			pm_list_remove(&pm.orphans, l);
			pm_list_push(&c->unexp, l);
		}
		l = next;
	}
}
