/*
 * protocol.h - the wire protocol between pinshmd and libpinshm (private).
 *
 * Both sides link protocol.c; nothing else knows the byte layout.  The
 * normative description for other implementations is pinshm-protocol(7).
 *
 * Transport: a SOCK_SEQPACKET Unix socket.  One packet is one message; a
 * client sends a request and waits for its reply before the next, and the
 * daemon answers every request in order.  Descriptors travel with
 * SCM_RIGHTS (fdpass.h): only OPEN and PEER replies and HANDBACK and NOTIFY
 * requests carry one.
 *
 * Every packet starts with a 16-byte header, then a body.  All integers
 * are little-endian, fields are packed with no padding:
 *
 *   0        4          6        8          12         16
 *   +--------+----------+--------+----------+----------+-------------
 *   | magic  | version  | type   | length   | seq      | body ...
 *   | "PSHM" | u16      | u16    | u32      | u32      |
 *   +--------+----------+--------+----------+----------+-------------
 *
 * - magic: the bytes 'P' 'S' 'H' 'M' (PROTO_MAGIC read as little-endian);
 * - version: the protocol version the sender speaks (PINSHM_PROTOCOL_VERSION);
 * - type: a request type, or a reply type (the request's | PROTO_REPLY),
 *   or PROTO_ERROR (the answer to a packet that could not be served);
 * - length: of the whole packet, header included; it must equal the size
 *   received, at most PROTO_MAX_PACKET;
 * - seq: chosen by the client, echoed in the reply.
 *
 * The header's layout is the same in every protocol version, so that two
 * sides of different versions can still tell each other so: a packet of
 * another version is never decoded further (proto_decode(): -EPROTO), and
 * the two refuse to talk (pinshm-protocol(7), VERSIONS).  The version
 * changes with any message's layout or meaning (6: the pool in STATUS;
 * 7: the expected owner in OPEN, names of the form @UID.REST; 8: the PCI
 * device of CREATE, the device registrations of LIST and STAT entries,
 * DEVICE).
 *
 * Every reply body starts with {i32 status (0 or -errno), u16 text length,
 * text bytes (no NUL, at most PROTO_TEXT_MAX)}; the type-specific fields
 * follow only when status is 0.
 *
 * Names travel in a fixed field of PROTO_NAME_FIELD bytes: the name, then
 * NUL bytes to the end (at least one).  Whether the name itself is valid
 * (proto_name_valid) is a semantic check, answered with -EINVAL.
 */
#ifndef PINSHM_PROTOCOL_H
#define PINSHM_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pinshm.h"

#define PROTO_MAGIC 0x4d485350u /* "PSHM" */
#define PROTO_VERSION PINSHM_PROTOCOL_VERSION
#define PROTO_HEADER_SIZE 16u
#define PROTO_MAX_PACKET 4096u
#define PROTO_NAME_FIELD 64u   /* PINSHM_NAME_MAX + 1 */
#define PROTO_TEXT_MAX 200u    /* bytes of a reply's message */
#define PROTO_OWNER_ANY 0xffffffffu /* OPEN's owner: any uid ((uid_t)-1 is no user) */

/* Where pinshmd listens unless told otherwise. */
#define PROTO_SYSTEM_SOCKET "/run/pinshm/socket"
#define PROTO_SOCKET_NAME "socket" /* in the user-mode folder */

/*
 * Message types.  The fields of each: its member of proto_msg's union below
 * (a reply's: NAME_reply; none: an empty body), in wire order.  HANDBACK comes
 * with the channel's segment, NOTIFY with the endpoint's eventfd, and a
 * successful OPEN or PEER reply with the segment or that eventfd.
 */
enum proto_type {
	PROTO_HELLO = 1,    /* versions, both ways */
	PROTO_CREATE = 2,   /* a channel */
	PROTO_OPEN = 3,     /* an endpoint of a channel, by name */
	PROTO_UNLINK = 4,   /* a name */
	PROTO_LIST = 5,     /* a page of channels */
	PROTO_SHUTDOWN = 6, /* the daemon */
	PROTO_STATUS = 7,   /* the daemon's figures and a page of users */
	PROTO_CLIENTS = 8,  /* a page of connections */
	PROTO_CLOSE = 9,    /* an endpoint claimed by OPEN */
	PROTO_STAT = 10,    /* one channel, by name */
	PROTO_RELOCK = 11,  /* lock an unlocked channel again */
	PROTO_HANDBACK = 12,   /* a segment a client still holds (after a daemon restart) */
	PROTO_NOTIFY = 13,  /* a consumer's wake-up eventfd */
	PROTO_PEER = 14,    /* a consumer's wake-up eventfd, for a producer */
	PROTO_DEVICE = 15,  /* a handle's device registration made or dropped (since 8) */
	PROTO_REPLY = 0x8000,
	PROTO_ERROR = 0xffff,
};

