/*
 * check_protocol.c - the wire format of the pinshmd protocol, byte for byte.
 *
 * One instance of every request and every reply kind (successful replies
 * with and without a text, failed ones, the ERROR answer, pages empty and
 * filled) is encoded and compared with the bytes that the encoder wrote
 * when this test was made (golden, below); the bytes are decoded back and
 * every field compared with what was encoded.  Every field of a sample has
 * a value of its own, so that two fields swapped, one left out or written
 * at another width change the bytes.  Then the decoder's checks: any
 * golden packet cut short or lengthened, a name field without its NUL or
 * with bytes after it, a text over its length, counts over their page,
 * unknown flags where they are checked, and which types carry a descriptor.
 *
 * A change of the wire format is a new protocol version
 * (PINSHM_PROTOCOL_VERSION) and new golden bytes here, on purpose.  On a
 * mismatch the test prints the bytes it got.
 */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinshm.h"
#include "protocol.h"

/* ---- samples ---------------------------------------------------------------- */

/* Field values: each call a different one, no byte of it zero. */
static uint32_t counter;

static uint32_t v32(void)
{
	counter++;
	return 0x01010101u * (counter & 0x3f) + 0x10203040u;
}

/* Each value drawn by a statement of its own: the order in which the
 * operands of one expression are evaluated is unspecified. */
static uint64_t v64(void)
{
	uint64_t hi = v32();

	return hi << 32 | v32();
}

static void fill_geo(struct proto_geometry *g)
{
	g->kind = v32();
	g->flags = v32();
	g->capacity = v64();
	g->max_message = v32();
	g->max_producers = v32();
	g->max_consumers = v32();
}

static void fill_entry(struct proto_list_entry *e, const char *name)
{
	strcpy(e->name, name);
	fill_geo(&e->geo);
	e->state = v32();
	e->uid = v32();
	e->gid = v32();
	e->mode = v32();
	e->size = v64();
	e->producers = v32();
	e->consumers = v32();
	e->node = -(int32_t)(v32() & 0xff);
	e->backend = v32();
	e->pin_idle = v32();
	e->messages = v64();
	e->bytes = v64();
	e->lost = v64();
	e->refused = v64();
	e->device_regs = v32();
	e->device_kinds = PROTO_DEVICE_KINDS;
}

enum sample_id {
	REQ_HELLO,
	REQ_CREATE,
	REQ_OPEN,
	REQ_UNLINK,
	REQ_LIST,
	REQ_SHUTDOWN,
	REQ_STATUS,
	REQ_CLIENTS,
	REQ_CLOSE,
	REQ_STAT,
	REQ_RELOCK,
	REQ_HANDBACK,
	REQ_NOTIFY,
	REQ_PEER,
	REQ_DEVICE,
	REP_HELLO,
	REP_CREATE,
	REP_OPEN,
	REP_OPEN_ENOENT,
	REP_UNLINK,
	REP_LIST,
	REP_LIST_EMPTY,
	REP_SHUTDOWN,
	REP_STATUS,
	REP_STATUS_EMPTY,
	REP_CLIENTS,
	REP_CLOSE,
	REP_STAT,
	REP_RELOCK,
	REP_HANDBACK,
	REP_NOTIFY,
	REP_PEER,
	REP_DEVICE,
	REP_ERROR,
	SAMPLES
};

static void fill_status_reply(struct proto_msg *m, uint32_t classes, uint32_t users)
{
	typeof(m->u.status_reply) *s = &m->u.status_reply;

	s->pid = v32();
	s->flags = PROTO_STATUS_USER_MODE | PROTO_STATUS_MORE;
	s->uptime_ms = v64();
	s->budget = v64();
	s->pinned = v64();
	s->channels_pinned = v32();
	s->channels_unpinned = v32();
	s->connections = v32();
	s->count = users;
	s->next = v64();
	s->pool_pinned = v64();
	s->pool_hits = v64();
	s->pool_misses = v64();
	s->pool_flags = PROTO_POOL_STOPPED;
	s->pool_count = classes;
	for (uint32_t i = 0; i < classes; i++) {
		struct proto_pool_class *c = &s->pool[i];
		c->size = v64();
		c->wanted = v32();
		c->ready = v32();
		c->filling = v32();
		c->locked = v64();
	}
	for (uint32_t i = 0; i < users; i++) {
		struct proto_user_entry *u = &s->users[i];
		u->uid = v32();
		u->channels = v32();
		u->connections = v32();
		u->pinned = v64();
		u->charged = v64();
		u->quota = v64();
	}
}

