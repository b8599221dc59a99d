/*
 * registry.h - pinshmd's channels: names, owners, permissions, lifetimes.
 *
 * A channel is a segment with a name (until unlinked), an owner uid and
 * gid, permission bits, and the connections that use it.  The rules:
 *
 * - CREATE: any client; the name must be free, and the owner's limits and
 *   the budget must allow it (account.h): the channel's segment is
 *   charged to its owner until the channel is destroyed.  The creating
 *   connection holds a reference.  Owner: the creator's uid and primary gid.
 * - OPEN: allowed by cred_may() (read for a consumer, write for a
 *   producer).  The daemon claims a free endpoint of the role in the
 *   segment, for that connection, which holds a reference from then on.
 * - CLOSE: a connection gives back one endpoint claimed for it (reaped if
 *   its segment still marks it attached).  Once it holds no endpoint of
 *   the channel, its reference goes too, unless it created the channel:
 *   the creator's reference lasts until it closes.
 * - STAT: any client; one named channel, as LIST shows it.
 * - NOTIFY: a consumer endpoint's holder gives the daemon its eventfd (it
 *   must be one: checked), kept until the endpoint is closed or reaped or
 *   another replaces it.  PEER: a connection that references the channel
 *   gets a copy of a consumer endpoint's eventfd, to signal it (what any
 *   user of the channel could do through the segment anyway).  The daemon
 *   writes a kept eventfd itself, as a producer does (disarmed, one write
 *   per arming), where its endpoint is armed: when it reaps an endpoint of
 *   the channel (after marking it dead), and at the NOTIFY itself (a
 *   consumer that hands its channel back after a restart may have missed
 *   a wake-up).  Never blocking: a full eventfd is left as it is.
 * - RELOCK: a connection that references a channel asks for its segment,
 *   unlocked for want of use, to be locked again.
 * - Working-set pinning: a channel created with a pin_idle of N seconds
 *   whose segment shows no activity for N seconds is unlocked, and locked
 *   again when idle_scan() sees it used, at an OPEN, or at a RELOCK; each
 *   a slice a loop turn (locking.h).  Activity: a change of the messages
 *   committed, the queue room given back, or the endpoint changes, all
 *   read from the segment (a client could fake activity, or hide it: that
 *   costs only its own channel's pinning).  It stays charged whole.
 * - DEVICE: a connection that references a channel reports a device
 *   registration of a handle of it, made or dropped (devices.h): while
 *   any is counted, working-set pinning leaves the channel locked.
 * - UNLINK: the owner or root; removes the name at once.
 * - A connection that closes gives back its references; each endpoint
 *   claimed for it that is still ACTIVE in the segment is reaped, once
 *   (seg_endpoint_reap: marked dead, peers woken, so they get -EPIPE).
 * - A channel is destroyed (segment unmapped, its pages past the endpoints
 *   punched out and closed: the memory goes, though a process still holds
 *   the descriptor or maps it, see segment_destroy(); in slices, a few
 *   loop turns later, dying.h) when no connection references it and it is
 *   not persistent or no longer named.  A daemon that stops
 *   (registry_fini()) punches nothing: its channels live on.
 * - Adopted channels (adopt.h) come with endpoints attached by processes
 *   that no connection of this daemon stands for: watch_judge_endpoints()
 *   judges each one's owner, the pid the segment records for it, each
 *   distinct pid once per adoption.  A pid is taken for gone where no
 *   process has it, where it is the daemon's own, or where the process
 *   that has it now does not map the segment (the pid was reused: its
 *   /proc/PID/maps lacks the segment's device and inode), unless exactly
 *   one process of a nested PID namespace has that pid there and maps the
 *   segment (the pid is the client's own view: a client in a container):
 *   then that process owns it (the nested processes are found by a scan
 *   of /proc, reused for REGISTRY_NESTED_SCAN_MS, or 50 times as long as
 *   it took, so that hand-backs cannot keep the daemon scanning; for a
 *   client's hand-back, REGISTRY_NESTED_SLICE processes a loop turn).  A gone
 *   owner's endpoint is reaped at once, as a closed connection's is.  An
 *   owner proven alive (it maps the segment) is watched and its endpoint
 *   reaped when it exits, unless a connection claimed it again before
 *   (handback()); the channel is kept while an endpoint of it is
 *   watched.  One watch per process for the whole daemon (a pidfd in
 *   watch_epfd, which the event loop polls, REGISTRY_MAX_WATCH_PIDFDS at
 *   most; past them or without pidfds, the process's start time, looked
 *   at by the tick, REGISTRY_TICK_WATCHES every REGISTRY_TICK_MS in turn),
 *   REGISTRY_MAX_WATCHES at most, and
 *   REGISTRY_MAX_ORPHANS watched endpoints.  Where the daemon cannot judge
 *   (the maps may not be read, are longer than REGISTRY_MAPS_MAX_BYTES or
 *   than what is left of REGISTRY_MAPS_BUDGET for this adoption, several
 *   nested processes fit, or the scan of /proc stopped at
 *   REGISTRY_NESTED_MAX of them or could not read them all), or past
 *   those caps, the owner is taken for alive and not watched: its
 *   endpoint stays attached, as the segment says, and does not keep the
 *   channel.
 *
 * The daemon trusts only its own records (the geometry it formatted, which
 * connection each endpoint was claimed for); the segment's contents are
 * read for counts and repairs only, always placed by that geometry: every
 * process that opened a channel can write anything in it.  Every access
 * goes through segment_access() (segment.h): a sealed memfd cannot be
 * shrunk under the daemon's mapping, and an shm segment that a client
 * shrinks is caught (fstat, SIGBUS guard), marked damaged and left alone:
 * its endpoints are no longer claimed or reaped, it counts none attached,
 * and it is destroyed as usual.
 */
