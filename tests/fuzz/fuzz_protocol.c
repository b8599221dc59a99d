/*
 * fuzz_protocol.c - libFuzzer target: the wire decoder on arbitrary packets.
 *
 * Input: one control byte, then the packet.  The control byte says which
 * side decodes (bit 0: a reply, as the client does; else a request, as
 * pinshmd does) and which descriptor count came with the packet (bits 1-2:
 * none given, 0, 1 or 2), so that the two sides' acceptance rules around
 * proto_decode() are exercised too.
 *
 * Invariants checked (a failure aborts, which libFuzzer reports as a crash):
 * - proto_decode() returns 0 or one of its documented errors, -EMSGSIZE
 *   exactly when the packet is over PROTO_MAX_PACKET;
 * - with -EPROTO and -EOPNOTSUPP the header is filled from the packet;
 * - an accepted packet has a valid header whose length is the packet's, the
 *   side's kind of type, a NUL-terminated printable text, NUL-terminated
 *   names, counts within their page (a STATUS reply's users and pool
 *   classes, its length exactly what they take), a status of 0 or -errno;
 * - an accepted request encodes back to exactly the same bytes; an accepted
 *   reply encodes to a packet of the same length that decodes again to the
 *   same encoding (the text's unprintable bytes become '?' once);
 * - the client takes a descriptor only with a successful OPEN or PEER reply, and
 *   pinshmd refuses any request that came with one, but a HANDBACK or a NOTIFY.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "protocol.h"

static bool known_error(int rc)
{
	return rc == -EBADMSG || rc == -EMSGSIZE || rc == -EPROTO || rc == -EOPNOTSUPP;
}

static uint32_t le32(const uint8_t *b) { return b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }
static uint16_t le16(const uint8_t *b) { return (uint16_t)(b[0] | b[1] << 8); }

/* A decoded name field: NUL-terminated inside it; proto_name_valid() may
 * then judge it (it must not crash, whatever it says). */
static void check_name(const char *name)
{
	FUZZ_CHECK(strnlen(name, PROTO_NAME_FIELD) < PROTO_NAME_FIELD);
	if (proto_name_valid(name))
		FUZZ_CHECK(name[0] != '\0' && name[0] != '.' && strlen(name) <= PINSHM_NAME_MAX);
}

static void check_text(const char *text)
{
	size_t n = strnlen(text, PROTO_TEXT_MAX + 1);

	FUZZ_CHECK(n <= PROTO_TEXT_MAX);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(text[i] >= 0x20 && text[i] < 0x7f);
}

static void check_accepted(const uint8_t *pkt, size_t len, bool reply, const struct proto_msg *m)
{
	uint16_t type = m->h.type;

	FUZZ_CHECK(len >= PROTO_HEADER_SIZE && len <= PROTO_MAX_PACKET);
	FUZZ_CHECK(m->h.magic == PROTO_MAGIC && m->h.version == PROTO_VERSION && m->h.length == len);
	FUZZ_CHECK(m->h.seq == le32(pkt + 12) && type == le16(pkt + 6));
	if (!reply) {
		FUZZ_CHECK((type & PROTO_REPLY) == 0);
		FUZZ_CHECK(m->status == 0 && m->text[0] == '\0');
	} else {
		FUZZ_CHECK(type == PROTO_ERROR || (type & PROTO_REPLY));
		FUZZ_CHECK(m->status <= 0 && m->status >= -4095);
		FUZZ_CHECK(type != PROTO_ERROR || m->status != 0);
		check_text(m->text);
		if (m->status != 0)
			return;
	}
	switch (type) {
	case PROTO_CREATE:
		check_name(m->u.create.name);
		break;
	case PROTO_OPEN:
		check_name(m->u.open.name);
		break;
	case PROTO_UNLINK:
		check_name(m->u.unlink.name);
		break;
	case PROTO_STAT:
		check_name(m->u.stat.name);
		break;
	case PROTO_HANDBACK:
		check_name(m->u.handback.name);
		break;
	case PROTO_HANDBACK | PROTO_REPLY:
		FUZZ_CHECK((m->u.handback_reply.flags & ~PROTO_HANDBACK_FLAGS) == 0);
		break;
	case PROTO_STAT | PROTO_REPLY:
		check_name(m->u.stat_reply.entry.name);
		break;
	case PROTO_LIST | PROTO_REPLY:
		FUZZ_CHECK(m->u.list_reply.count <= PROTO_LIST_PAGE);
		for (uint32_t i = 0; i < m->u.list_reply.count; i++)
			check_name(m->u.list_reply.entries[i].name);
		break;
	case PROTO_STATUS | PROTO_REPLY: {
		/* Both counts bounded, flags known, and the packet exactly as
		 * long as they say. */
		const typeof(m->u.status_reply) *s = &m->u.status_reply;
		FUZZ_CHECK(s->count <= PROTO_STATUS_PAGE && s->pool_count <= PROTO_POOL_CLASSES);
		FUZZ_CHECK((s->flags & ~PROTO_STATUS_FLAGS) == 0 && (s->pool_flags & ~PROTO_POOL_FLAGS) == 0);
		FUZZ_CHECK(len == PROTO_HEADER_SIZE + 4 + 2 + strlen(m->text) + PROTO_STATUS_FIXED_SIZE +
					  PROTO_POOL_FIXED_SIZE + (size_t)s->pool_count * PROTO_POOL_CLASS_SIZE +
					  (size_t)s->count * PROTO_USER_ENTRY_SIZE);
		break;
	}
	default:
		break;
	}
}