/* The fields of a request (or a successful reply) of sample @p id. */
static void fill_body(enum sample_id id, struct proto_msg *m)
{
	switch (id) {
	case REQ_HELLO:
		m->u.hello.version = v32();
		m->u.hello.library = v32();
		break;
	case REQ_CREATE:
		strcpy(m->u.create.name, "a.create_name-0");
		fill_geo(&m->u.create.geo);
		m->u.create.mode = v32();
		m->u.create.flags = v32();
		m->u.create.node = PINSHM_NODE_LOCAL;
		m->u.create.pin_idle = v32();
		strcpy(m->u.create.pci, "0000:3b:00.0");
		break;
	case REQ_OPEN:
		/* A name of PINSHM_NAME_MAX characters: its field's last byte NUL. */
		memset(m->u.open.name, 'o', PINSHM_NAME_MAX);
		m->u.open.role = v32();
		m->u.open.node = PINSHM_NODE_ANY;
		m->u.open.owner = v32();
		break;
	case REQ_UNLINK:
		strcpy(m->u.unlink.name, "u");
		break;
	case REQ_LIST:
		m->u.list.cursor = v64();
		break;
	case REQ_STATUS:
		m->u.status.cursor = v64();
		break;
	case REQ_CLIENTS:
		m->u.clients.cursor = v64();
		break;
	case REQ_CLOSE:
		m->u.close.id = v64();
		m->u.close.endpoint = v32();
		break;
	case REQ_STAT:
		strcpy(m->u.stat.name, "stat");
		break;
	case REQ_RELOCK:
		m->u.relock.id = v64();
		break;
	case REQ_HANDBACK:
		strcpy(m->u.handback.name, "adopted");
		fill_geo(&m->u.handback.geo);
		m->u.handback.role = v32();
		m->u.handback.endpoint = v32();
		break;
	case REQ_NOTIFY:
		m->u.notify.id = v64();
		m->u.notify.endpoint = v32();
		break;
	case REQ_PEER:
		m->u.peer.id = v64();
		m->u.peer.endpoint = v32();
		break;
	case REQ_DEVICE:
		m->u.device.id = v64();
		m->u.device.kind = v32();
		m->u.device.delta = -1;
		break;
	case REP_HELLO:
		m->u.hello_reply.version = v32();
		m->u.hello_reply.flags = PROTO_HELLO_USER_MODE;
		m->u.hello_reply.library = v32();
		break;
	case REP_CREATE:
		m->u.create_reply.size = v64();
		m->u.create_reply.state = v32();
		m->u.create_reply.backend = v32();
		m->u.create_reply.id = v64();
		break;
	case REP_OPEN:
		m->u.open_reply.endpoint = v32();
		fill_geo(&m->u.open_reply.geo);
		m->u.open_reply.size = v64();
		m->u.open_reply.id = v64();
		break;
	case REP_LIST:
		m->u.list_reply.next = v64();
		m->u.list_reply.count = 2;
		m->u.list_reply.flags = PROTO_LIST_MORE;
		fill_entry(&m->u.list_reply.entries[0], "first");
		fill_entry(&m->u.list_reply.entries[1], "second.one");
		break;
	case REP_LIST_EMPTY:
		m->u.list_reply.next = v64();
		break;
	case REP_STATUS:
		fill_status_reply(m, 2, 3);
		break;
	case REP_STATUS_EMPTY:
		fill_status_reply(m, 0, 0);
		m->u.status_reply.flags = 0;
		m->u.status_reply.pool_flags = 0;
		break;
	case REP_CLIENTS:
		m->u.clients_reply.next = v64();
		m->u.clients_reply.count = 2;
		m->u.clients_reply.flags = PROTO_CLIENTS_MORE;
		for (int i = 0; i < 2; i++) {
			struct proto_client_entry *e = &m->u.clients_reply.entries[i];
			e->id = v64();
			e->pid = v32();
			e->uid = v32();
			e->gid = v32();
			e->channels = v32();
			e->endpoints = v32();
		}
		break;
	case REP_STAT:
		fill_entry(&m->u.stat_reply.entry, "stat");
		break;
	case REP_HANDBACK:
		m->u.handback_reply.id = v64();
		m->u.handback_reply.flags = PROTO_HANDBACK_FLAGS;
		break;
	default: /* nothing more */
		break;
	}
}

