/*
 * protocol.c - pack and unpack the messages of the pinshmd protocol.
 *
 * Each field is written or read explicitly, byte by byte in little-endian
 * order, through a bounded cursor: a struct is never copied to or from the
 * wire, and a read past the end of a packet only marks the cursor bad.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "protocol.h"

static_assert(PROTO_NAME_FIELD == PINSHM_NAME_MAX + 1, "a name and its NUL fill the field");
static_assert(PROTO_HEADER_SIZE + 4 + 2 + PROTO_TEXT_MAX + 16 + PROTO_LIST_PAGE * PROTO_LIST_ENTRY_SIZE <=
		      PROTO_MAX_PACKET,
	      "a full LIST reply fits in a packet");
static_assert(PROTO_HEADER_SIZE + 4 + 2 + PROTO_TEXT_MAX + PROTO_STATUS_FIXED_SIZE + PROTO_POOL_FIXED_SIZE +
			      PROTO_POOL_CLASSES * PROTO_POOL_CLASS_SIZE + PROTO_STATUS_PAGE * PROTO_USER_ENTRY_SIZE <=
		      PROTO_MAX_PACKET,
	      "a full STATUS reply, its pool's every class included, fits in a packet");
static_assert(PROTO_HEADER_SIZE + 4 + 2 + PROTO_TEXT_MAX + 16 + PROTO_CLIENTS_PAGE * PROTO_CLIENT_ENTRY_SIZE <=
		      PROTO_MAX_PACKET,
	      "a full CLIENTS reply fits in a packet");

/* ---- cursors -------------------------------------------------------------- */

struct wr {
	uint8_t *p;
	size_t len, cap;
	bool bad; /* overflow */
};

struct rd {
	const uint8_t *p;
	size_t len, off;
	bool bad; /* read past the end, or a malformed field */
};

static void put_bytes(struct wr *w, const void *src, size_t n)
{
	if (w->bad || w->cap - w->len < n) {
		w->bad = true;
		return;
	}
	memcpy(w->p + w->len, src, n);
	w->len += n;
}

static void put_le(struct wr *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];

	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put_bytes(w, b, bytes);
}

static void put_u16(struct wr *w, uint16_t v) { put_le(w, v, 2); }
static void put_u32(struct wr *w, uint32_t v) { put_le(w, v, 4); }
static void put_u64(struct wr *w, uint64_t v) { put_le(w, v, 8); }

/* A name in its fixed field; one that does not fit with its NUL fails. */
static void put_name(struct wr *w, const char *name)
{
	uint8_t field[PROTO_NAME_FIELD] = {0};
	size_t n = strnlen(name, PROTO_NAME_FIELD);

	if (n >= PROTO_NAME_FIELD) {
		w->bad = true;
		return;
	}
	memcpy(field, name, n);
	put_bytes(w, field, sizeof(field));
}

