/*
 * peer_fetch.c - a producer's way to a consumer's wake-up socket through
 * pinshmd, from the send path, never waiting.
 *
 * A producer that finds a consumer armed whose socket it does not hold
 * asks pinshmd for it (PEER) without waiting for the reply.  pinshmd
 * sends the reply, then wakes the consumer itself if it is still armed:
 * the message that made the producer ask is not left unannounced.  The
 * reply is read later, without waiting, by the next holder of the client's
 * lock (this producer's next wake-up, or any request on the client), and
 * from then on the producer wakes that consumer directly.
 *
 * Why no wake-up is lost.  The producer committed its message before it
 * found the consumer armed.  Either a PEER for that consumer is still in
 * flight and its reply not yet read: pinshmd has not replied, so it has
 * not looked at `armed` yet and will see it (it replies, then looks);
 * or the reply was read: the producer holds the socket and wakes the
 * consumer itself; or neither: a request is sent now.  Where the lock is
 * held by another thread, the wish is left in fetched_peer.wanted and
 * client.wanted, and that thread serves it before letting go
 * (client_unlock(): it looks at `wanted` after unlocking, and the wisher
 * tries the lock after setting it, both seq_cst, so one of the two sees it).
 *
 * A refused PEER (the consumer gave pinshmd no socket, or pinshmd went) is
 * asked again PEER_RETRY_MIN_MS later, the wait doubling with each refusal
 * for the same consumer up to 1024 ms; a new consumer (generation) is asked
 * at once, as is every consumer after a reconnect (producer_fetch_again()).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "fdpass.h"
#include "wait.h"

#define PEER_RETRY_MIN_MS 64u
#define PEER_RETRY_MAX_DOUBLINGS 4u /* 1024 ms */

void client_lock(struct pinshm_client *c)
{
	pthread_mutex_lock(&c->lock);
	c->depth++;
}

bool client_trylock(struct pinshm_client *c)
{
	if (pthread_mutex_trylock(&c->lock) != 0)
		return false;
	c->depth++;
	return true;
}

void client_unlock(struct pinshm_client *c)
{
	bool outer = c->depth == 1;

	if (outer)
		async_serve_wanted(c);
	c->depth--;
	pthread_mutex_unlock(&c->lock);
	/* Pairs with the fence in client_peer_fd(): a wish left while we held
	 * the lock is seen here, or its wisher gets the lock. */
	while (outer) {
		atomic_thread_fence(memory_order_seq_cst);
		if (!atomic_load_explicit(&c->wanted, memory_order_seq_cst) || !client_trylock(c))
			break;
		async_serve_wanted(c);
		c->depth--;
		pthread_mutex_unlock(&c->lock);
	}
}

/* Whether a PEER for consumer @p f, now at generation @p gen, may be sent
 * now.  The clock is read only after a refusal. */
static bool peer_fetch_due(const struct fetched_peer *f, uint32_t gen)
{
	if (f->failures == 0 || gen != f->failed_gen)
		return true;
	unsigned doublings = f->failures - 1;
	if (doublings > PEER_RETRY_MAX_DOUBLINGS)
		doublings = PEER_RETRY_MAX_DOUBLINGS;
	return wait_now_ms() - f->failed_at >= (uint64_t)PEER_RETRY_MIN_MS << doublings;
}

static void peer_refused(struct fetched_peer *f, uint32_t gen)
{
	f->failures = gen == f->failed_gen && f->failures < UINT32_MAX ? f->failures + 1 : 1;
	f->failed_gen = gen;
	f->failed_at = wait_now_ms();
}

/* Room for one more PEER in flight: the list grows (its replies come in
 * order, so it is a ring, laid out afresh from its oldest).  @return 0 or
 * -ENOMEM. */
static int async_grow(struct pinshm_client *c)
{
	if (c->async_count < c->async_cap)
		return 0;
	if (c->async_cap >= CLIENT_ASYNC_MAX)
		return -ENOMEM;
	unsigned cap = c->async_cap ? c->async_cap * 2 : 16;
	struct async_peer *a = malloc(cap * sizeof(*a));
	if (!a)
		return -ENOMEM;
	for (unsigned i = 0; i < c->async_count; i++)
		a[i] = c->async[(c->async_first + i) % c->async_cap];
	free(c->async);
	c->async = a;
	c->async_cap = cap;
	c->async_first = 0;
	return 0;
}

/* Send a PEER for consumer @p k of @p ch (generation @p gen) without
 * waiting, and note it in flight. */
static void async_send(struct pinshm_client *c, pinshm_channel_t *ch, unsigned k, uint32_t gen)
{
	struct fetched_peer *f = &ch->fetched[k];
	struct proto_msg req = {.h.type = PROTO_PEER};
	uint8_t buf[PROTO_MAX_PACKET];

	if (c->broken || ch->daemon_conn != c->connection || async_grow(c) != 0) {
		peer_refused(f, gen);
		return;
	}
	req.u.peer.id = ch->daemon_id;
	req.u.peer.endpoint = ch->g.max_producers + k;
	req.h.seq = c->seq + 1;
	int len = proto_encode(&req, buf);
	if (len < 0)
		return;
	int rc = fdpass_send(c->fd, buf, (size_t)len, NULL, 0, MSG_DONTWAIT);
	if (rc == -EAGAIN) { /* the socket is full of requests: later */
		peer_refused(f, gen);
		return;
	}
	if (rc != 0) {
		client_break(c, rc == -EPIPE ? -ECONNRESET : rc);
		return;
	}
	c->seq++;
	c->async[(c->async_first + c->async_count++) % c->async_cap] =
		(struct async_peer){.seq = req.h.seq, .ch = ch, .consumer = k, .gen = gen};
	f->in_flight = true;
	f->asked_gen = gen;
}