static const uint16_t sample_type[SAMPLES] = {
	[REQ_HELLO] = PROTO_HELLO,
	[REQ_CREATE] = PROTO_CREATE,
	[REQ_OPEN] = PROTO_OPEN,
	[REQ_UNLINK] = PROTO_UNLINK,
	[REQ_LIST] = PROTO_LIST,
	[REQ_SHUTDOWN] = PROTO_SHUTDOWN,
	[REQ_STATUS] = PROTO_STATUS,
	[REQ_CLIENTS] = PROTO_CLIENTS,
	[REQ_CLOSE] = PROTO_CLOSE,
	[REQ_STAT] = PROTO_STAT,
	[REQ_RELOCK] = PROTO_RELOCK,
	[REQ_HANDBACK] = PROTO_HANDBACK,
	[REQ_NOTIFY] = PROTO_NOTIFY,
	[REQ_PEER] = PROTO_PEER,
	[REQ_DEVICE] = PROTO_DEVICE,
	[REP_HELLO] = PROTO_HELLO | PROTO_REPLY,
	[REP_CREATE] = PROTO_CREATE | PROTO_REPLY,
	[REP_OPEN] = PROTO_OPEN | PROTO_REPLY,
	[REP_OPEN_ENOENT] = PROTO_OPEN | PROTO_REPLY,
	[REP_UNLINK] = PROTO_UNLINK | PROTO_REPLY,
	[REP_LIST] = PROTO_LIST | PROTO_REPLY,
	[REP_LIST_EMPTY] = PROTO_LIST | PROTO_REPLY,
	[REP_SHUTDOWN] = PROTO_SHUTDOWN | PROTO_REPLY,
	[REP_STATUS] = PROTO_STATUS | PROTO_REPLY,
	[REP_STATUS_EMPTY] = PROTO_STATUS | PROTO_REPLY,
	[REP_CLIENTS] = PROTO_CLIENTS | PROTO_REPLY,
	[REP_CLOSE] = PROTO_CLOSE | PROTO_REPLY,
	[REP_STAT] = PROTO_STAT | PROTO_REPLY,
	[REP_RELOCK] = PROTO_RELOCK | PROTO_REPLY,
	[REP_HANDBACK] = PROTO_HANDBACK | PROTO_REPLY,
	[REP_NOTIFY] = PROTO_NOTIFY | PROTO_REPLY,
	[REP_PEER] = PROTO_PEER | PROTO_REPLY,
	[REP_DEVICE] = PROTO_DEVICE | PROTO_REPLY,
	[REP_ERROR] = PROTO_ERROR,
};

/* Sample @p id as the caller of proto_encode() fills it (the rest zero). */
static void make_sample(enum sample_id id, struct proto_msg *m)
{
	memset(m, 0, sizeof(*m));
	counter = (uint32_t)id * 7;
	m->h.type = sample_type[id];
	m->h.seq = 0x5e000000u | (uint32_t)id;
	if (id == REP_OPEN_ENOENT) {
		m->status = -ENOENT;
		strcpy(m->text, "no channel named x");
	} else if (id == REP_ERROR) {
		m->status = -EPROTO;
		strcpy(m->text, "protocol error");
	} else {
		if (id == REP_CREATE || id == REP_STATUS)
			strcpy(m->text, "made ~ {ok}");
		fill_body(id, m);
	}
}

static const char *const sample_name[SAMPLES] = {
	[REQ_HELLO] = "REQ_HELLO", [REQ_CREATE] = "REQ_CREATE", [REQ_OPEN] = "REQ_OPEN",
	[REQ_UNLINK] = "REQ_UNLINK", [REQ_LIST] = "REQ_LIST", [REQ_SHUTDOWN] = "REQ_SHUTDOWN",
	[REQ_STATUS] = "REQ_STATUS", [REQ_CLIENTS] = "REQ_CLIENTS", [REQ_CLOSE] = "REQ_CLOSE",
	[REQ_STAT] = "REQ_STAT", [REQ_RELOCK] = "REQ_RELOCK", [REQ_HANDBACK] = "REQ_HANDBACK",
	[REQ_NOTIFY] = "REQ_NOTIFY", [REQ_PEER] = "REQ_PEER", [REP_HELLO] = "REP_HELLO",
	[REP_CREATE] = "REP_CREATE", [REP_OPEN] = "REP_OPEN", [REP_OPEN_ENOENT] = "REP_OPEN_ENOENT",
	[REP_UNLINK] = "REP_UNLINK", [REP_LIST] = "REP_LIST", [REP_LIST_EMPTY] = "REP_LIST_EMPTY",
	[REP_SHUTDOWN] = "REP_SHUTDOWN", [REP_STATUS] = "REP_STATUS", [REP_STATUS_EMPTY] = "REP_STATUS_EMPTY",
	[REP_CLIENTS] = "REP_CLIENTS", [REP_CLOSE] = "REP_CLOSE", [REP_STAT] = "REP_STAT",
	[REP_RELOCK] = "REP_RELOCK", [REP_HANDBACK] = "REP_HANDBACK", [REP_NOTIFY] = "REP_NOTIFY",
	[REP_PEER] = "REP_PEER", [REP_ERROR] = "REP_ERROR", [REQ_DEVICE] = "REQ_DEVICE", [REP_DEVICE] = "REP_DEVICE",
};

/* ---- golden bytes ------------------------------------------------------------- */

