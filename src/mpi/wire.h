/*
 * wire.h - the records that the MPI plugin's ranks exchange through pinshm.
 *
 * Each rank of a node consumes one inbound queue; every rank of the node,
 * itself included, produces into it on a lane of its own, so the records
 * from one rank to another arrive in the order they were written.  One
 * pinshm message is one record: a header, then (EAGER, DATA) payload bytes.
 *
 * Protocols:
 * - eager: EAGER carries the whole message; with REC_SYNC the receiver
 *   answers ACK{sid} once a receive matched it (MPI_Ssend).
 * - rendezvous (longer than the eager limit): RTS{sid, len} is matched like
 *   an EAGER; the receiver answers CTS{sid, rid, accept}; the sender then
 *   writes DATA{rid, offset} chunks of `accept` bytes in order, which the
 *   receiver copies into the receive buffer as they come (pipelining).
 *   accept < len when the receive buffer is shorter (truncation).
 * - single copy (REC_CMA on an RTS): the RTS also says where the message
 *   lies in the sender (pid, address); the receiver may copy it from there
 *   at once with process_vm_readv(2), and does where the sender asks it
 *   to (REC_COPY) or, unless PINSHM_MPI_CMA is set, where it is itself
 *   sending a long message to that sender; it then answers CTS with
 *   REC_COPIED, which completes the send.
 *   Otherwise, or where the kernel refuses (ptrace rules), the receiver
 *   answers a plain CTS and the message is streamed.
 *
 * - failure (REC_FAILED on an EAGER): a send that failed at its sender
 *   (its data could not be packed...) still goes out, as a 4-byte EAGER
 *   holding the sender's MPI error code: the receive that matches it
 *   completes with an error rather than waiting for ever.
 *
 * sid and rid name operations in the sender's and the receiver's tables;
 * they are checked on arrival (index, generation, state), never trusted.
 * Headers are 16, 24 (a small EAGER), 32 or 48 bytes: payloads over 256
 * bytes start 16-byte aligned.
 * All fields are in the byte order of the machine (one node).
 */
#ifndef PINSHM_MPI_WIRE_H
#define PINSHM_MPI_WIRE_H

#include <assert.h>
#include <stdint.h>

enum rec_type {
	REC_EAGER = 1,
	REC_RTS = 2,
	REC_CTS = 3,
	REC_DATA = 4,
	REC_ACK = 5,
};

#define REC_SYNC 0x1u /* EAGER: the sender waits for an ACK when it is matched */
#define REC_CMA 0x2u  /* RTS: the receiver may copy the message from the sender itself */
#define REC_COPIED 0x4u /* CTS: the receiver copied the message: the send is complete */
#define REC_SID 0x8u  /* EAGER: a sid follows the header (struct rec_eager_sync) */
#define REC_COPY 0x10u /* RTS with REC_CMA: the sender asks the receiver to copy it so */
#define REC_FAILED 0x20u /* EAGER: the send failed; the payload is its int error code */

/* The first 4 bytes of every record. */
struct rec_head {
	uint8_t type;
	uint8_t flags;
	uint16_t from; /* the sender's index among the ranks of the node */
};

/* With REC_SID, the 8-byte id of the send follows the header (struct
 * rec_eager_sync), then the payload.  A sender sets it with REC_SYNC (the
 * receiver acknowledges that id) and for payloads over 256 bytes (which
 * then start 16-byte aligned).  Without it the header is 24 bytes, so that
 * behind the ring's own 16 a payload of up to 24 bytes fits in the
 * record's first line. */
struct rec_eager {
	struct rec_head h;
	int32_t src;  /* the sender's rank in the communicator */
	int32_t tag;
	uint32_t len; /* payload bytes that follow the header; up to 63 bytes of
		       * padding may follow them (a small record ends on a cache line) */
	uint64_t ctx; /* the communicator's context */
};

struct rec_eager_sync {
	struct rec_eager e;
	uint64_t sid; /* the send to acknowledge */
};

struct rec_rts {
	struct rec_head h;
	int32_t src;
	int32_t tag;
	uint32_t pid;  /* REC_CMA: the sender's process */
	uint64_t ctx;
	uint64_t sid;
	uint64_t len;  /* the whole message */
	uint64_t addr; /* REC_CMA: where it lies in the sender */
};

struct rec_cts {
	struct rec_head h;
	uint32_t reserved;
	uint64_t sid;    /* the send that may go on */
	uint64_t rid;    /* the receive that takes its DATA */
	uint64_t accept; /* bytes to send: min(len, receive buffer) */
};

struct rec_data {
	struct rec_head h;
	uint32_t reserved;
	uint64_t rid;
	uint64_t offset; /* of the payload in the message */
	uint64_t reserved2;
};

struct rec_ack {
	struct rec_head h;
	uint32_t reserved;
	uint64_t sid;
};

static_assert(sizeof(struct rec_eager) == 24, "EAGER header is 24 bytes");
static_assert(sizeof(struct rec_eager_sync) == 32, "synchronous EAGER header is 32 bytes");
static_assert(sizeof(struct rec_rts) == 48, "RTS is 48 bytes");
static_assert(sizeof(struct rec_cts) == 32, "CTS is 32 bytes");
static_assert(sizeof(struct rec_data) == 32, "DATA header is 32 bytes");
static_assert(sizeof(struct rec_ack) == 16, "ACK is 16 bytes");

#endif /* PINSHM_MPI_WIRE_H */