#ifndef PINSHMD_REGISTRY_H
#define PINSHMD_REGISTRY_H

#include <dirent.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "account.h"
#include "devices.h"
#include "dying.h"
#include "seg.h"
#include "cred.h"
#include "locking.h"
#include "making.h"
#include "nested.h"
#include "move.h"
#include "pool.h"
#include "record.h"
#include "protocol.h"
#include "segment.h"
#include "wake.h"

#define REGISTRY_BUCKETS 1024u      /* name hash table */
#define REGISTRY_MAX_CHANNELS 4096u /* channels alive at once (named or not) */
#define REGISTRY_MAX_REFS 1024u     /* channels one connection may reference */
#define REGISTRY_TICK_MS 250u       /* how often working-set pinning looks at the channels */
#define REGISTRY_MAX_WATCHES 4096u    /* processes watched at once, all channels */
#define REGISTRY_MAX_WATCH_PIDFDS 256u /* of them, known by a pidfd (the others by their start time) */
#define REGISTRY_TICK_WATCHES 256u    /* watches known by their start time looked at a tick, in turn */
#define REGISTRY_MAX_ORPHANS 65536u   /* endpoints watched at once, all channels */
#define REGISTRY_MAPS_MAX_BYTES (1u << 20) /* of one process's /proc/PID/maps read to judge it */
#define REGISTRY_MAPS_BUDGET (4u << 20)    /* bytes of maps read for one adoption, all its processes */
#define REGISTRY_MAPS_SLICE (64u << 10)    /* of them, read a loop turn for hand-backs (watch_judge_step()) */
#define REGISTRY_NESTED_SLICE 64u          /* processes' status read a loop turn by a hand-back's scan of /proc */
#define REGISTRY_REAP_SLICE (1u << 20)     /* bytes of rings a reap scans a loop turn (registry_step()) */
#define REGISTRY_TICK_ORPHANS 1024u   /* watched endpoints looked at a tick (claimed or closed since?) */

