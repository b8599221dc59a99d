/*
 * protocol.c - pack and unpack the messages of the pinshmd protocol.
 *
 * Every message body is described once, as a list of its fields (the
 * tables below); encode and decode walk the same list.  Each field is
 * written or read byte by byte in little-endian order, through a bounded
 * cursor: a struct is never copied to or from the wire, and a read past the
 * end of a packet only marks the cursor bad.
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

/* ---- the layout of every message ------------------------------------------- */

/*
 * Each message body, and each record inside one, is a list of fields in
 * wire order, each naming the member of struct proto_msg (or of the record's
 * struct) it travels from and to: proto_encode() and proto_decode() both
 * walk these lists, so that no layout is written twice.
 *
 * To add a field: add its member to the struct in protocol.h, then one line
 * at its place in the list below (a new protocol version: protocol.h, and
 * pinshm-protocol(7)).  To add a message: its type in protocol.h, its
 * lists here, and its row in `messages`.
 */
enum field_kind {
	F_U32,    /* 4 bytes: a uint32_t or int32_t member */
	F_U64,    /* 8 bytes: a uint64_t member */
	F_FLAGS,  /* a uint32_t whose bits outside .arg the decoder refuses */
	F_NAME,   /* a char[PROTO_NAME_FIELD] in its fixed field */
	F_RECORD, /* a struct member: the fields of .sub */
	F_ARRAY,  /* an array member: .sub's fields for each of its first n elements, n being
		   * the uint32_t member at .count (a field before it), at most .arg */
};

struct layout;

struct field {
	enum field_kind kind;
	uint32_t off;             /* of the member, in the struct the list describes */
	uint32_t arg;             /* F_FLAGS: the known bits; F_ARRAY: the most elements */
	uint32_t count, stride;   /* F_ARRAY: the offset of the count; sizeof an element */
	const struct layout *sub; /* F_RECORD, F_ARRAY: the layout of one */
};

struct layout {
	const struct field *fields;
	size_t n;
	size_t wire; /* a record's bytes on the wire (asserted); 0 for a message body */
};

#define MEMBER(T, m) ((T *)0)->m
/* The offset of member m of T, which must be @p bytes long (else a compile error). */
#define SIZED(T, m, bytes) (offsetof(T, m) + 0 * sizeof(char[sizeof(MEMBER(T, m)) == (bytes) ? 1 : -1]))
#define U32(T, m) {.kind = F_U32, .off = SIZED(T, m, 4)}
#define U64(T, m) {.kind = F_U64, .off = SIZED(T, m, 8)}
#define FLAGS(T, m, known) {.kind = F_FLAGS, .off = SIZED(T, m, 4), .arg = (known)}
#define NAME(T, m) {.kind = F_NAME, .off = SIZED(T, m, PROTO_NAME_FIELD)}
#define RECORD(T, m, l) {.kind = F_RECORD, .off = offsetof(T, m), .sub = &(l)}
#define ARRAY(T, m, n, l)                                                                          \
	{.kind = F_ARRAY, .off = offsetof(T, m), .count = SIZED(T, n, 4),                           \
	 .arg = sizeof(MEMBER(T, m)) / sizeof(MEMBER(T, m)[0]), .stride = sizeof(MEMBER(T, m)[0]), \
	 .sub = &(l)}
#define LAYOUT(list, bytes) {.fields = (list), .n = sizeof(list) / sizeof((list)[0]), .wire = (bytes)}
#define BODY(list) LAYOUT(list, 0)

/* Records. */
#define T struct proto_geometry
static const struct field geometry_fields[] = {
	U32(T, kind),
	U32(T, flags),
	U64(T, capacity),
	U32(T, max_message),
	U32(T, max_producers),
	U32(T, max_consumers),
};
#undef T
static const struct layout geometry = LAYOUT(geometry_fields, 28);

#define T struct proto_list_entry
static const struct field entry_fields[] = {
	NAME(T, name),
	RECORD(T, geo, geometry),
	U32(T, state),
	U32(T, uid),
	U32(T, gid),
	U32(T, mode),
	U64(T, size),
	U32(T, producers),
	U32(T, consumers),
	U32(T, node),
	U32(T, backend),
	U32(T, pin_idle),
	U64(T, messages),
	U64(T, bytes),
	U64(T, lost),
	U64(T, refused),
	U32(T, device_regs),
	FLAGS(T, device_kinds, PROTO_DEVICE_KINDS),
};
#undef T
static const struct layout entry = LAYOUT(entry_fields, PROTO_LIST_ENTRY_SIZE);