static const uint8_t *get_bytes(struct rd *r, size_t n)
{
	if (r->bad || r->len - r->off < n) {
		r->bad = true;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += n;
	return p;
}

static uint64_t get_le(struct rd *r, unsigned bytes)
{
	const uint8_t *b = get_bytes(r, bytes);
	uint64_t v = 0;

	for (unsigned i = 0; b && i < bytes; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

static uint16_t get_u16(struct rd *r) { return (uint16_t)get_le(r, 2); }
static uint32_t get_u32(struct rd *r) { return (uint32_t)get_le(r, 4); }
static uint64_t get_u64(struct rd *r) { return get_le(r, 8); }

/* A name field: the name, then only NUL bytes (at least one). */
static void get_name(struct rd *r, char *out)
{
	const uint8_t *b = get_bytes(r, PROTO_NAME_FIELD);

	out[0] = '\0';
	if (!b)
		return;
	size_t n = strnlen((const char *)b, PROTO_NAME_FIELD);
	if (n == PROTO_NAME_FIELD) {
		r->bad = true;
		return;
	}
	for (size_t i = n; i < PROTO_NAME_FIELD; i++)
		if (b[i] != 0) {
			r->bad = true;
			return;
		}
	memcpy(out, b, n + 1);
}

static void put_geometry(struct wr *w, const struct proto_geometry *g)
{
	put_u32(w, g->kind);
	put_u32(w, g->flags);
	put_u64(w, g->capacity);
	put_u32(w, g->max_message);
	put_u32(w, g->max_producers);
	put_u32(w, g->max_consumers);
}

static void get_geometry(struct rd *r, struct proto_geometry *g)
{
	g->kind = get_u32(r);
	g->flags = get_u32(r);
	g->capacity = get_u64(r);
	g->max_message = get_u32(r);
	g->max_producers = get_u32(r);
	g->max_consumers = get_u32(r);
}

static void put_entry(struct wr *w, const struct proto_list_entry *e)
{
	size_t start = w->len;

	put_name(w, e->name);
	put_geometry(w, &e->geo);
	put_u32(w, e->state);
	put_u32(w, e->uid);
	put_u32(w, e->gid);
	put_u32(w, e->mode);
	put_u64(w, e->size);
	put_u32(w, e->producers);
	put_u32(w, e->consumers);
	put_u32(w, (uint32_t)e->node);
	put_u32(w, e->backend);
	put_u32(w, e->pin_idle);
	put_u64(w, e->messages);
	put_u64(w, e->bytes);
	put_u64(w, e->lost);
	put_u64(w, e->refused);
	assert(w->bad || w->len - start == PROTO_LIST_ENTRY_SIZE);
}

static void get_entry(struct rd *r, struct proto_list_entry *e)
{
	get_name(r, e->name);
	get_geometry(r, &e->geo);
	e->state = get_u32(r);
	e->uid = get_u32(r);
	e->gid = get_u32(r);
	e->mode = get_u32(r);
	e->size = get_u64(r);
	e->producers = get_u32(r);
	e->consumers = get_u32(r);
	e->node = (int32_t)get_u32(r);
	e->backend = get_u32(r);
	e->pin_idle = get_u32(r);
	e->messages = get_u64(r);
	e->bytes = get_u64(r);
	e->lost = get_u64(r);
	e->refused = get_u64(r);
}

static void put_user(struct wr *w, const struct proto_user_entry *u)
{
	size_t start = w->len;

	put_u32(w, u->uid);
	put_u32(w, u->channels);
	put_u32(w, u->connections);
	put_u64(w, u->pinned);
	put_u64(w, u->charged);
	put_u64(w, u->quota);
	assert(w->bad || w->len - start == PROTO_USER_ENTRY_SIZE);
}

static void get_user(struct rd *r, struct proto_user_entry *u)
{
	u->uid = get_u32(r);
	u->channels = get_u32(r);
	u->connections = get_u32(r);
	u->pinned = get_u64(r);
	u->charged = get_u64(r);
	u->quota = get_u64(r);
}

static void put_pool_class(struct wr *w, const struct proto_pool_class *c)
{
	size_t start = w->len;

	put_u64(w, c->size);
	put_u32(w, c->wanted);
	put_u32(w, c->ready);
	put_u32(w, c->filling);
	put_u64(w, c->locked);
	assert(w->bad || w->len - start == PROTO_POOL_CLASS_SIZE);
}

static void get_pool_class(struct rd *r, struct proto_pool_class *c)
{
	c->size = get_u64(r);
	c->wanted = get_u32(r);
	c->ready = get_u32(r);
	c->filling = get_u32(r);
	c->locked = get_u64(r);
}

static void put_client(struct wr *w, const struct proto_client_entry *c)
{
	size_t start = w->len;

	put_u64(w, c->id);
	put_u32(w, c->pid);
	put_u32(w, c->uid);
	put_u32(w, c->gid);
	put_u32(w, c->channels);
	put_u32(w, c->endpoints);
	assert(w->bad || w->len - start == PROTO_CLIENT_ENTRY_SIZE);
}

static void get_client(struct rd *r, struct proto_client_entry *c)
{
	c->id = get_u64(r);
	c->pid = get_u32(r);
	c->uid = get_u32(r);
	c->gid = get_u32(r);
	c->channels = get_u32(r);
	c->endpoints = get_u32(r);
}

/* ---- messages --------------------------------------------------------------- */

static bool is_request(uint16_t type)
{
	return type >= PROTO_HELLO && type <= PROTO_PEER;
}

static bool is_reply(uint16_t type)
{
	return type == PROTO_ERROR || ((type & PROTO_REPLY) && is_request(type & ~PROTO_REPLY));
}

int proto_encode(const struct proto_msg *m, uint8_t *buf)
{
	struct wr w = {.p = buf, .cap = PROTO_MAX_PACKET};
	uint16_t type = m->h.type;

	if (!is_request(type) && !is_reply(type))
		return -EINVAL;
	put_u32(&w, PROTO_MAGIC);
	put_u16(&w, PROTO_VERSION);
	put_u16(&w, type);
	put_u32(&w, 0); /* length, filled in below */
	put_u32(&w, m->h.seq);

	if (is_reply(type)) {
		size_t n = strnlen(m->text, PROTO_TEXT_MAX);
		put_u32(&w, (uint32_t)m->status);
		put_u16(&w, (uint16_t)n);
		put_bytes(&w, m->text, n);
		if (m->status != 0 || type == PROTO_ERROR)
			goto done;
	}

	switch (type) {
	case PROTO_HELLO:
		put_u32(&w, m->u.hello.version);
		put_u32(&w, m->u.hello.library);
		break;
	case PROTO_HELLO | PROTO_REPLY:
		put_u32(&w, m->u.hello_reply.version);
		put_u32(&w, m->u.hello_reply.flags);
		put_u32(&w, m->u.hello_reply.library);
		break;
	case PROTO_CREATE:
		put_name(&w, m->u.create.name);
		put_geometry(&w, &m->u.create.geo);
		put_u32(&w, m->u.create.mode);
		put_u32(&w, m->u.create.flags);
		put_u32(&w, (uint32_t)m->u.create.node);
		put_u32(&w, m->u.create.pin_idle);
		break;
	case PROTO_CREATE | PROTO_REPLY:
		put_u64(&w, m->u.create_reply.size);
		put_u32(&w, m->u.create_reply.state);
		put_u32(&w, m->u.create_reply.backend);
		put_u64(&w, m->u.create_reply.id);
		break;
	case PROTO_OPEN:
		put_name(&w, m->u.open.name);
		put_u32(&w, m->u.open.role);
		put_u32(&w, (uint32_t)m->u.open.node);
		break;
	case PROTO_OPEN | PROTO_REPLY:
		put_u32(&w, m->u.open_reply.endpoint);
		put_geometry(&w, &m->u.open_reply.geo);
		put_u64(&w, m->u.open_reply.size);
		put_u64(&w, m->u.open_reply.id);
		break;
	case PROTO_UNLINK:
		put_name(&w, m->u.unlink.name);
		break;
	case PROTO_LIST:
		put_u64(&w, m->u.list.cursor);
		break;
	case PROTO_LIST | PROTO_REPLY:
		if (m->u.list_reply.count > PROTO_LIST_PAGE)
			return -EINVAL;
		put_u64(&w, m->u.list_reply.next);
		put_u32(&w, m->u.list_reply.count);
		put_u32(&w, m->u.list_reply.flags);
		for (uint32_t i = 0; i < m->u.list_reply.count; i++)
			put_entry(&w, &m->u.list_reply.entries[i]);
		break;
	case PROTO_STATUS:
		put_u64(&w, m->u.status.cursor);
		break;
	case PROTO_STATUS | PROTO_REPLY: {
		size_t start = w.len;
		if (m->u.status_reply.count > PROTO_STATUS_PAGE || m->u.status_reply.pool_count > PROTO_POOL_CLASSES)
			return -EINVAL;
		put_u32(&w, m->u.status_reply.pid);
		put_u32(&w, m->u.status_reply.flags);
		put_u64(&w, m->u.status_reply.uptime_ms);
		put_u64(&w, m->u.status_reply.budget);
		put_u64(&w, m->u.status_reply.pinned);
		put_u32(&w, m->u.status_reply.channels_pinned);
		put_u32(&w, m->u.status_reply.channels_unpinned);
		put_u32(&w, m->u.status_reply.connections);
		put_u32(&w, m->u.status_reply.count);
		put_u64(&w, m->u.status_reply.next);
		assert(w.bad || w.len - start == PROTO_STATUS_FIXED_SIZE);
		start = w.len;
		put_u64(&w, m->u.status_reply.pool_pinned);
		put_u64(&w, m->u.status_reply.pool_hits);
		put_u64(&w, m->u.status_reply.pool_misses);
		put_u32(&w, m->u.status_reply.pool_flags);
		put_u32(&w, m->u.status_reply.pool_count);
		assert(w.bad || w.len - start == PROTO_POOL_FIXED_SIZE);
		for (uint32_t i = 0; i < m->u.status_reply.pool_count; i++)
			put_pool_class(&w, &m->u.status_reply.pool[i]);
		for (uint32_t i = 0; i < m->u.status_reply.count; i++)
			put_user(&w, &m->u.status_reply.users[i]);
		break;
	}
	case PROTO_CLIENTS:
		put_u64(&w, m->u.clients.cursor);
		break;
	case PROTO_CLIENTS | PROTO_REPLY:
		if (m->u.clients_reply.count > PROTO_CLIENTS_PAGE)
			return -EINVAL;
		put_u64(&w, m->u.clients_reply.next);
		put_u32(&w, m->u.clients_reply.count);
		put_u32(&w, m->u.clients_reply.flags);
		for (uint32_t i = 0; i < m->u.clients_reply.count; i++)
			put_client(&w, &m->u.clients_reply.entries[i]);
		break;
	case PROTO_CLOSE:
		put_u64(&w, m->u.close.id);
		put_u32(&w, m->u.close.endpoint);
		break;
	case PROTO_STAT:
		put_name(&w, m->u.stat.name);
		break;
	case PROTO_RELOCK:
		put_u64(&w, m->u.relock.id);
		break;
	case PROTO_NOTIFY:
	case PROTO_PEER:
		put_u64(&w, m->u.notify.id);
		put_u32(&w, m->u.notify.endpoint);
		break;
	case PROTO_STAT | PROTO_REPLY:
		put_entry(&w, &m->u.stat_reply.entry);
		break;
	case PROTO_ADOPT:
		put_name(&w, m->u.adopt.name);
		put_geometry(&w, &m->u.adopt.geo);
		put_u32(&w, m->u.adopt.role);
		put_u32(&w, m->u.adopt.endpoint);
		break;
	case PROTO_ADOPT | PROTO_REPLY:
		put_u64(&w, m->u.adopt_reply.id);
		put_u32(&w, m->u.adopt_reply.flags);
		break;
	default: /* SHUTDOWN, and the UNLINK, SHUTDOWN, CLOSE, RELOCK, NOTIFY and PEER replies: nothing more */
		break;
	}
done:
	if (w.bad)
		return -EINVAL;
	struct wr len = {.p = buf + 8, .cap = 4};
	put_u32(&len, (uint32_t)w.len);
	return (int)w.len;
}

/* The reply text: printable ASCII kept, anything else shown as '?'. */
static void get_text(struct rd *r, char *out)
{
	uint16_t n = get_u16(r);

	out[0] = '\0';
	if (n > PROTO_TEXT_MAX) {
		r->bad = true;
		return;
	}
	const uint8_t *b = get_bytes(r, n);
	if (!b)
		return;
	for (uint16_t i = 0; i < n; i++)
		out[i] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '?';
	out[n] = '\0';
}

int proto_decode(const uint8_t *buf, size_t len, bool reply, struct proto_msg *m)
{
	struct rd r = {.p = buf, .len = len};

	memset(&m->h, 0, sizeof(m->h));
	m->status = 0;
	m->text[0] = '\0';
	if (len > PROTO_MAX_PACKET)
		return -EMSGSIZE;
	if (len < PROTO_HEADER_SIZE)
		return -EBADMSG;
	m->h.magic = get_u32(&r);
	m->h.version = get_u16(&r);
	m->h.type = get_u16(&r);
	m->h.length = get_u32(&r);
	m->h.seq = get_u32(&r);
	if (m->h.magic != PROTO_MAGIC || m->h.length != len)
		return -EBADMSG;
	if (m->h.version != PROTO_VERSION)
		return -EPROTO;
	uint16_t type = m->h.type;
	if (reply ? !is_reply(type) : !is_request(type))
		return -EOPNOTSUPP;

	if (reply) {
		m->status = (int32_t)get_u32(&r);
		get_text(&r, m->text);
		/* 0 or a negative errno; an ERROR reply is never a success. */
		if (m->status > 0 || m->status < -4095 || (type == PROTO_ERROR && m->status == 0))
			r.bad = true;
		if (m->status != 0 || type == PROTO_ERROR)
			goto done;
	}

	switch (type) {
	case PROTO_HELLO:
		m->u.hello.version = get_u32(&r);
		m->u.hello.library = get_u32(&r);
		break;
	case PROTO_HELLO | PROTO_REPLY:
		m->u.hello_reply.version = get_u32(&r);
		m->u.hello_reply.flags = get_u32(&r);
		m->u.hello_reply.library = get_u32(&r);
		break;
	case PROTO_CREATE:
		get_name(&r, m->u.create.name);
		get_geometry(&r, &m->u.create.geo);
		m->u.create.mode = get_u32(&r);
		m->u.create.flags = get_u32(&r);
		m->u.create.node = (int32_t)get_u32(&r);
		m->u.create.pin_idle = get_u32(&r);
		break;
	case PROTO_CREATE | PROTO_REPLY:
		m->u.create_reply.size = get_u64(&r);
		m->u.create_reply.state = get_u32(&r);
		m->u.create_reply.backend = get_u32(&r);
		m->u.create_reply.id = get_u64(&r);
		break;
	case PROTO_OPEN:
		get_name(&r, m->u.open.name);
		m->u.open.role = get_u32(&r);
		m->u.open.node = (int32_t)get_u32(&r);
		break;
	case PROTO_OPEN | PROTO_REPLY:
		m->u.open_reply.endpoint = get_u32(&r);
		get_geometry(&r, &m->u.open_reply.geo);
		m->u.open_reply.size = get_u64(&r);
		m->u.open_reply.id = get_u64(&r);
		break;
	case PROTO_UNLINK:
		get_name(&r, m->u.unlink.name);
		break;
	case PROTO_LIST:
		m->u.list.cursor = get_u64(&r);
		break;
	case PROTO_LIST | PROTO_REPLY:
		m->u.list_reply.next = get_u64(&r);
		m->u.list_reply.count = get_u32(&r);
		m->u.list_reply.flags = get_u32(&r);
		if (m->u.list_reply.count > PROTO_LIST_PAGE) {
			r.bad = true;
			break;
		}
		for (uint32_t i = 0; i < m->u.list_reply.count && !r.bad; i++)
			get_entry(&r, &m->u.list_reply.entries[i]);
		break;
	case PROTO_STATUS:
		m->u.status.cursor = get_u64(&r);
		break;
	case PROTO_STATUS | PROTO_REPLY:
		m->u.status_reply.pid = get_u32(&r);
		m->u.status_reply.flags = get_u32(&r);
		m->u.status_reply.uptime_ms = get_u64(&r);
		m->u.status_reply.budget = get_u64(&r);
		m->u.status_reply.pinned = get_u64(&r);
		m->u.status_reply.channels_pinned = get_u32(&r);
		m->u.status_reply.channels_unpinned = get_u32(&r);
		m->u.status_reply.connections = get_u32(&r);
		m->u.status_reply.count = get_u32(&r);
		m->u.status_reply.next = get_u64(&r);
		m->u.status_reply.pool_pinned = get_u64(&r);
		m->u.status_reply.pool_hits = get_u64(&r);
		m->u.status_reply.pool_misses = get_u64(&r);
		m->u.status_reply.pool_flags = get_u32(&r);
		m->u.status_reply.pool_count = get_u32(&r);
		/* Both counts bounded before anything is read into their arrays. */
		if (m->u.status_reply.count > PROTO_STATUS_PAGE || (m->u.status_reply.flags & ~PROTO_STATUS_FLAGS) ||
		    m->u.status_reply.pool_count > PROTO_POOL_CLASSES ||
		    (m->u.status_reply.pool_flags & ~PROTO_POOL_FLAGS)) {
			r.bad = true;
			break;
		}
		for (uint32_t i = 0; i < m->u.status_reply.pool_count && !r.bad; i++)
			get_pool_class(&r, &m->u.status_reply.pool[i]);
		for (uint32_t i = 0; i < m->u.status_reply.count && !r.bad; i++)
			get_user(&r, &m->u.status_reply.users[i]);
		break;
	case PROTO_CLIENTS:
		m->u.clients.cursor = get_u64(&r);
		break;
	case PROTO_CLIENTS | PROTO_REPLY:
		m->u.clients_reply.next = get_u64(&r);
		m->u.clients_reply.count = get_u32(&r);
		m->u.clients_reply.flags = get_u32(&r);
		if (m->u.clients_reply.count > PROTO_CLIENTS_PAGE || (m->u.clients_reply.flags & ~PROTO_CLIENTS_MORE)) {
			r.bad = true;
			break;
		}
		for (uint32_t i = 0; i < m->u.clients_reply.count && !r.bad; i++)
			get_client(&r, &m->u.clients_reply.entries[i]);
		break;
	case PROTO_CLOSE:
		m->u.close.id = get_u64(&r);
		m->u.close.endpoint = get_u32(&r);
		break;
	case PROTO_STAT:
		get_name(&r, m->u.stat.name);
		break;
	case PROTO_RELOCK:
		m->u.relock.id = get_u64(&r);
		break;
	case PROTO_NOTIFY:
	case PROTO_PEER:
		m->u.notify.id = get_u64(&r);
		m->u.notify.endpoint = get_u32(&r);
		break;
	case PROTO_STAT | PROTO_REPLY:
		get_entry(&r, &m->u.stat_reply.entry);
		break;
	case PROTO_ADOPT:
		get_name(&r, m->u.adopt.name);
		get_geometry(&r, &m->u.adopt.geo);
		m->u.adopt.role = get_u32(&r);
		m->u.adopt.endpoint = get_u32(&r);
		break;
	case PROTO_ADOPT | PROTO_REPLY:
		m->u.adopt_reply.id = get_u64(&r);
		m->u.adopt_reply.flags = get_u32(&r);
		if (m->u.adopt_reply.flags & ~PROTO_ADOPT_FLAGS)
			r.bad = true;
		break;
	default:
		break;
	}
done:
	/* The body has exactly the length of its type. */
	if (r.bad || r.off != len)
		return -EBADMSG;
	return 0;
}

struct proto_geometry proto_geometry_from_attr(const pinshm_channel_attr_t *attr)
{
	return (struct proto_geometry){
		.kind = attr->kind,
		.flags = attr->flags,
		.capacity = attr->capacity,
		.max_message = attr->max_message,
		.max_producers = attr->max_producers,
		.max_consumers = attr->max_consumers,
	};
}

pinshm_channel_attr_t proto_geometry_to_attr(const struct proto_geometry *g)
{
	return (pinshm_channel_attr_t){
		.kind = g->kind,
		.flags = g->flags,
		.capacity = g->capacity,
		.max_message = g->max_message,
		.max_producers = g->max_producers,
		.max_consumers = g->max_consumers,
	};
}

bool proto_name_valid(const char *name)
{
	size_t n = 0;

	if (!name || name[0] == '.')
		return false;
	for (; name[n]; n++) {
		char c = name[n];
		if (n >= PINSHM_NAME_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return n > 0;
}

const char *proto_type_name(uint16_t type)
{
	switch (type & ~PROTO_REPLY) {
	case PROTO_HELLO:
		return "HELLO";
	case PROTO_CREATE:
		return "CREATE";
	case PROTO_OPEN:
		return "OPEN";
	case PROTO_UNLINK:
		return "UNLINK";
	case PROTO_LIST:
		return "LIST";
	case PROTO_SHUTDOWN:
		return "SHUTDOWN";
	case PROTO_STATUS:
		return "STATUS";
	case PROTO_CLIENTS:
		return "CLIENTS";
	case PROTO_CLOSE:
		return "CLOSE";
	case PROTO_STAT:
		return "STAT";
	case PROTO_RELOCK:
		return "RELOCK";
	case PROTO_NOTIFY:
		return "NOTIFY";
	case PROTO_PEER:
		return "PEER";
	case PROTO_ADOPT:
		return "ADOPT";
	default:
		return type == PROTO_ERROR ? "ERROR" : "unknown";
	}
}

int proto_user_socket_dir(char *buf, size_t len, uid_t uid)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (xdg && xdg[0] == '/')
		n = snprintf(buf, len, "%s/pinshm", xdg);
	else
		n = snprintf(buf, len, "/tmp/pinshm-%lu", (unsigned long)uid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int proto_user_socket_path(char *buf, size_t len, uid_t uid)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int rc = proto_user_socket_dir(dir, sizeof(dir), uid);

	if (rc != 0)
		return rc;
	int n = snprintf(buf, len, "%s/%s", dir, PROTO_SOCKET_NAME);
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	return 0;
}

bool proto_request_takes_fd(uint16_t type)
{
	return type == PROTO_ADOPT || type == PROTO_NOTIFY;
}

bool proto_reply_gives_fd(uint16_t type)
{
	return type == (PROTO_OPEN | PROTO_REPLY) || type == (PROTO_PEER | PROTO_REPLY);
}