/* Flags of a HELLO reply. */
#define PROTO_HELLO_USER_MODE 0x1u /* the daemon runs in user mode (--user) */

/* Flags of a HANDBACK reply. */
#define PROTO_HANDBACK_KNOWN 0x1u    /* the daemon had the channel already (same segment) */
#define PROTO_HANDBACK_NAMED 0x2u    /* the channel is named (else the name was taken: unnamed) */
#define PROTO_HANDBACK_ENDPOINT 0x4u /* the endpoint is claimed for this connection again */
#define PROTO_HANDBACK_FLAGS (PROTO_HANDBACK_KNOWN | PROTO_HANDBACK_NAMED | PROTO_HANDBACK_ENDPOINT)

/* Flags of a LIST reply. */
#define PROTO_LIST_MORE 0x1u /* more channels follow: ask again from `next` */

/* Entries in one LIST reply: what fits with the longest text. */
#define PROTO_LIST_ENTRY_SIZE 176u
#define PROTO_LIST_PAGE 21u

/* The kinds of a LIST or STAT entry's device_kinds: bit 1 << PINSHM_DEVICE_*. */
#define PROTO_DEVICE_KINDS (1u << PINSHM_DEVICE_CUDA | 1u << PINSHM_DEVICE_OPENCL)

/* Flags of a STATUS reply. */
#define PROTO_STATUS_USER_MODE 0x1u /* as PROTO_HELLO_USER_MODE */
#define PROTO_STATUS_MORE 0x2u      /* more users follow: ask again from `next` */
#define PROTO_STATUS_FLAGS (PROTO_STATUS_USER_MODE | PROTO_STATUS_MORE)

/* A STATUS reply: the daemon's figures, its pool (since version 6), then a
 * page of users. */
#define PROTO_STATUS_FIXED_SIZE 56u
#define PROTO_USER_ENTRY_SIZE 36u
#define PROTO_STATUS_PAGE 90u

/* The pool in a STATUS reply: PROTO_POOL_FIXED_SIZE bytes of figures, then
 * `classes` entries of PROTO_POOL_CLASS_SIZE (at most PROTO_POOL_CLASSES). */
#define PROTO_POOL_FIXED_SIZE 32u
#define PROTO_POOL_CLASS_SIZE 28u
#define PROTO_POOL_CLASSES 16u

/* Flags of the pool in a STATUS reply. */
#define PROTO_POOL_STOPPED 0x1u /* a segment could not be made or locked: no more fills until a reload */
#define PROTO_POOL_FLAGS PROTO_POOL_STOPPED

/* Flags of a CLIENTS reply. */
#define PROTO_CLIENTS_MORE 0x1u /* more connections follow: ask again from `next` */

#define PROTO_CLIENT_ENTRY_SIZE 28u
#define PROTO_CLIENTS_PAGE 128u

struct proto_header {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length;
	uint32_t seq;
};

struct proto_geometry {
	uint32_t kind, flags;
	uint64_t capacity;
	uint32_t max_message, max_producers, max_consumers;
};

struct proto_list_entry {
	char name[PROTO_NAME_FIELD];
	struct proto_geometry geo;
	uint32_t state; /* PINSHM_LIST_* */
	uint32_t uid, gid, mode;
	uint64_t size;
	uint32_t producers, consumers; /* endpoints attached now */
	int32_t node;   /* NUMA node its pages were placed on, PINSHM_NODE_ANY: none */
	uint32_t backend; /* PINSHM_BACKEND_* */
	uint32_t pin_idle; /* seconds idle before it is unlocked, 0: always pinned */
	/* Statistics, summed by the daemon from the segment's counters
	 * (written by the channel's users: reported, never trusted). */
	uint64_t messages, bytes; /* committed, all lanes */
	uint64_t lost;            /* overrun losses, all subscribers */
	uint64_t refused;         /* sends that found no room and gave up */
	/* Device registrations of its handles that their clients reported
	 * (DEVICE; since 8): how many, and their kinds (bit 1 << kind). */
	uint32_t device_regs, device_kinds;
};

/* One user in a STATUS reply. */
struct proto_user_entry {
	uint32_t uid;
	uint32_t channels;    /* owned, alive (named or not) */
	uint32_t connections; /* admitted, open now */
	uint64_t pinned;      /* bytes of its channels locked in RAM */
	uint64_t charged;     /* bytes of its channels, pinned or not: against its quota */
	uint64_t quota;       /* UINT64_MAX: unlimited */
};

/* One size class of the pool in a STATUS reply. */
struct proto_pool_class {
	uint64_t size;    /* bytes of each of its segments */
	uint32_t wanted;  /* ready segments the daemon keeps of it (pool_segments) */
	uint32_t ready;   /* made, locked and waiting for a CREATE */
	uint32_t filling; /* being made now (charged whole to the budget) */
	uint64_t locked;  /* bytes locked so far of the one being made */
};