/* What the encoder wrote for each sample, in hex. */
static const char *const golden[SAMPLES] = {
	[REQ_HELLO] =
		"5053484d08000100180000000000005e4131211142322212",
	[REQ_CREATE] =
		"5053484d08000200bc0000000100005e612e6372656174655f6e616d652d300000000000000000000000000000000000"
		"000000000000000000000000000000000000000000000000000000000000000048382818493929194b3b2b1b4a3a2a1a"
		"4c3c2c1c4d3d2d1d4e3e2e1e4f3f2f1f50403020feffffff51413121303030303a33623a30302e300000000000000000"
		"0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
	[REQ_OPEN] =
		"5053484d080003005c0000000200005e6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f"
		"6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f004f3f2f1fffffffff50403020",
	[REQ_UNLINK] =
		"5053484d08000400500000000300005e7500000000000000000000000000000000000000000000000000000000000000"
		"0000000000000000000000000000000000000000000000000000000000000000",
	[REQ_LIST] =
		"5053484d08000500180000000400005e5e4e3e2e5d4d3d2d",
	[REQ_SHUTDOWN] =
		"5053484d08000600100000000500005e",
	[REQ_STATUS] =
		"5053484d08000700180000000600005e6c5c4c3c6b5b4b3b",
	[REQ_CLIENTS] =
		"5053484d08000800180000000700005e7363534372625242",
	[REQ_CLOSE] =
		"5053484d080009001c0000000800005e7a6a5a4a796959497b6b5b4b",
	[REQ_STAT] =
		"5053484d08000a00500000000900005e7374617400000000000000000000000000000000000000000000000000000000"
		"0000000000000000000000000000000000000000000000000000000000000000",
	[REQ_RELOCK] =
		"5053484d08000b00180000000a00005e4838281847372717",
	[REQ_HANDBACK] =
		"5053484d08000c00740000000b00005e61646f7074656400000000000000000000000000000000000000000000000000"
		"00000000000000000000000000000000000000000000000000000000000000004e3e2e1e4f3f2f1f5141312150403020"
		"5242322253433323544434245545352556463626",
	[REQ_NOTIFY] =
		"5053484d08000d001c0000000c00005e564636265545352557473727",
	[REQ_PEER] =
		"5053484d08000e001c0000000d00005e5d4d3d2d5c4c3c2c5e4e3e2e",
	[REQ_DEVICE] =
		"5053484d08000f00200000000e00005e645444346353433365554535ffffffff",
	[REP_HELLO] =
		"5053484d08000180220000000f00005e0000000000006a5a4a3a010000006b5b4b3b",
	[REP_CREATE] =
		"5053484d08000280390000001000005e000000000b006d616465207e207b6f6b7d726252427161514173635343746454"
		"447666564675655545",
	[REP_OPEN] =
		"5053484d08000380460000001100005e00000000000078685848796959497a6a5a4a7c6c5c4c7b6b5b4b7d6d5d4d7e6e"
		"5e4e7f6f5f4f41312111403020104333231342322212",
	[REP_OPEN_ENOENT] =
		"5053484d08000380280000001200005efeffffff12006e6f206368616e6e656c206e616d65642078",
	[REP_UNLINK] =
		"5053484d08000480160000001300005e000000000000",
	[REP_LIST] =
		"5053484d08000580860100001400005e0000000000004e3e2e1e4d3d2d1d020000000100000066697273740000000000"
		"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
		"0000000000004f3f2f1f5040302052423222514131215343332354443424554535255646362657473727584838285949"
		"39295b4b3b2b5a4a3a2a5c4c3c2c5d4d3d2da2ffffff5f4f3f2f60504030625242326151413164544434635343336656"
		"463665554535685848386757473769594939060000007365636f6e642e6f6e6500000000000000000000000000000000"
		"00000000000000000000000000000000000000000000000000000000000000000000000000006a5a4a3a6b5b4b3b6d5d"
		"4d3d6c5c4c3c6e5e4e3e6f5f4f3f70605040716151417262524273635343746454447666564675655545776757477868"
		"584887ffffff7a6a5a4a7b6b5b4b7d6d5d4d7c6c5c4c7f6f5f4f7e6e5e4e413121114030201043332313423222124434"
		"241406000000",
	[REP_LIST_EMPTY] =
		"5053484d08000580260000001500005e00000000000055453525544434240000000000000000",
	[REP_SHUTDOWN] =
		"5053484d08000680160000001600005e000000000000",
	[REP_STATUS] =
		"5053484d080007801d0100001700005e000000000b006d616465207e207b6f6b7d625242320300000064544434635343"
		"3366564636655545356858483867574737695949396a5a4a3a6b5b4b3b030000006d5d4d3d6c5c4c3c6f5f4f3f6e5e4e"
		"3e71615141706050407363534372625242010000000200000075655545746454447666564677675747786858487a6a5a"
		"4a796959497c6c5c4c7b6b5b4b7d6d5d4d7e6e5e4e7f6f5f4f4131211140302010423222124333231344342414463626"
		"164535251548382818473727174a3a2a1a493929194b3b2b1b4c3c2c1c4d3d2d1d4f3f2f1f4e3e2e1e51413121504030"
		"20534333235242322254443424554535255646362658483828574737275a4a3a2a594939295c4c3c2c5b4b3b2b",
	[REP_STATUS_EMPTY] =
		"5053484d080007806e0000001800005e00000000000069594939000000006b5b4b3b6a5a4a3a6d5d4d3d6c5c4c3c6f5f"
		"4f3f6e5e4e3e706050407161514172625242000000007464544473635343766656467565554578685848776757477a6a"
		"5a4a796959490000000000000000",
	[REP_CLIENTS] =
		"5053484d080008805e0000001900005e0000000000007161514170605040020000000100000073635343726252427464"
		"5444756555457666564677675747786858487a6a5a4a796959497b6b5b4b7c6c5c4c7d6d5d4d7e6e5e4e7f6f5f4f",
	[REP_CLOSE] =
		"5053484d08000980160000001a00005e000000000000",
	[REP_STAT] =
		"5053484d08000a80c60000001b00005e0000000000007374617400000000000000000000000000000000000000000000"
		"00000000000000000000000000000000000000000000000000000000000000000000000000007e6e5e4e7f6f5f4f4131"
		"211140302010423222124333231344342414453525154636261647372717483828184a3a2a1a493929194b3b2b1b4c3c"
		"2c1cb3ffffff4e3e2e1e4f3f2f1f51413121504030205343332352423222554535255444342457473727564636265848"
		"382806000000",
	[REP_RELOCK] =
		"5053484d08000b80160000001c00005e000000000000",
	[REP_HANDBACK] =
		"5053484d08000c80220000001d00005e0000000000004d3d2d1d4c3c2c1c07000000",
	[REP_NOTIFY] =
		"5053484d08000d80160000001e00005e000000000000",
	[REP_PEER] =
		"5053484d08000e80160000001f00005e000000000000",
	[REP_DEVICE] =
		"5053484d08000f80160000002000005e000000000000",
	[REP_ERROR] =
		"5053484d0800ffff240000002100005eb9ffffff0e0070726f746f636f6c206572726f72",
};