#define T struct proto_user_entry
static const struct field user_fields[] = {
	U32(T, uid),
	U32(T, channels),
	U32(T, connections),
	U64(T, pinned),
	U64(T, charged),
	U64(T, quota),
};
#undef T
static const struct layout user = LAYOUT(user_fields, PROTO_USER_ENTRY_SIZE);

#define T struct proto_pool_class
static const struct field pool_class_fields[] = {
	U64(T, size),
	U32(T, wanted),
	U32(T, ready),
	U32(T, filling),
	U64(T, locked),
};
#undef T
static const struct layout pool_class = LAYOUT(pool_class_fields, PROTO_POOL_CLASS_SIZE);

#define T struct proto_client_entry
static const struct field client_fields[] = {
	U64(T, id),
	U32(T, pid),
	U32(T, uid),
	U32(T, gid),
	U32(T, channels),
	U32(T, endpoints),
};
#undef T
static const struct layout client = LAYOUT(client_fields, PROTO_CLIENT_ENTRY_SIZE);

/* Message bodies: requests, then the bodies of successful replies. */
#define T struct proto_msg
static const struct field hello_req[] = {
	U32(T, u.hello.version),
	U32(T, u.hello.library),
};
static const struct field hello_rep[] = {
	U32(T, u.hello_reply.version),
	U32(T, u.hello_reply.flags),
	U32(T, u.hello_reply.library),
};
static const struct field create_req[] = {
	NAME(T, u.create.name),
	RECORD(T, u.create.geo, geometry),
	U32(T, u.create.mode),
	U32(T, u.create.flags),
	U32(T, u.create.node),
	U32(T, u.create.pin_idle),
	NAME(T, u.create.pci),
};
static const struct field create_rep[] = {
	U64(T, u.create_reply.size),
	U32(T, u.create_reply.state),
	U32(T, u.create_reply.backend),
	U64(T, u.create_reply.id),
};
static const struct field open_req[] = {
	NAME(T, u.open.name),
	U32(T, u.open.role),
	U32(T, u.open.node),
	U32(T, u.open.owner),
};
static const struct field open_rep[] = {
	U32(T, u.open_reply.endpoint),
	RECORD(T, u.open_reply.geo, geometry),
	U64(T, u.open_reply.size),
	U64(T, u.open_reply.id),
};
static const struct field unlink_req[] = {
	NAME(T, u.unlink.name),
};
static const struct field list_req[] = {
	U64(T, u.list.cursor),
};
static const struct field list_rep[] = {
	U64(T, u.list_reply.next),
	U32(T, u.list_reply.count),
	U32(T, u.list_reply.flags),
	ARRAY(T, u.list_reply.entries, u.list_reply.count, entry),
};
static const struct field status_req[] = {
	U64(T, u.status.cursor),
};
static const struct field status_rep[] = {
	U32(T, u.status_reply.pid),
	FLAGS(T, u.status_reply.flags, PROTO_STATUS_FLAGS),
	U64(T, u.status_reply.uptime_ms),
	U64(T, u.status_reply.budget),
	U64(T, u.status_reply.pinned),
	U32(T, u.status_reply.channels_pinned),
	U32(T, u.status_reply.channels_unpinned),
	U32(T, u.status_reply.connections),
	U32(T, u.status_reply.count),
	U64(T, u.status_reply.next),
	/* PROTO_STATUS_FIXED_SIZE bytes so far; the pool's PROTO_POOL_FIXED_SIZE: */
	U64(T, u.status_reply.pool_pinned),
	U64(T, u.status_reply.pool_hits),
	U64(T, u.status_reply.pool_misses),
	FLAGS(T, u.status_reply.pool_flags, PROTO_POOL_FLAGS),
	U32(T, u.status_reply.pool_count),
	ARRAY(T, u.status_reply.pool, u.status_reply.pool_count, pool_class),
	ARRAY(T, u.status_reply.users, u.status_reply.count, user),
};
static const struct field clients_req[] = {
	U64(T, u.clients.cursor),
};
static const struct field clients_rep[] = {
	U64(T, u.clients_reply.next),
	U32(T, u.clients_reply.count),
	FLAGS(T, u.clients_reply.flags, PROTO_CLIENTS_MORE),
	ARRAY(T, u.clients_reply.entries, u.clients_reply.count, client),
};
static const struct field close_req[] = {
	U64(T, u.close.id),
	U32(T, u.close.endpoint),
};
static const struct field stat_req[] = {
	NAME(T, u.stat.name),
};
static const struct field stat_rep[] = {
	RECORD(T, u.stat_reply.entry, entry),
};
static const struct field relock_req[] = {
	U64(T, u.relock.id),
};
static const struct field handback_req[] = {
	NAME(T, u.handback.name),
	RECORD(T, u.handback.geo, geometry),
	U32(T, u.handback.role),
	U32(T, u.handback.endpoint),
};
static const struct field handback_rep[] = {
	U64(T, u.handback_reply.id),
	FLAGS(T, u.handback_reply.flags, PROTO_HANDBACK_FLAGS),
};
static const struct field notify_req[] = {
	U64(T, u.notify.id),
	U32(T, u.notify.endpoint),
};
static const struct field peer_req[] = {
	U64(T, u.peer.id),
	U32(T, u.peer.endpoint),
};
static const struct field device_req[] = {
	U64(T, u.device.id),
	U32(T, u.device.kind),
	U32(T, u.device.delta),
};
#undef T

