/*
 * client_views.c - what the daemon shows a client: a channel's description
 * (STAT), the list of channels (LIST), the daemon's figures per user and
 * its pool (STATUS), its connections (CLIENTS).  The long ones come in
 * pages, each a request of its own (fetch_pages()), under the client's
 * lock as one whole.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

/* Make room for @p need elements of @p size in the array @p *arr of @p *cap. */
static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 64;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	void *grown = realloc(*arr, ncap * size);
	if (!grown)
		return -ENOMEM;
	*arr = grown;
	*cap = ncap;
	return 0;
}

/* A listed channel, as the API shows it. */
static pinshm_list_entry_t entry_from_wire(const struct proto_list_entry *e)
{
	pinshm_list_entry_t out = {
		.kind = e->geo.kind,
		.flags = e->geo.flags,
		.capacity = e->geo.capacity,
		.max_message = e->geo.max_message,
		.max_producers = e->geo.max_producers,
		.max_consumers = e->geo.max_consumers,
		.state = e->state,
		.uid = e->uid,
		.gid = e->gid,
		.mode = e->mode,
		.size = e->size,
		.producers = e->producers,
		.consumers = e->consumers,
		.node = e->node,
		.backend = e->backend,
		.pin_idle = e->pin_idle,
		.messages = e->messages,
		.bytes = e->bytes,
		.lost = e->lost,
		.refused = e->refused,
		.device_regs = e->device_regs,
		.device_kinds = e->device_kinds,
	};
	memcpy(out.name, e->name, sizeof(out.name));
	return out;
}

static int stat_locked(pinshm_client_t *c, const char *name, pinshm_list_entry_t *out)
{
	struct proto_msg req = {.h.type = PROTO_STAT};
	struct proto_msg *rep;

	client_error_buf(c)[0] = '\0';
	int rc = client_put_name(c, req.u.stat.name, name);
	if (rc != 0)
		return rc;
	rep = malloc(sizeof(*rep));
	if (!rep)
		return -ENOMEM;
	rc = transact(c, &req, rep, NULL);
	if (rc == 0 && strcmp(rep->u.stat_reply.entry.name, name) != 0)
		rc = client_break(c, client_fail(c, -EPROTO, "pinshmd described '%s' when asked for '%s'",
						 rep->u.stat_reply.entry.name, name));
	if (rc == 0)
		*out = entry_from_wire(&rep->u.stat_reply.entry);
	free(rep);
	return rc;
}

int pinshm_stat(pinshm_client_t *c, const char *name, pinshm_list_entry_t *out)
{
	client_lock(c);
	int rc = stat_locked(c, name, out);
	client_unlock(c);
	return rc;
}

/* What a page of a paged reply (LIST, STATUS, CLIENTS) says about the paging. */
struct page {
	uint32_t count; /* entries in this page */
	bool more;      /* more pages follow, asked for from `next` */
	uint64_t next;
};

/*
 * How to read one kind of paged reply.  page() reads the paging fields of a
 * reply asked for from @p cursor (and whatever else a page carries, into @p arg).
 * take() writes entry @p i of the page as element @p n of @p list and returns
 * false where the entry is out of the order the daemon promises (after the
 * cursor, after element n - 1, and `next` consistent with the last entry).
 */
struct paging {
	uint32_t type;    /* PROTO_LIST, PROTO_STATUS or PROTO_CLIENTS */
	const char *what; /* what the pages list, for errors: "channel list" */
	size_t size;      /* of one element of the list */
	struct page (*page)(const struct proto_msg *rep, uint64_t cursor, void *arg);
	bool (*take)(const struct proto_msg *rep, uint32_t i, uint64_t cursor, void *list, size_t n);
};

static void set_cursor(struct proto_msg *req, uint64_t cursor)
{
	switch (req->h.type) {
	case PROTO_LIST:
		req->u.list.cursor = cursor;
		break;
	case PROTO_STATUS:
		req->u.status.cursor = cursor;
		break;
	default:
		req->u.clients.cursor = cursor;
		break;
	}
}