static unsigned hex_digit(char c)
{
	const char *digits = "0123456789abcdef", *p = strchr(digits, c);

	ck_assert(c != '\0' && p != NULL);
	return (unsigned)(p - digits);
}

static size_t from_hex(const char *hex, uint8_t *out)
{
	size_t n = strlen(hex) / 2;

	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
	return n;
}

static bool is_reply_type(uint16_t type) { return type == PROTO_ERROR || (type & PROTO_REPLY); }

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Decode @p len bytes at @p b, as the side that receives sample @p id's type,
 * after setting the header's length field to @p len. */
static int decode_as(enum sample_id id, uint8_t *b, size_t len, struct proto_msg *m)
{
	if (len >= 12)
		put32(b + 8, (uint32_t)len);
	memset(m, 0, sizeof(*m));
	return proto_decode(b, len, is_reply_type(sample_type[id]), m);
}

/* The golden bytes of sample @p id in @p b. */
static size_t golden_bytes(enum sample_id id, uint8_t *b)
{
	ck_assert_msg(golden[id] != NULL, "%s: no golden bytes", sample_name[id]);
	return from_hex(golden[id], b);
}

/* ---- tests -------------------------------------------------------------------- */

/* Each sample encodes to its golden bytes. */
START_TEST(test_golden)
{
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];
	int wrong = 0;

	for (int id = 0; id < SAMPLES; id++) {
		make_sample(id, &m);
		int n = proto_encode(&m, b);
		ck_assert_msg(n > 0, "%s: encode %d", sample_name[id], n);
		char hex[2 * PROTO_MAX_PACKET + 1];
		for (int i = 0; i < n; i++)
			sprintf(hex + 2 * i, "%02x", b[i]);
		if (golden[id] && strcmp(hex, golden[id]) == 0)
			continue;
		wrong++;
		fprintf(stderr, "[%s] =\n", sample_name[id]);
		for (int i = 0; i < 2 * n; i += 96)
			fprintf(stderr, "\t\"%.96s\"\n", hex + i);
		fprintf(stderr, ",\n");
	}
	ck_assert_msg(wrong == 0, "%d of %d samples encode otherwise than their golden bytes", wrong, SAMPLES);
}
END_TEST

/* The golden bytes decode to every field of their sample, on the side that
 * receives them, and not on the other. */
START_TEST(test_decode)
{
	static struct proto_msg want, got;
	uint8_t b[PROTO_MAX_PACKET];

	for (int id = 0; id < SAMPLES; id++) {
		size_t len = golden_bytes(id, b);
		make_sample(id, &want);
		want.h.magic = PROTO_MAGIC;
		want.h.version = PROTO_VERSION;
		want.h.length = (uint32_t)len;
		ck_assert_msg(decode_as(id, b, len, &got) == 0, "%s: not decoded", sample_name[id]);
		ck_assert_msg(memcmp(&want, &got, sizeof(want)) == 0, "%s: decoded otherwise", sample_name[id]);
		ck_assert_msg(proto_decode(b, len, !is_reply_type(sample_type[id]), &got) == -EOPNOTSUPP,
			      "%s: decoded by the wrong side", sample_name[id]);
	}
}
END_TEST

