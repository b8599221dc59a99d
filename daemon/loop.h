/*
 * loop.h - pinshmd's event loop: one thread, epoll, non-blocking sockets.
 *
 * It watches the listening socket, every connection and a signalfd
 * (SIGTERM and SIGINT stop the daemon; SIGHUP calls the reload hook).  Each
 * connection is identified once, at accept, with SO_PEERCRED and
 * SO_PEERGROUPS, and admitted by the [access] lists (config_admits()) and
 * its user's max_connections (account_connect()).  A connection refused
 * there is logged, then kept only until its first request, which gets an
 * ERROR reply with the reason (-EACCES or -EUSERS) and closes it; at most
 * LOOP_MAX_REFUSED wait so at once, beyond them a refused connection is
 * closed at once, without a word.  Its
 * packets are served one by one (request.h), at most LOOP_BATCH per turn
 * so that one client cannot starve the others; a reply that does not fit
 * in the socket waits, and the connection is not read until it is sent.
 * When a connection closes, its endpoints are reaped (registry.h).
 *
 * A connection belongs to the process that made it (SO_PEERCRED's pid):
 * the loop watches that process with a pidfd (SO_PEERPIDFD, else
 * pidfd_open()), and when it exits the connection is closed and reaped at
 * once, even where a child that inherited the socket still holds it.
 * Without pidfds (before Linux 5.3, or out of descriptors) a connection is
 * reaped only when every holder has closed it.
 *
 * Running out of descriptors does not make the loop spin: a spare
 * descriptor is given up to accept and drop the waiting connection, and
 * when even that fails, accepting pauses until a connection closes or
 * LOOP_ACCEPT_RETRY_MS have passed.
 *
 * Exit when idle (exit_idle_ms, pinshmd --exit-idle; for a daemon that a
 * client started): the loop stops once no connection has been open and no
 * channel alive (named or not; the pool's ready segments do not count) for
 * exit_idle_ms, unless a connection waits to be accepted.
 *
 * A connection that sends nothing within LOOP_SILENT_MS of its accept
 * (refused or not) is closed.  The pool (pool.h) is refilled only once no
 * packet has come for LOOP_POOL_QUIET_MS, so that a refill does not delay
 * the request that follows a pool hit.
 *
 * Work in slices (registry_step(): segments of new channels locked, and
 * of channels adopted at the start or handed back, of destroyed ones
 * unmapped and punched, pages moved to a consumer's NUMA node): one slice
 * each turn, after that turn's events, and epoll does not wait while any
 * is left; so a request waits for one slice at most, not for a whole
 * segment.  A connection whose CREATE, hand-back or RELOCK is in progress
 * is not read until its reply is sent (-EINPROGRESS: registry_create(),
 * handback(), registry_relock()); one that hangs up meanwhile is closed,
 * and its half-made channel or judging given up.
 *
 * Limits: LOOP_MAX_CONNECTIONS connections in all (not per user), one
 * reply held per connection; a connection that sends without reading its
 * replies is no longer read, and holds its slot until it closes (a client
 * that has spoken once may stay idle for ever: it holds a lease).
 */
#ifndef PINSHMD_LOOP_H
#define PINSHMD_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "account.h"
#include "adopt.h"
#include "registry.h"
#include "request.h"
#include "timers.h"

#define LOOP_MAX_CONNECTIONS 1024u
#define LOOP_BATCH 16u
#define LOOP_ACCEPT_RETRY_MS 1000u
#define LOOP_MAX_REFUSED 64u
#define LOOP_SILENT_MS 5000u     /* for a new connection's first packet */
#define LOOP_POOL_QUIET_MS 2u    /* without a request before the pool is refilled */

struct conn;

struct loop {
	int epfd;
	int listen_fd;
	int signal_fd;
	int spare_fd;       /* /dev/null, given up when out of descriptors */
	bool accept_paused;
	uint64_t accept_retry_at; /* CLOCK_MONOTONIC ms, while paused */
	struct conn *conns; /* every open connection */
	struct conn *closed; /* closed in this batch of events, freed after it */
	unsigned nconns;
	unsigned nrefused;  /* of them, refused, waiting for their first request */
	unsigned nsilent;   /* of them, yet to send their first packet */
	uint64_t silent_check_at; /* CLOCK_MONOTONIC ms: the first silent_until, or later */
	uint64_t last_request;    /* CLOCK_MONOTONIC ms of the last packet received */
	uint64_t next_id;
	struct account *acct; /* connections counted per user; its config admits them */
	struct adopt *adopt;  /* channels adopted at start, for their grace (NULL: none) */
	uint64_t exit_idle_ms; /* 0, or stop after this long with no connection and no channel */
	uint64_t idle_since;   /* CLOCK_MONOTONIC ms when it last became idle, 0: not idle */
	uint64_t idle_scan_at; /* CLOCK_MONOTONIC ms: the timer "idle scan" due */
	uint64_t watch_tick_at; /* CLOCK_MONOTONIC ms: the timer "watch tick" due */
	struct timers timers;  /* the periodic and deferred work (timers.h) */
	void (*reload)(void *arg); /* on SIGHUP */
	void *reload_arg;
	struct request_ctx ctx;
};

/**
 * Set up the loop on listening socket @p listen_fd, registry @p reg and
 * accounts @p acct (none owned).  SIGTERM, SIGINT and SIGHUP must be
 * blocked already.  @p reload (may be NULL) is called with @p reload_arg
 * on each SIGHUP, between two events.
 * @return 0 or -errno.
 */
int loop_init(struct loop *l, int listen_fd, struct registry *reg, struct account *acct, bool user_mode,
	      void (*reload)(void *arg), void *reload_arg);

/** Serve until a signal or a SHUTDOWN request stops it. @return 0 or -errno (epoll failed). */
int loop_run(struct loop *l);

/** Close every connection (no reaping: clients keep what they mapped) and the loop's descriptors. */
void loop_fini(struct loop *l);

#endif /* PINSHMD_LOOP_H */