struct channel {
	uint64_t id;                    /* creation order, from 1: the LIST cursor */
	char name[PINSHM_NAME_MAX + 1];
	bool named;                     /* false once unlinked */
	bool persistent;
	bool stored;                    /* its record is in the descriptor store (adopt.h, record.h) */
	uid_t uid;
	gid_t gid;
	unsigned mode;
	pinshm_channel_attr_t attr;     /* as created (max_message 0 resolved) */
	struct seg_geometry g;          /* computed by the daemon, never read back */
	struct segment seg;
	unsigned refs;                  /* connections that created or opened it */
	uint64_t creator;               /* the connection that created it (its id) */
	uint32_t pin_idle;              /* working-set pinning: seconds idle before unlocked, 0: never */
	uint64_t activity;              /* the segment's activity signature at the last look */
	uint64_t active_at;             /* CLOCK_MONOTONIC ms when it last changed */
	int *notify_fd;                 /* per consumer endpoint: its eventfd (NOTIFY), -1: none; NULL
					 * until the first NOTIFY */
	uid_t *notify_uid;              /* per consumer endpoint: the user its eventfd counts on (the
					 * NOTIFY's, the owner's from the store); with notify_fd */
	uint64_t *holder;               /* per endpoint: the connection it was claimed for, 0: none */
	unsigned watched;               /* its endpoints watched (reg_orphan): while any, one reference */
	bool from_pool;                 /* its segment came ready from the pool */
	int make_err;                   /* half-made, its segment not made (making_waits()): why, -errno */
	size_t locked_bytes;            /* half-made (registry_create()), or locking: bytes of it locked so far */
	bool locking;                   /* adopted or handed back, or unlocked for want of use: its
					 * segment being locked (locking.h) */
	bool unlocking;                 /* idle: its segment being unlocked (locking.h) */
	uint8_t lock_op;                /* with locking or unlocking: what (enum lock_op) */
	int relock_err;                 /* the last relock's errno, 0: locked again */
	const char *relock_why;         /* with a relock: why (for the log) */
	struct channel *lock_next;      /* with locking or unlocking: the next in registry.locking */
	struct channel_move *move;      /* its pages moving to its consumer's node, NULL: not */
	uint32_t device_regs[DEVICES_KINDS]; /* device registrations its clients reported, by kind (devices.h) */
	struct channel *hash_next;      /* in its bucket, while named */
	struct channel *prev, *next;    /* every live channel, by id; next: the half-made ones too */
};

/* A connection, as the registry sees it. */
struct reg_client {
	uint64_t id; /* unique, not 0 */
	struct cred cred;
	struct channel **refs; /* each referenced channel once */
	unsigned nrefs, cap;
	struct reg_device_use *devuse; /* what it reported of referenced channels (devices.h) */
	unsigned ndevuse, devuse_cap;
};

/* A process that owns endpoints of adopted channels, watched until it exits. */
struct reg_watch {
	pid_t here;                /* its pid for the daemon, 0: a free slot */
	int pidfd;                 /* in registry.watch_epfd (data: the slot), -1: none */
	unsigned long long start;  /* without a pidfd: its start time (/proc/PID/stat), looked at by the tick */
	unsigned users;            /* reg_orphans watched through it */
};


/* An endpoint of an adopted channel that no connection holds, attached by
 * a process that lived when the channel was adopted: watched until it exits. */
struct reg_orphan {
	struct channel *chan;  /* kept (chan->watched) */
	unsigned endpoint;
	uint32_t pid;        /* as the segment recorded it */
	uint32_t generation; /* the endpoint's, then: another attach changes it */
	unsigned watch;      /* its process: a slot of registry.watches */
};