/* Every message type: its name, its request's body and its successful
 * reply's (none: empty), and which of the two comes with a descriptor. */
static const struct message {
	const char *name;
	struct layout request, reply;
	bool request_fd, reply_fd;
} messages[] = {
	[PROTO_HELLO] = {.name = "HELLO", .request = BODY(hello_req), .reply = BODY(hello_rep)},
	[PROTO_CREATE] = {.name = "CREATE", .request = BODY(create_req), .reply = BODY(create_rep)},
	[PROTO_OPEN] = {.name = "OPEN", .request = BODY(open_req), .reply = BODY(open_rep), .reply_fd = true},
	[PROTO_UNLINK] = {.name = "UNLINK", .request = BODY(unlink_req)},
	[PROTO_LIST] = {.name = "LIST", .request = BODY(list_req), .reply = BODY(list_rep)},
	[PROTO_SHUTDOWN] = {.name = "SHUTDOWN"},
	[PROTO_STATUS] = {.name = "STATUS", .request = BODY(status_req), .reply = BODY(status_rep)},
	[PROTO_CLIENTS] = {.name = "CLIENTS", .request = BODY(clients_req), .reply = BODY(clients_rep)},
	[PROTO_CLOSE] = {.name = "CLOSE", .request = BODY(close_req)},
	[PROTO_STAT] = {.name = "STAT", .request = BODY(stat_req), .reply = BODY(stat_rep)},
	[PROTO_RELOCK] = {.name = "RELOCK", .request = BODY(relock_req)},
	[PROTO_HANDBACK] = {.name = "HANDBACK", .request = BODY(handback_req), .reply = BODY(handback_rep), .request_fd = true},
	[PROTO_NOTIFY] = {.name = "NOTIFY", .request = BODY(notify_req), .request_fd = true},
	[PROTO_PEER] = {.name = "PEER", .request = BODY(peer_req), .reply_fd = true},
	[PROTO_DEVICE] = {.name = "DEVICE", .request = BODY(device_req)},
};
static_assert(sizeof(messages) / sizeof(messages[0]) == PROTO_DEVICE + 1, "a row for every request type");

/* ---- walking a layout ------------------------------------------------------- */

static uint32_t load32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static void put_fields(struct wr *w, const struct layout *l, const uint8_t *base);

/* One record of @p l: exactly its bytes. */
static void put_record(struct wr *w, const struct layout *l, const uint8_t *base)
{
	size_t start = w->len;

	put_fields(w, l, base);
	assert(w->bad || w->len - start == l->wire);
}

static void put_fields(struct wr *w, const struct layout *l, const uint8_t *base)
{
	for (size_t i = 0; i < l->n && !w->bad; i++) {
		const struct field *f = &l->fields[i];
		const uint8_t *p = base + f->off;
		uint32_t n;

		switch (f->kind) {
		case F_U32:
		case F_FLAGS:
			put_u32(w, load32(p));
			break;
		case F_U64:
			put_u64(w, load64(p));
			break;
		case F_NAME:
			put_name(w, (const char *)p);
			break;
		case F_RECORD:
			put_record(w, f->sub, p);
			break;
		case F_ARRAY:
			n = load32(base + f->count);
			if (n > f->arg)
				w->bad = true; /* over its page */
			for (uint32_t k = 0; k < n && !w->bad; k++)
				put_record(w, f->sub, p + (size_t)k * f->stride);
			break;
		}
	}
}

static void get_u32_to(struct rd *r, uint8_t *p)
{
	uint32_t v = get_u32(r);
	memcpy(p, &v, sizeof(v));
}