/* One connection in a CLIENTS reply. */
struct proto_client_entry {
	uint64_t id;        /* the daemon's number for it, increasing: the cursor */
	uint32_t pid, uid, gid; /* SO_PEERCRED at connect time */
	uint32_t channels;  /* channels it created or opened and still references */
	uint32_t endpoints; /* endpoints claimed for it still attached in their segments */
};

/*
 * A decoded message.  Which members of `u` are meaningful follows from
 * h.type (and, for replies, from status == 0).  The members of each message
 * are declared in wire order; their wire form is the table of fields in
 * protocol.c: a new field is a member here and its line there.
 */
struct proto_msg {
	struct proto_header h;
	/* Replies. */
	int32_t status;
	char text[PROTO_TEXT_MAX + 1];
	union {
		struct {
			uint32_t version, library;
		} hello;
		struct {
			uint32_t version, flags, library;
		} hello_reply;
		struct {
			char name[PROTO_NAME_FIELD];
			struct proto_geometry geo;
			uint32_t mode, flags;
			int32_t node; /* PINSHM_NODE_* or a node number */
			uint32_t pin_idle; /* PINSHM_PIN_ALWAYS, PINSHM_PIN_DEFAULT or seconds */
			char pci[PROTO_NAME_FIELD]; /* a PCI bus id to place it next to, "": none (since 8) */
		} create;
		struct {
			uint64_t size;
			uint32_t state;   /* PINSHM_LIST_* */
			uint32_t backend; /* PINSHM_BACKEND_* */
			uint64_t id;      /* the channel's number (as in CLOSE) */
		} create_reply;
		struct {
			char name[PROTO_NAME_FIELD];
			uint32_t role;
			int32_t node; /* the node of the client's CPU, PINSHM_NODE_ANY: unknown (a hint, checked) */
			uint32_t owner; /* the uid the channel must belong to, PROTO_OWNER_ANY: any (since 7) */
		} open;
		struct {
			uint32_t endpoint;
			struct proto_geometry geo;
			uint64_t size;
			uint64_t id; /* the channel's number (as in CLOSE) */
		} open_reply;
		struct {
			char name[PROTO_NAME_FIELD];
		} unlink;
		struct {
			uint64_t cursor;
		} list;
		struct {
			uint64_t next;
			uint32_t count, flags;
			struct proto_list_entry entries[PROTO_LIST_PAGE];
		} list_reply;
		struct {
			uint64_t cursor; /* STATUS: users of uid >= cursor; CLIENTS: connections of id > cursor */
		} status, clients; /* STATUS, CLIENTS */
		struct {
			uint32_t pid, flags; /* PROTO_STATUS_* */
			uint64_t uptime_ms, budget, pinned; /* budget UINT64_MAX: unlimited */
			uint32_t channels_pinned, channels_unpinned, connections;
			uint32_t count;      /* users that follow */
			uint64_t next;       /* the cursor of the next page */
			/* The pool: what it holds of `pinned` (charged to no user). */
			uint64_t pool_pinned, pool_hits, pool_misses;
			uint32_t pool_flags; /* PROTO_POOL_* */
			uint32_t pool_count; /* classes that follow, smallest first */
			struct proto_pool_class pool[PROTO_POOL_CLASSES];
			struct proto_user_entry users[PROTO_STATUS_PAGE];
		} status_reply;
		struct {
			uint64_t next;
			uint32_t count, flags; /* PROTO_CLIENTS_* */
			struct proto_client_entry entries[PROTO_CLIENTS_PAGE];
		} clients_reply;
		struct {
			uint64_t id;       /* the channel's number (CREATE and OPEN replies) */
			uint32_t endpoint; /* claimed for this connection by an OPEN */
		} close;
		struct {
			char name[PROTO_NAME_FIELD];
		} stat;
		struct {
			uint64_t id; /* the channel's number (CREATE and OPEN replies) */
		} relock;
		struct {
			uint64_t id;       /* the channel's number */
			uint32_t endpoint; /* a consumer endpoint */
		} notify, peer; /* NOTIFY, PEER */
		struct {
			uint64_t id;   /* the channel's number */
			uint32_t kind; /* PINSHM_DEVICE_* */
			int32_t delta; /* +1: a handle registered with a device of that kind; -1: unregistered */
		} device;
		struct {
			struct proto_list_entry entry;
		} stat_reply;
		struct {
			char name[PROTO_NAME_FIELD];
			struct proto_geometry geo;
			uint32_t role, endpoint; /* the endpoint the client is attached to */
		} handback;
		struct {
			uint64_t id;    /* the channel's number in this daemon (as in CLOSE) */
			uint32_t flags; /* PROTO_HANDBACK_* */
		} handback_reply;
	} u;
};