struct registry {
	struct channel *buckets[REGISTRY_BUCKETS];
	struct channel *first, *last;
	unsigned count;
	uint64_t next_id;
	struct account *acct; /* charged for every channel (not owned) */
	struct pool *pool;    /* ready segments (not owned), NULL: none */
	unsigned idle_policies; /* live channels with a pin_idle */
	struct wakeups wake;    /* the consumers' wake-up sockets held, counted (wake.h) */
	struct reg_orphan *orphans; /* watched endpoints (watch_judge_endpoints()) */
	unsigned norphans, orphans_cap;
	unsigned orphan_cursor;     /* the next orphan the tick looks at */
	struct reg_watch *watches;  /* REGISTRY_MAX_WATCHES slots (allocated at the first watch) */
	unsigned nwatches;          /* slots in use */
	unsigned ticked_watches;    /* of them, without a pidfd (judged by the tick) */
	unsigned watch_cursor;      /* the next slot the tick looks at */
	int watch_epfd;             /* an epoll set of the watches' pidfds (-1: none, all ticked) */
	struct nested_procs nested; /* the last scan of /proc for nested PID namespaces */
	struct making making;       /* half-made channels (making.h) */
	struct locking locking;     /* adopted or handed-back channels being locked (locking.h) */
	bool lock_turn;             /* registry_step(): the locking's turn, where channels are made too */
	bool lock_waited;           /* registry_step(): the locking waited a turn for the dying or moving */
	struct dying *dying;        /* segments of destroyed channels, unmapped and punched in slices */
	struct channel *moving;     /* channels whose pages move to their consumer's node (move.h) */
	struct reg_judging *judging; /* hand-backs whose endpoints' processes are read, in turn */
	struct reg_reaping *reaping; /* reaps of shared queues' consumers under way, in turn */
};


/** An empty registry that charges its channels to @p acct. */
void registry_init(struct registry *r, struct account *acct);

/** Destroy every channel without reaping: clients keep what they mapped. */
void registry_fini(struct registry *r);

/*
 * The requests.  Each returns 0 or a negative errno, with a message for the
 * client in @p why on failure (and on a success worth a warning).
 */

/**
 * Create channel @p name, its segment made as @p o says (node resolved
 * already); @p out set to it.  A segment of no node and no huge pages
 * comes from r->pool where it has one of the size (pool.h).  Beyond the
 * errors of the request (-EEXIST, -ENFILE, -EINVAL, -EMFILE, -ENOMEM),
 * those of account_charge(): -EFBIG, -EUSERS, -EDQUOT, -ENOSPC; and of
 * segment_alloc(): -EINVAL and -ENOMEM for huge pages.  The charge is the
 * segment's true size (a huge page multiple, or its pool class).
 *
 * A segment from the pool is formatted at once: 0.  Any other is made
 * (memfd, seals, mapping, NUMA policy: no page touched) and charged whole,
 * and @return -EINPROGRESS with @p out set to the half-made channel: its
 * name is reserved (another CREATE of it gets -EEXIST) but no other
 * request sees it; registry_step() locks (and so populates) it slice by
 * slice, and hands it back for registry_create_end().  The connection @p c
 * must make no other request meanwhile; if it goes (registry_client_gone())
 * or the daemon stops, the channel is given up: its charge goes, its
 * segment is destroyed.
 */
int registry_create(struct registry *r, struct reg_client *c, const char *name, const pinshm_channel_attr_t *attr,
		    unsigned mode, bool persistent, const struct segment_opts *o, struct channel **out, char *why,
		    size_t whylen);

/**
 * Finish @p chan for its creator @p c, once registry_step() handed it back
 * (locked, or unpinned where locking failed: then so charged, and a
 * warning in @p why): format it, name it, list it, reference it from
 * @p c; @p out set to it.  @return 0, or -EINVAL/-ENOSPC (not formatted:
 * given up), or, for one whose segment waited for huge pages and could
 * not be made even then, the error of segment_alloc() (given up).
 */
int registry_create_end(struct registry *r, struct reg_client *c, struct channel *chan, struct channel **out,
			char *why, size_t whylen);

/**
 * One slice of the work in progress, for the event loop to call once a
 * turn while registry_busy(): unmap and punch a slice of a destroyed
 * channel's segment (dying.h), those first; else move a slice of the pages
 * of a channel placed near its consumer (registry_open()); else lock the
 * next slice of the half-made channel that waited longest, or (every
 * other turn where both wait) of the channel in the locking queue that
 * waited longest (round robin: adopted, handed back, or unlocked or
 * locked again by working-set pinning).  The locking queue also gets
 * every other turn while destroyed or moving channels last; the making
 * waits until none is left.  @p made: the half-made channel whose
 * last slice this was (out of the list: for registry_create_end() now),
 * or NULL; @p lock_done: the adopted or handed-back channel whose locking
 * ended (for the RELOCKs that wait: request_relocked()), or NULL.
 * @return registry_busy().
 */