/* A packet's body has exactly the length of its type: any golden packet cut
 * short or lengthened (its length field telling the truth) is refused, and so
 * is one whose length field lies. */
START_TEST(test_lengths)
{
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET + 1], orig[PROTO_MAX_PACKET];

	for (int id = 0; id < SAMPLES; id++) {
		size_t len = golden_bytes(id, orig);
		for (size_t cut = 0; cut < len; cut++) {
			memcpy(b, orig, len);
			if (decode_as(id, b, cut, &m) != -EBADMSG)
				ck_abort_msg("%s cut to %zu: accepted", sample_name[id], cut);
		}
		golden_bytes(id, b);
		b[len] = 0;
		ck_assert_msg(decode_as(id, b, len + 1, &m) == -EBADMSG, "%s with a byte more", sample_name[id]);
		golden_bytes(id, b);
		ck_assert_int_eq(proto_decode(b, len - 1, is_reply_type(sample_type[id]), &m), -EBADMSG);
	}
	memset(b, 0, sizeof(b));
	golden_bytes(REQ_HELLO, b);
	ck_assert_int_eq(decode_as(REQ_HELLO, b, PROTO_MAX_PACKET + 1, &m), -EMSGSIZE);
}
END_TEST

/* A name field holds a NUL and nothing but NULs after it. */
START_TEST(test_names)
{
	static const struct {
		enum sample_id id;
		size_t at; /* where its (first) name field starts */
	} fields[] = {
		{REQ_CREATE, 16}, {REQ_CREATE, 16 + 108}, {REQ_OPEN, 16}, {REQ_UNLINK, 16}, {REQ_STAT, 16}, {REQ_HANDBACK, 16},
		{REP_STAT, 22},   {REP_LIST, 38}, {REP_LIST, 38 + PROTO_LIST_ENTRY_SIZE},
	};
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		enum sample_id id = fields[i].id;
		size_t len = golden_bytes(id, b);
		ck_assert_msg(decode_as(id, b, len, &m) == 0, "%s", sample_name[id]);
		b[fields[i].at + PROTO_NAME_FIELD - 1] = 'x'; /* no NUL left */
		ck_assert_msg(decode_as(id, b, len, &m) == -EBADMSG, "%s: a name without its NUL", sample_name[id]);
		golden_bytes(id, b);
		if (id != REQ_OPEN) { /* OPEN's name fills its field */
			b[fields[i].at + PROTO_NAME_FIELD - 2] = 'x'; /* after the NUL */
			ck_assert_msg(decode_as(id, b, len, &m) == -EBADMSG, "%s: bytes after a name", sample_name[id]);
		}
	}

	/* The encoder refuses a name that does not fit its field with its NUL. */
	make_sample(REQ_UNLINK, &m);
	memset(m.u.unlink.name, 'n', sizeof(m.u.unlink.name));
	ck_assert_int_eq(proto_encode(&m, b), -EINVAL);
}
END_TEST

/* Owned names "@UID.REST": valid exactly in that form, the uid read back. */
START_TEST(test_owned_names)
{
	static const struct {
		const char *name;
		bool valid;
		long long owner; /* -1: not of the owned form */
	} cases[] = {
		{"@0.x", true, 0},
		{"@1000.jobs", true, 1000},
		{"@1000..x", true, 1000},
		{"@4294967294.a", true, 4294967294ll},
		{"@1000.mpi.0123456789abcdef.31", true, 1000},
		{"plain", true, -1},
		{"a@b", false, -1},
		{"@", false, -1},
		{"@.x", false, -1},
		{"@1000", false, -1},
		{"@1000.", false, -1},
		{"@01.x", false, -1},
		{"@00.x", false, -1},
		{"@-1.x", false, -1},
		{"@x.y", false, -1},
		{"@1000x.y", false, -1},
		{"@1000.a@b", false, 1000}, /* the form, not a valid name */
		{"@4294967295.x", false, -1},  /* PROTO_OWNER_ANY: no user */
		{"@42949672950.x", false, -1}, /* over 32 bits */
		{"@99999999999999999999999.x", false, -1},
		{"@1000.012345678901234567890123456789012345678901234567890123456", true, 1000}, /* 63 characters */
		{"@1000.0123456789012345678901234567890123456789012345678901234567", false, 1000}, /* 64 */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uid_t uid = 12345;
		bool owned = proto_name_owner(cases[i].name, &uid);
		ck_assert_msg(proto_name_valid(cases[i].name) == cases[i].valid, "'%s': valid is %d", cases[i].name,
			      !cases[i].valid);
		ck_assert_msg(owned == (cases[i].owner >= 0), "'%s': owned is %d", cases[i].name, owned);
		if (owned)
			ck_assert_msg((long long)uid == cases[i].owner, "'%s': uid %lu", cases[i].name,
				      (unsigned long)uid);
	}
}
END_TEST