/*
 * Asks for the pages of @p pg from cursor 0 until the daemon says no more
 * follow, and gathers their entries into a new array @p *list of @p *count
 * (NULL and 0 where there are none).  With @p list NULL it asks for the first
 * page only and gathers nothing.  A page that is out of order, or that says
 * more follow but holds nothing or does not move the cursor on (a faulty daemon
 * would keep us asking), breaks the connection with -EPROTO.
 */
static int fetch_pages_locked(pinshm_client_t *c, const struct paging *pg, void *arg, void **list, size_t *count)
{
	struct proto_msg req = {.h.type = pg->type};
	struct proto_msg *rep = malloc(sizeof(*rep));
	uint64_t cursor = 0;
	void *got = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (list) {
		*list = NULL;
		*count = 0;
	}
	client_error_buf(c)[0] = '\0';
	if (!rep)
		return -ENOMEM;
	for (;;) {
		set_cursor(&req, cursor);
		rc = transact(c, &req, rep, NULL);
		if (rc != 0)
			break;
		struct page p = pg->page(rep, cursor, arg);
		if (!list)
			break;
		rc = grow(&got, &cap, n + p.count, pg->size);
		if (rc != 0)
			break;
		for (uint32_t i = 0; rc == 0 && i < p.count; i++, n++)
			if (!pg->take(rep, i, cursor, got, n))
				rc = client_break(c, client_fail(c, -EPROTO, "pinshmd's %s is out of order", pg->what));
		if (rc == 0 && p.more && (p.count == 0 || p.next <= cursor))
			rc = client_break(c, client_fail(c, -EPROTO, "pinshmd's %s does not advance", pg->what));
		if (rc != 0 || !p.more)
			break;
		cursor = p.next;
	}
	free(rep);
	if (rc != 0 || n == 0) {
		free(got);
		return rc;
	}
	*list = got;
	*count = n;
	return 0;
}

/* fetch_pages_locked() under the client's lock: one paged reply, whole. */
static int fetch_pages(pinshm_client_t *c, const struct paging *pg, void *arg, void **list, size_t *count)
{
	client_lock(c);
	int rc = fetch_pages_locked(c, pg, arg, list, count);
	client_unlock(c);
	return rc;
}

static struct page channel_page(const struct proto_msg *rep, uint64_t cursor, void *arg)
{
	(void)cursor;
	(void)arg;
	return (struct page){
		.count = rep->u.list_reply.count,
		.more = rep->u.list_reply.flags & PROTO_LIST_MORE,
		.next = rep->u.list_reply.next,
	};
}

static bool take_channel(const struct proto_msg *rep, uint32_t i, uint64_t cursor, void *list, size_t n)
{
	(void)cursor;
	((pinshm_list_entry_t *)list)[n] = entry_from_wire(&rep->u.list_reply.entries[i]);
	return true;
}

static const struct paging channel_paging = {
	.type = PROTO_LIST,
	.what = "channel list",
	.size = sizeof(pinshm_list_entry_t),
	.page = channel_page,
	.take = take_channel,
};

int pinshm_list(pinshm_client_t *c, pinshm_list_entry_t **entries, size_t *count)
{
	void *list;
	int rc = fetch_pages(c, &channel_paging, NULL, &list, count);

	*entries = list;
	return rc;
}

/* Where the figures of the first STATUS page go: the pool may be NULL. */
struct status_out {
	pinshm_status_t *st;
	pinshm_pool_t *pool;
};

static void pool_from_wire(const struct proto_msg *rep, pinshm_pool_t *pool)
{
	const typeof(rep->u.status_reply) *s = &rep->u.status_reply;

	static_assert(PROTO_POOL_CLASSES <= PINSHM_POOL_CLASSES_MAX, "every class on the wire has its place");
	*pool = (pinshm_pool_t){
		.pinned = s->pool_pinned,
		.hits = s->pool_hits,
		.misses = s->pool_misses,
		.flags = s->pool_flags & PROTO_POOL_STOPPED ? PINSHM_POOL_STOPPED : 0,
		.count = s->pool_count, /* at most PROTO_POOL_CLASSES: proto_decode() */
	};
	for (uint32_t i = 0; i < s->pool_count; i++)
		pool->classes[i] = (pinshm_pool_class_t){
			.size = s->pool[i].size,
			.wanted = s->pool[i].wanted,
			.ready = s->pool[i].ready,
			.filling = s->pool[i].filling,
			.locked = s->pool[i].locked,
		};
}