bool registry_step(struct registry *r, struct channel **made, struct channel **lock_done);

/** Give up @p chan, half-made, handed back by registry_step(). */
void registry_create_abandon(struct registry *r, struct channel *chan);

/** Whether registry_step() or watch_judge_step() has work: dying
 * segments, moves, half-made channels, channels being locked, reaps,
 * judgings. */
bool registry_busy(const struct registry *r);

/**
 * Open @p name as @p role for @p c; @p out and @p endpoint set.  The first
 * consumer of a channel made near its consumer (PINSHM_NODE_CONSUMER)
 * places it on @p client_node, the node the client says it runs on
 * (checked: a node this machine does not have is ignored, with a log line):
 * its first slice of pages moves now, the rest in registry_step().
 */
int registry_open(struct registry *r, struct reg_client *c, const char *name, pinshm_role_t role,
		  int client_node, struct channel **out, unsigned *endpoint, char *why, size_t whylen);

int registry_unlink(struct registry *r, struct reg_client *c, const char *name, char *why, size_t whylen);

/**
 * Give back endpoint @p endpoint of the channel numbered @p id, claimed for
 * @p c (and @p c's reference, as the rules above say; the channel may be
 * destroyed).  @return 0; -ENOENT (@p c references no channel @p id);
 * -EINVAL (@p endpoint is not one claimed for @p c).
 */
int registry_close(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, char *why,
		   size_t whylen);

/**
 * Lock the segment of the channel numbered @p id, which @p c references,
 * again if it was unlocked for want of use.
 * @return 0; -ENOENT (@p c references no channel @p id); -EINPROGRESS
 *         (adopted, handed back or unlocked, it is being locked, locking.h: the
 *         reply once it is, request_relocked(); @p c makes no other
 *         request meanwhile); or as segment_relock_step().
 */
int registry_relock(struct registry *r, struct reg_client *c, uint64_t id, char *why, size_t whylen);

/**
 * Keep *@p fd, an eventfd, for consumer endpoint @p endpoint of the channel
 * numbered @p id, claimed for @p c: on success *@p fd is taken (set to -1).
 * @return 0; -ENOENT (@p c references no channel @p id); -EINVAL (not a
 *         consumer endpoint claimed for @p c, or not an eventfd); -ENFILE
 *         (the daemon holds REGISTRY_MAX_NOTIFY_FDS already); -EDQUOT (@p c's
 *         user gave REGISTRY_MAX_NOTIFY_FDS_USER of them already).
 */
int registry_notify(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, int *fd, char *why,
		    size_t whylen);

/**
 * Keep *@p fd, the eventfd of consumer endpoint @p endpoint of @p chan, as
 * the descriptor store held it (adopt.h): as registry_notify(), with no
 * connection holding the endpoint yet.  @return 0 (*@p fd taken), or
 * -EINVAL (not a consumer endpoint, or not an eventfd), -ENOMEM, -ENFILE.
 */
int registry_keep_notify(struct registry *r, struct channel *chan, unsigned endpoint, int *fd, char *why,
			 size_t whylen);

/** Close the eventfd kept for endpoint @p endpoint of @p chan, if any, and
 *  take it out of the descriptor store. */
void registry_forget_notify(struct registry *r, struct channel *chan, unsigned endpoint);

/** The channel numbered @p id among those @p c references, or NULL. */
struct channel *registry_referenced(struct reg_client *c, uint64_t id);

/** The named channel @p name, or NULL. */
struct channel *registry_find(struct registry *r, const char *name);

/** The channel whose segment is the file @p st (device and inode), or NULL. */
struct channel *registry_find_segment(struct registry *r, const struct stat *st);

/** The descriptor store's record of @p chan (record.h). */
void registry_record(const struct channel *chan, struct record *rec);