static void get_fields(struct rd *r, const struct layout *l, uint8_t *base)
{
	for (size_t i = 0; i < l->n && !r->bad; i++) {
		const struct field *f = &l->fields[i];
		uint8_t *p = base + f->off;
		uint64_t v;
		uint32_t n;

		switch (f->kind) {
		case F_U32:
			get_u32_to(r, p);
			break;
		case F_FLAGS:
			get_u32_to(r, p);
			if (load32(p) & ~f->arg)
				r->bad = true;
			break;
		case F_U64:
			v = get_u64(r);
			memcpy(p, &v, sizeof(v));
			break;
		case F_NAME:
			get_name(r, (char *)p);
			break;
		case F_RECORD:
			get_fields(r, f->sub, p);
			break;
		case F_ARRAY:
			/* The count, read before, bounded before any element is. */
			n = load32(base + f->count);
			if (n > f->arg)
				r->bad = true;
			for (uint32_t k = 0; k < n && !r->bad; k++)
				get_fields(r, f->sub, p + (size_t)k * f->stride);
			break;
		}
	}
}

/* ---- messages --------------------------------------------------------------- */

static bool is_request(uint16_t type)
{
	return type >= PROTO_HELLO && type <= PROTO_DEVICE;
}

static bool is_reply(uint16_t type)
{
	return type == PROTO_ERROR || ((type & PROTO_REPLY) && is_request(type & ~PROTO_REPLY));
}

/* The body of a packet of @p type (a request, or a successful reply). */
static const struct layout *body_of(uint16_t type)
{
	const struct message *msg = &messages[type & ~PROTO_REPLY];

	return type & PROTO_REPLY ? &msg->reply : &msg->request;
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

	bool body = true;
	if (is_reply(type)) {
		size_t n = strnlen(m->text, PROTO_TEXT_MAX);
		put_u32(&w, (uint32_t)m->status);
		put_u16(&w, (uint16_t)n);
		put_bytes(&w, m->text, n);
		body = m->status == 0 && type != PROTO_ERROR;
	}
	if (body)
		put_fields(&w, body_of(type), (const uint8_t *)m);
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

	bool body = true;
	if (reply) {
		m->status = (int32_t)get_u32(&r);
		get_text(&r, m->text);
		/* 0 or a negative errno; an ERROR reply is never a success. */
		if (m->status > 0 || m->status < -4095 || (type == PROTO_ERROR && m->status == 0))
			r.bad = true;
		body = m->status == 0 && type != PROTO_ERROR;
	}
	if (body)
		get_fields(&r, body_of(type), (uint8_t *)m);
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

bool proto_name_owner(const char *name, uid_t *uid)
{
	unsigned long long v = 0;
	size_t n = 1;

	if (!name || name[0] != '@' || name[1] < '0' || name[1] > '9' || (name[1] == '0' && name[2] != '.'))
		return false;
	for (; name[n] >= '0' && name[n] <= '9'; n++) {
		v = v * 10 + (unsigned)(name[n] - '0');
		if (n > 10 || v >= PROTO_OWNER_ANY)
			return false;
	}
	if (name[n] != '.' || name[n + 1] == '\0')
		return false;
	if (uid)
		*uid = (uid_t)v;
	return true;
}

/* @p n hex digits (lower case) at @p s. */
static bool hex_run(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

bool proto_pci_valid(const char *bus)
{
	size_t domain = 0;

	if (!bus)
		return false;
	while (domain < 9 && bus[domain] && bus[domain] != ':')
		domain++;
	if (domain < 4 || domain > 8 || !hex_run(bus, domain))
		return false;
	const char *p = bus + domain; /* ":BB:SS.F" */
	return strlen(p) == 8 && p[0] == ':' && hex_run(p + 1, 2) && p[3] == ':' && hex_run(p + 4, 2) &&
	       p[4] <= '1' && p[6] == '.' && p[7] >= '0' && p[7] <= '7';
}

bool proto_name_valid(const char *name)
{
	size_t n = 0;

	if (!name || name[0] == '.')
		return false;
	if (name[0] == '@') {
		if (!proto_name_owner(name, NULL))
			return false;
		n = 1;
	}
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
	if (type == PROTO_ERROR)
		return "ERROR";
	return is_request(type & ~PROTO_REPLY) ? messages[type & ~PROTO_REPLY].name : "unknown";
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

int proto_dir_check(const char *dir, char *why, size_t whylen)
{
	struct stat st;

	if (lstat(dir, &st) != 0) {
		int err = errno;
		snprintf(why, whylen, "%s: %s", dir, strerror(err));
		return -err;
	}
	if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "%s is %s, not a folder", dir,
			 S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid()) {
		snprintf(why, whylen, "%s belongs to uid %u, not to this user (uid %u)", dir, (unsigned)st.st_uid,
			 (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, whylen, "%s may be written by its group or others (mode %03o)", dir,
			 (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	return 0;
}

bool proto_request_takes_fd(uint16_t type)
{
	return is_request(type) && messages[type].request_fd;
}

bool proto_reply_gives_fd(uint16_t type)
{
	return type != PROTO_ERROR && is_reply(type) && messages[type & ~PROTO_REPLY].reply_fd;
}