int async_take_reply(struct pinshm_client *c, const struct proto_msg *rep, int rc, int fd, unsigned nfds)
{
	if (c->async_count == 0 || (rc == 0 && rep->h.seq != c->async[c->async_first].seq))
		return 0;
	struct async_peer a = c->async[c->async_first];
	c->async_first = (c->async_first + 1) % c->async_cap;
	c->async_count--;
	rc = client_check_reply(c, PROTO_PEER, a.seq, rep, rc, nfds);
	if (rc != 0) {
		if (fd >= 0)
			close(fd);
		return client_break(c, rc);
	}
	if (!a.ch) {
		if (fd >= 0)
			close(fd);
		return 1;
	}
	struct fetched_peer *f = &a.ch->fetched[a.consumer];
	if (f->in_flight && f->asked_gen == a.gen)
		f->in_flight = false;
	if (rep->status != 0) {
		peer_refused(f, a.gen);
		return 1;
	}
	if (f->arrived >= 0)
		close(f->arrived);
	f->arrived = fd;
	f->arrived_gen = a.gen;
	f->failures = 0;
	return 1;
}

void async_drain(struct pinshm_client *c)
{
	uint8_t buf[PROTO_MAX_PACKET];
	struct proto_msg rep;

	while (c->async_count > 0 && !c->broken) {
		int fds[1];
		unsigned nfds = 0;
		ssize_t n = fdpass_recv(c->fd, buf, sizeof(buf), fds, 1, &nfds, MSG_DONTWAIT);
		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			client_break(c, n == 0 ? -ECONNRESET : (int)n);
			return;
		}
		int rc = proto_decode(buf, (size_t)n, true, &rep);
		int fd = nfds == 1 ? fds[0] : -1;
		if (async_take_reply(c, &rep, rc, fd, nfds) == 0) {
			/* Not the reply in flight: no other request is. */
			if (fd >= 0)
				close(fd);
			client_break(c, -EPROTO);
		}
	}
}

void async_clear(struct pinshm_client *c)
{
	for (unsigned i = 0; i < c->async_count; i++) {
		struct async_peer *a = &c->async[(c->async_first + i) % c->async_cap];
		if (a->ch)
			a->ch->fetched[a->consumer].in_flight = false;
	}
	c->async_first = c->async_count = 0;
}

void async_forget_channel(struct pinshm_client *c, pinshm_channel_t *ch)
{
	for (unsigned i = 0; i < c->async_count; i++) {
		struct async_peer *a = &c->async[(c->async_first + i) % c->async_cap];
		if (a->ch == ch)
			a->ch = NULL;
	}
	for (unsigned k = 0; ch->fetched && k < ch->g.max_consumers; k++)
		if (ch->fetched[k].arrived >= 0) {
			close(ch->fetched[k].arrived);
			ch->fetched[k].arrived = -1;
		}
}

void producer_fetch_again(pinshm_channel_t *ch)
{
	for (unsigned k = 0; ch->fetched && k < ch->g.max_consumers; k++)
		ch->fetched[k].failures = 0;
}

/* Make sure consumer @p k of @p ch, armed when its producer last looked,
 * gets a wake-up: by the socket that arrived for it, by the PEER in
 * flight, or by a PEER sent now.  The consumer served is the one there
 * now: one of a newer generation than the wish's armed, if anyone did. */
static void serve_wish(struct pinshm_client *c, pinshm_channel_t *ch, unsigned k)
{
	struct fetched_peer *f = &ch->fetched[k];
	struct endpoint *ep = seg_endpoint(&ch->g, ch->base, ch->g.max_producers + k);
	uint32_t gen = atomic_load_explicit(&ep->generation, memory_order_acquire);

	if (f->arrived >= 0 && f->arrived_gen != gen) {
		close(f->arrived); /* of a consumer gone since */
		f->arrived = -1;
	}
	if (f->arrived >= 0) {
		if (wake_armed_gen(ep, f->arrived, gen))
			return;
		gen = atomic_load_explicit(&ep->generation, memory_order_acquire);
	}
	if (!(f->in_flight && f->asked_gen == gen) && peer_fetch_due(f, gen))
		async_send(c, ch, k, gen);
}

void async_serve_channel(struct pinshm_client *c, pinshm_channel_t *ch)
{
	for (unsigned k = 0; ch->fetched && k < ch->g.max_consumers; k++)
		if (atomic_exchange_explicit(&ch->fetched[k].wanted, false, memory_order_seq_cst))
			serve_wish(c, ch, k);
}

void async_serve_wanted(struct pinshm_client *c)
{
	if (!atomic_exchange_explicit(&c->wanted, false, memory_order_seq_cst))
		return;
	async_drain(c);
	for (pinshm_channel_t *ch = c->channels; ch; ch = ch->client_next)
		async_serve_channel(c, ch);
}

int client_peer_fd(struct pinshm_client *c, pinshm_channel_t *ch, unsigned consumer, uint32_t gen)
{
	struct fetched_peer *f = &ch->fetched[consumer];

	atomic_store_explicit(&f->wanted, true, memory_order_seq_cst);
	atomic_store_explicit(&c->wanted, true, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	if (!client_trylock(c))
		return -1; /* its holder serves the wish before it lets go */
	async_drain(c);
	int fd = -1;
	if (f->arrived >= 0 && f->arrived_gen == gen) {
		atomic_store_explicit(&f->wanted, false, memory_order_relaxed);
		fd = f->arrived;
		f->arrived = -1;
	}
	client_unlock(c);
	return fd;
}