/** Put @p chan in the descriptor store, in service mode (chan->stored says
 *  whether it is there now). */
void registry_store(struct channel *chan);

/**
 * A new descriptor (the caller's) of the wake-up socket of consumer
 * endpoint @p endpoint of the channel numbered @p id, which @p c references.
 * @return 0; -ENOENT (no such channel for @p c, or no socket for that
 *         endpoint); -EINVAL (not a consumer endpoint); -EMFILE (dup).
 */
int registry_peer(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint, int *fd, char *why,
		  size_t whylen);

/**
 * After the reply to a PEER request went out: wake that consumer endpoint
 * if it is armed.  A producer asks without waiting for the reply, and
 * counts on this wake-up for the message that made it ask, unless it read
 * the reply first (then it wakes the consumer itself): so the reply first.
 */
void registry_peer_replied(struct registry *r, struct reg_client *c, uint64_t id, uint32_t endpoint);

/**
 * From the event loop, when r->watch_epfd is readable: reap the watched
 * endpoints of the processes that exited (those a connection claimed,
 * closed or attached again since are forgotten), and end their watches.
 */
void registry_watch_events(struct registry *r);

/** Describe the named channel @p name in @p out, as registry_list().  @return 0 or -ENOENT. */
int registry_stat(struct registry *r, const char *name, struct proto_list_entry *out, char *why, size_t whylen);

/**
 * Fill @p out with up to @p max named channels of id > @p cursor, in id
 * order.  @return the number filled; @p next: the last id filled (the next
 * cursor); @p more: whether channels remain after it.
 */
unsigned registry_list(struct registry *r, uint64_t cursor, struct proto_list_entry *out, unsigned max,
		       uint64_t *next, bool *more);

/** Count every live channel (named, or unlinked and still used): @p pinned
 *  those whose segment is locked in RAM, @p unpinned the others. */
void registry_count(const struct registry *r, uint32_t *pinned, uint32_t *unpinned);

/** Whether @p c holds an attached endpoint of @p chan (a handle it opened). */
bool registry_client_holds(const struct reg_client *c, struct channel *chan);
/** @return the endpoints claimed for @p c that their segments still mark
 *  attached (closed ones no longer count). */
uint32_t registry_client_endpoints(const struct reg_client *c);

/** @return the PINSHM_LIST_* state bits of @p chan. */
uint32_t registry_channel_state(const struct channel *chan);

/** Connection @p c closed: reap its endpoints, drop its references. */
void registry_client_gone(struct registry *r, struct reg_client *c);

/** Free @p c's references without touching the channels (at teardown). */
void registry_client_forget(struct reg_client *c);

/**
 * List @p chan, made outside registry_create() (adopt.h: its segment, record
 * and charge complete, no reference), and name it if chan->named.
 * @return 0, -EEXIST (the name is taken), -ENFILE (too many channels).
 */
int registry_insert(struct registry *r, struct channel *chan, char *why, size_t whylen);


/** Destroy @p chan if nothing keeps it any more. */
void registry_collect(struct registry *r, struct channel *chan);

/** Reap endpoint @p ep of @p chan, whose process @p pid is gone (in slices,
 *  registry_step()). */
void registry_reap_endpoint(struct registry *r, struct channel *chan, unsigned ep, pid_t pid);

/** Whether endpoint @p ep of @p chan is being reaped (in slices): attached
 *  still, but for no one to claim. */
bool registry_reaping(const struct registry *r, const struct channel *chan, unsigned ep);



/**
 * Reference @p chan from @p c (once).  @return 0, or -EMFILE / -ENOMEM, and
 * then @p chan is destroyed if nothing else keeps it.
 */
int registry_ref(struct registry *r, struct reg_client *c, struct channel *chan, char *why, size_t whylen);
/** Make room for @p c to reference one more channel, before that channel
 *  is made or taken (after it, registry_ref() cannot fail).
 *  @return 0, -EMFILE (the connection's most) or -ENOMEM. */
int registry_ref_room(struct reg_client *c, char *why, size_t whylen);

#endif /* PINSHMD_REGISTRY_H */