/* PCI bus ids: exactly sysfs's form, since the daemon makes a path of them. */
START_TEST(test_pci_ids)
{
	static const struct {
		const char *bus;
		bool valid;
	} cases[] = {
		{"0000:3b:00.0", true},     {"0000:00:1f.7", true},    {"10000:e1:00.1", true},
		{"ffffffff:ff:1f.7", true}, {"0000:3B:00.0", false},   {"00000000:3b:00.0", true},
		{"000:3b:00.0", false},     {"000000000:3b:00.0", false}, {"3b:00.0", false},
		{"0000:3b:20.0", false},    {"0000:3b:00.8", false},   {"0000:3b:00.0 ", false},
		{"0000:3b:00.0/..", false}, {"../../../etc", false},   {"0000:3b:00", false},
		{"", false},                {"0000:3b:00.0\n", false}, {"0000:3g:00.0", false},
		{"0000:3b-00.0", false},    {"0000/3b:00.0", false},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(proto_pci_valid(cases[i].bus) == cases[i].valid, "'%s': valid is %d", cases[i].bus,
			      !cases[i].valid);
	ck_assert(!proto_pci_valid(NULL));
}
END_TEST

/* A reply's text: at most PROTO_TEXT_MAX bytes on the wire, cut to that when
 * encoded, its unprintable bytes decoded as '?'. */
START_TEST(test_text)
{
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];

	make_sample(REP_ERROR, &m);
	memset(m.text, 't', sizeof(m.text) - 1);
	int n = proto_encode(&m, b);
	ck_assert_int_eq(n, PROTO_HEADER_SIZE + 4 + 2 + PROTO_TEXT_MAX);
	ck_assert_int_eq(decode_as(REP_ERROR, b, (size_t)n, &m), 0);
	ck_assert_uint_eq(strlen(m.text), PROTO_TEXT_MAX);

	b[20] = PROTO_TEXT_MAX + 1; /* the length says one more, and there is one more */
	b[n] = 't';
	ck_assert_int_eq(decode_as(REP_ERROR, b, (size_t)n + 1, &m), -EBADMSG);

	size_t len = golden_bytes(REP_ERROR, b);
	b[22] = '\n';
	b[23] = 0x80;
	ck_assert_int_eq(decode_as(REP_ERROR, b, len, &m), 0);
	ck_assert_str_eq(m.text, "??otocol error");
}
END_TEST

/* A reply's status: 0 or a negative errno; never 0 in an ERROR. */
START_TEST(test_status)
{
	static const struct {
		enum sample_id id;
		int32_t status;
		int rc;
	} cases[] = {
		{REP_OPEN_ENOENT, 1, -EBADMSG}, {REP_OPEN_ENOENT, -4096, -EBADMSG}, {REP_OPEN_ENOENT, -4095, 0},
		{REP_ERROR, 0, -EBADMSG},        {REP_ERROR, -EINVAL, 0},
	};
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = golden_bytes(cases[i].id, b);
		put32(b + 16, (uint32_t)cases[i].status);
		ck_assert_msg(decode_as(cases[i].id, b, len, &m) == cases[i].rc, "case %zu", i);
	}
}
END_TEST

/* The header: magic, version (the header still filled, to answer), type. */
START_TEST(test_header)
{
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];
	size_t len = golden_bytes(REQ_CLOSE, b);

	b[0] = 'X';
	ck_assert_int_eq(decode_as(REQ_CLOSE, b, len, &m), -EBADMSG);
	golden_bytes(REQ_CLOSE, b);
	b[4] = PROTO_VERSION - 1;
	ck_assert_int_eq(decode_as(REQ_CLOSE, b, len, &m), -EPROTO);
	ck_assert_uint_eq(m.h.seq, 0x5e000000u | REQ_CLOSE);
	static const uint16_t unknown[] = {0, PROTO_DEVICE + 1, PROTO_REPLY, PROTO_REPLY | (PROTO_DEVICE + 1), 0x7fff};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		golden_bytes(REQ_CLOSE, b);
		b[6] = (uint8_t)unknown[i];
		b[7] = (uint8_t)(unknown[i] >> 8);
		ck_assert_int_eq(proto_decode(b, len, false, &m), -EOPNOTSUPP);
		ck_assert_int_eq(proto_decode(b, len, true, &m), -EOPNOTSUPP);
		ck_assert_uint_eq(m.h.type, unknown[i]);
		m.h.type = unknown[i];
		ck_assert_int_eq(proto_encode(&m, b), -EINVAL);
	}
}
END_TEST

/* Flags that the decoder checks (STATUS, its pool, CLIENTS, HANDBACK replies)
 * have no unknown bit; those it leaves to the receiver (HELLO, LIST) may. */