/* Encode @p m again: a request gives back the very packet; a reply one of
 * the same length that is a fixed point of decode + encode. */
static void check_round_trip(const uint8_t *pkt, size_t len, bool reply, const struct proto_msg *m)
{
	static uint8_t again[PROTO_MAX_PACKET], third[PROTO_MAX_PACKET];
	static struct proto_msg m2;

	int n = proto_encode(m, again);
	FUZZ_CHECK(n >= 0 && (size_t)n == len);
	if (!reply) {
		FUZZ_CHECK(memcmp(again, pkt, len) == 0);
		return;
	}
	FUZZ_CHECK(proto_decode(again, (size_t)n, true, &m2) == 0);
	int n2 = proto_encode(&m2, third);
	FUZZ_CHECK(n2 == n && memcmp(again, third, (size_t)n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct proto_msg m;

	if (size < 1)
		return 0;
	bool reply = data[0] & 1;
	unsigned fds = (data[0] >> 1) & 3; /* 0: none given, else fds - 1 came */
	const uint8_t *pkt = data + 1;     /* ends where the fuzzer's buffer ends */
	size_t len = size - 1;

	/* Poison what the decoder must set. */
	memset(&m, 0xa5, sizeof(m));
	int rc = proto_decode(pkt, len, reply, &m);

	FUZZ_CHECK(rc == 0 || known_error(rc));
	FUZZ_CHECK((rc == -EMSGSIZE) == (len > PROTO_MAX_PACKET));
	FUZZ_CHECK(m.text[0] == '\0' || rc == 0 || rc == -EBADMSG);
	if (rc == -EPROTO || rc == -EOPNOTSUPP) {
		/* The header is filled, so that the answer can echo seq. */
		FUZZ_CHECK(m.h.magic == PROTO_MAGIC && m.h.length == len && m.h.seq == le32(pkt + 12));
		FUZZ_CHECK(rc != -EPROTO || m.h.version != PROTO_VERSION);
	}
	if (rc == 0) {
		check_accepted(pkt, len, reply, &m);
		check_round_trip(pkt, len, reply, &m);
	}

	if (fds == 0)
		return 0;
	unsigned nfds = fds - 1;
	if (reply) {
		/* The client's rule (client.c transact()): a descriptor comes
		 * with a successful OPEN or PEER reply and with nothing else.  It
		 * asks fdpass_recv() for at most one: more never reach this point. */
		if (nfds > 1)
			return 0;
		bool gives = m.h.type == (PROTO_OPEN | PROTO_REPLY) || m.h.type == (PROTO_PEER | PROTO_REPLY);
		FUZZ_CHECK(rc != 0 || gives == proto_reply_gives_fd(m.h.type));
		bool wants_fd = rc == 0 && m.status == 0 && gives;
		bool accepted = rc == 0 && wants_fd == (nfds == 1);
		FUZZ_CHECK(!accepted || nfds == 0 || (gives && m.status == 0));
		FUZZ_CHECK(!accepted || nfds == 1 || !gives || m.status != 0);
	} else if (nfds > 0 && !(rc == 0 && nfds == 1 && proto_request_takes_fd(m.h.type))) {
		/* pinshmd refuses a request that came with descriptors (but an
		 * HANDBACK or a NOTIFY with its one), and echoes its seq where the header could
		 * be read. */
		struct proto_msg err = {.h.type = PROTO_ERROR, .status = -EPROTO};
		static uint8_t out[PROTO_MAX_PACKET];
		if (rc == 0 || rc == -EPROTO || rc == -EOPNOTSUPP)
			err.h.seq = m.h.seq;
		int n = proto_encode(&err, out);
		FUZZ_CHECK(n > 0 && proto_decode(out, (size_t)n, true, &m) == 0 && m.status == -EPROTO);
	}
	return 0;
}