/* The daemon's figures come with the first page (into @p arg, a struct status_out). */
static struct page user_page(const struct proto_msg *rep, uint64_t cursor, void *arg)
{
	const typeof(rep->u.status_reply) *s = &rep->u.status_reply;
	const struct status_out *out = arg;

	if (cursor == 0 && out->pool)
		pool_from_wire(rep, out->pool);
	if (cursor == 0)
		*out->st = (pinshm_status_t){
			.pid = s->pid,
			.flags = s->flags & PROTO_STATUS_USER_MODE ? PINSHM_STATUS_USER_MODE : 0,
			.uptime_ms = s->uptime_ms,
			.budget = s->budget,
			.pinned = s->pinned,
			.channels_pinned = s->channels_pinned,
			.channels_unpinned = s->channels_unpinned,
			.connections = s->connections,
		};
	return (struct page){.count = s->count, .more = s->flags & PROTO_STATUS_MORE, .next = s->next};
}

/* In uid order, from the cursor on, and `next` just past the last. */
static bool take_user(const struct proto_msg *rep, uint32_t i, uint64_t cursor, void *list, size_t n)
{
	const typeof(rep->u.status_reply) *s = &rep->u.status_reply;
	const struct proto_user_entry *u = &s->users[i];
	pinshm_user_usage_t *users = list;

	if (u->uid < cursor || (n > 0 && u->uid <= users[n - 1].uid) ||
	    (i + 1 == s->count && s->next != (uint64_t)u->uid + 1))
		return false;
	users[n] = (pinshm_user_usage_t){
		.uid = u->uid,
		.channels = u->channels,
		.connections = u->connections,
		.pinned = u->pinned,
		.charged = u->charged,
		.quota = u->quota,
	};
	return true;
}

static const struct paging user_paging = {
	.type = PROTO_STATUS,
	.what = "user list",
	.size = sizeof(pinshm_user_usage_t),
	.page = user_page,
	.take = take_user,
};

int pinshm_status_pool(pinshm_client_t *c, pinshm_status_t *out, pinshm_pool_t *pool, pinshm_user_usage_t **users,
		       size_t *nusers)
{
	struct status_out o = {.st = out, .pool = pool};
	void *list;
	int rc = fetch_pages(c, &user_paging, &o, users ? &list : NULL, nusers);

	if (users)
		*users = list;
	return rc;
}

int pinshm_status(pinshm_client_t *c, pinshm_status_t *out, pinshm_user_usage_t **users, size_t *nusers)
{
	return pinshm_status_pool(c, out, NULL, users, nusers);
}

static struct page connection_page(const struct proto_msg *rep, uint64_t cursor, void *arg)
{
	(void)cursor;
	(void)arg;
	return (struct page){
		.count = rep->u.clients_reply.count,
		.more = rep->u.clients_reply.flags & PROTO_CLIENTS_MORE,
		.next = rep->u.clients_reply.next,
	};
}

/* In id order, after the cursor, and `next` the last. */
static bool take_connection(const struct proto_msg *rep, uint32_t i, uint64_t cursor, void *list, size_t n)
{
	const typeof(rep->u.clients_reply) *r = &rep->u.clients_reply;
	const struct proto_client_entry *e = &r->entries[i];
	pinshm_client_info_t *clients = list;

	if (e->id <= cursor || (n > 0 && e->id <= clients[n - 1].id) || (i + 1 == r->count && r->next != e->id))
		return false;
	clients[n] = (pinshm_client_info_t){
		.id = e->id,
		.pid = e->pid,
		.uid = e->uid,
		.gid = e->gid,
		.channels = e->channels,
		.endpoints = e->endpoints,
	};
	return true;
}

static const struct paging connection_paging = {
	.type = PROTO_CLIENTS,
	.what = "connection list",
	.size = sizeof(pinshm_client_info_t),
	.page = connection_page,
	.take = take_connection,
};

int pinshm_clients(pinshm_client_t *c, pinshm_client_info_t **clients, size_t *count)
{
	void *list;
	int rc = fetch_pages(c, &connection_paging, NULL, &list, count);

	*clients = list;
	return rc;
}