START_TEST(test_flags)
{
	static const struct {
		enum sample_id id;
		size_t at; /* of the flags field */
		int rc;    /* with every bit set */
	} cases[] = {
		{REP_STATUS_EMPTY, 22 + 4, -EBADMSG},
		{REP_STATUS_EMPTY, 22 + PROTO_STATUS_FIXED_SIZE + 24, -EBADMSG},
		{REP_CLIENTS, 22 + 12, -EBADMSG},
		{REP_HANDBACK, 22 + 8, -EBADMSG},
		{REP_STAT, 22 + PROTO_LIST_ENTRY_SIZE - 4, -EBADMSG}, /* device_kinds */
		{REP_HELLO, 22 + 4, 0},
		{REP_LIST_EMPTY, 22 + 12, 0},
	};
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum sample_id id = cases[i].id;
		size_t len = golden_bytes(id, b);
		ck_assert_msg(decode_as(id, b, len, &m) == 0, "%s", sample_name[id]);
		put32(b + cases[i].at, UINT32_MAX);
		ck_assert_msg(decode_as(id, b, len, &m) == cases[i].rc, "%s: unknown flags", sample_name[id]);
	}
}
END_TEST

/*
 * A page of each kind at its most encodes and decodes; with one element more
 * (its bytes there, the count saying so) the encoder and the decoder refuse it.
 */
static uint32_t *count_of(struct proto_msg *m, size_t off) { return (uint32_t *)((char *)m + off); }

static void check_page(enum sample_id id, size_t count_off, uint32_t page, size_t elem, size_t count_at)
{
	static struct proto_msg m;
	uint8_t b[PROTO_MAX_PACKET];

	make_sample(id, &m);
	*count_of(&m, count_off) = page; /* the zero elements past the sample's own are elements too */
	int n = proto_encode(&m, b);
	ck_assert_msg(n > 0, "%s: a full page", sample_name[id]);
	ck_assert_int_eq(decode_as(id, b, (size_t)n, &m), 0);
	ck_assert_uint_eq(*count_of(&m, count_off), page);
	ck_assert_uint_le((size_t)n + elem, PROTO_MAX_PACKET);
	memcpy(b + n, b + n - elem, elem);
	put32(b + count_at, page + 1);
	ck_assert_msg(decode_as(id, b, (size_t)n + elem, &m) == -EBADMSG, "%s: a page and one", sample_name[id]);

	make_sample(id, &m);
	*count_of(&m, count_off) = page + 1;
	ck_assert_int_eq(proto_encode(&m, b), -EINVAL);
}

START_TEST(test_pages)
{
	size_t status = 22 + 11; /* REP_STATUS's body, after its text */

	check_page(REP_LIST, offsetof(struct proto_msg, u.list_reply.count), PROTO_LIST_PAGE, PROTO_LIST_ENTRY_SIZE,
		   22 + 8);
	check_page(REP_CLIENTS, offsetof(struct proto_msg, u.clients_reply.count), PROTO_CLIENTS_PAGE,
		   PROTO_CLIENT_ENTRY_SIZE, 22 + 8);
	check_page(REP_STATUS, offsetof(struct proto_msg, u.status_reply.count), PROTO_STATUS_PAGE,
		   PROTO_USER_ENTRY_SIZE, status + 44);
	check_page(REP_STATUS, offsetof(struct proto_msg, u.status_reply.pool_count), PROTO_POOL_CLASSES,
		   PROTO_POOL_CLASS_SIZE, status + PROTO_STATUS_FIXED_SIZE + 28);
}
END_TEST

/* Which messages carry a descriptor, and the types' names. */
START_TEST(test_descriptors)
{
	/* (ck_assert marks a point through a pipe each time: once per type is slow under valgrind) */
	for (uint32_t t = 0; t <= UINT16_MAX; t++) {
		bool takes = t == PROTO_HANDBACK || t == PROTO_NOTIFY;
		bool gives = t == (PROTO_OPEN | PROTO_REPLY) || t == (PROTO_PEER | PROTO_REPLY);
		if (proto_request_takes_fd((uint16_t)t) != takes || proto_reply_gives_fd((uint16_t)t) != gives)
			ck_abort_msg("type %#x: takes %d, gives %d", t, proto_request_takes_fd((uint16_t)t),
				     proto_reply_gives_fd((uint16_t)t));
	}
	for (int id = 0; id < SAMPLES; id++) {
		uint16_t t = sample_type[id];
		const char *want = strchr(sample_name[id], '_') + 1;
		ck_assert_msg(strncmp(proto_type_name(t), want, strlen(proto_type_name(t))) == 0, "%s", want);
	}
	ck_assert_str_eq(proto_type_name(0), "unknown");
	ck_assert_str_eq(proto_type_name(PROTO_DEVICE + 1), "unknown");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("protocol");
	TCase *tc = tcase_create("wire");

	tcase_add_test(tc, test_golden);
	tcase_add_test(tc, test_owned_names);
	tcase_add_test(tc, test_pci_ids);
	tcase_add_test(tc, test_decode);
	tcase_add_test(tc, test_lengths);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_text);
	tcase_add_test(tc, test_status);
	tcase_add_test(tc, test_header);
	tcase_add_test(tc, test_flags);
	tcase_add_test(tc, test_pages);
	tcase_add_test(tc, test_descriptors);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