/**
 * Encode @p m into @p buf (at least PROTO_MAX_PACKET bytes).  Magic,
 * version and length are filled in; the caller sets h.type and h.seq and
 * the fields of that type (for a reply: status, text, and the type's
 * fields when status is 0).  A text longer than PROTO_TEXT_MAX is cut.
 * @return the packet length, or -EINVAL (unknown type, a name that does not
 *         fit its field, a count over its page: PROTO_LIST_PAGE,
 *         PROTO_STATUS_PAGE, PROTO_POOL_CLASSES, PROTO_CLIENTS_PAGE).
 */
int proto_encode(const struct proto_msg *m, uint8_t *buf);

/**
 * Decode the packet of @p len bytes at @p buf into @p m, checking its
 * structure: the header, that the type is a request (@p reply false) or a
 * reply (@p reply true), that the body has exactly the length of its type,
 * that names and the text are well formed, that a reply's count fits its
 * page (and, for STATUS and CLIENTS, that its flags are known; for STATUS,
 * that the pool's class count is at most PROTO_POOL_CLASSES and its flags
 * are known).  Values are not judged beyond
 * that (names, roles, modes, flags, geometry: the receiver's business).
 * @return 0;
 *         -EBADMSG: malformed (short, bad magic, length field, body size,
 *                   name field without its NUL or with bytes after it...);
 *         -EMSGSIZE: over PROTO_MAX_PACKET;
 *         -EPROTO: a well-formed header of another protocol version;
 *         -EOPNOTSUPP: a well-formed header of an unknown type.
 *         With -EPROTO and -EOPNOTSUPP, m->h is filled (to answer it).
 */
int proto_decode(const uint8_t *buf, size_t len, bool reply, struct proto_msg *m);

/** The wire form of the geometry @p attr. */
struct proto_geometry proto_geometry_from_attr(const pinshm_channel_attr_t *attr);

/** The geometry that @p g carries, as channel attributes. */
pinshm_channel_attr_t proto_geometry_to_attr(const struct proto_geometry *g);

/**
 * Whether @p bus is a PCI bus id in the form sysfs names devices
 * (/sys/bus/pci/devices/BUS): "DDDD:BB:SS.F", a domain of 4 to 8 hex
 * digits, then a bus of 2, a slot of 2 (00-1f) and a function 0-7, hex
 * digits in lower case only, nothing else.
 */
bool proto_pci_valid(const char *bus);

/** @return whether @p name is a valid channel name: 1..PINSHM_NAME_MAX
 *  characters of [A-Za-z0-9._-], not starting with '.', or a name of the
 *  owned form (proto_name_owner()). */
bool proto_name_valid(const char *name);

/**
 * Whether @p name has the owned form "@UID.REST": '@', a uid in decimal
 * (no leading zero, below PROTO_OWNER_ANY), '.', then at least one more
 * character (what proto_name_valid() then checks).  Such a name belongs to
 * that uid: only it or root may create it (pinshm-create(3)).
 * @return whether it has; the uid into @p uid (may be NULL) if so.
 */
bool proto_name_owner(const char *name, uid_t *uid);

/** @return a static name for a request @p type ("HELLO"...), or "unknown". */
const char *proto_type_name(uint16_t type);

/**
 * The folder of the user-mode socket of @p uid: $XDG_RUNTIME_DIR/pinshm when
 * XDG_RUNTIME_DIR is set to an absolute path, else /tmp/pinshm-UID.
 * @return 0, or -ENAMETOOLONG if it does not fit @p len.
 */
int proto_user_socket_dir(char *buf, size_t len, uid_t uid);

/** The user-mode socket path of @p uid (the folder above, then "/socket").
 *  @return 0, or -ENAMETOOLONG if it does not fit @p len or a sockaddr_un. */
int proto_user_socket_path(char *buf, size_t len, uid_t uid);

/**
 * Whether the socket folder @p dir can be trusted, as tmux and ssh-agent
 * judge theirs: lstat(2) finds a folder (not a symbolic link) that belongs
 * to the effective user and that neither its group nor others may write to.
 * @return 0; -ENOENT (nothing there); -ENOTDIR (a link or another file) or
 *         -EPERM (another owner, writable by others) or lstat's -errno,
 *         with the reason, naming @p dir, in @p why.
 */
int proto_dir_check(const char *dir, char *why, size_t whylen);

/** Whether a request of @p type comes with one descriptor (HANDBACK, NOTIFY);
 *  every other request comes with none. */
bool proto_request_takes_fd(uint16_t type);

/** Whether a successful reply of type @p type (OPEN, PEER) comes with one
 *  descriptor; every other reply comes with none. */
bool proto_reply_gives_fd(uint16_t type);

#endif /* PINSHM_PROTOCOL_H */
