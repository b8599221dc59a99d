/*
 * watch.c - watching the processes of endpoints no connection holds: the
 * endpoints of adopted channels (pidfds, or start times where none can be
 * had), the maps of the processes a hand-back's endpoints name (read in
 * slices), and the scan of /proc for nested PID namespaces.  What it
 * concludes it hands to registry.c: an endpoint to reap, a channel to
 * collect.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "registry.h"
#include "watch.h"

/* ---- endpoints of adopted channels that no connection holds ---------------- */

struct endpoint_view {
	const struct seg_geometry *g;
	unsigned endpoint;
	uint32_t state, pid, generation; /* as the segment says now */
};

static int view_fn(void *base, void *arg)
{
	struct endpoint_view *v = arg;
	struct endpoint *ep = seg_endpoint(v->g, base, v->endpoint);

	/* Hints, as everything a client can write: relaxed, checked by their use. */
	v->state = atomic_load_explicit(&ep->state, memory_order_relaxed);
	v->pid = atomic_load_explicit(&ep->pid, memory_order_relaxed);
	v->generation = atomic_load_explicit(&ep->generation, memory_order_relaxed);
	return 0;
}

/* Endpoint @p ep of @p chan as its segment says.  @return 0, or -EBADMSG (damaged). */
static int view_endpoint(struct channel *chan, unsigned ep, struct endpoint_view *v)
{
	*v = (struct endpoint_view){.g = &chan->g, .endpoint = ep};
	return segment_access(&chan->seg, view_fn, v);
}

/* What a look at a process's maps says of the segment. */
enum maps_answer {
	MAPS_NO = 0,      /* it does not map it */
	MAPS_YES = 1,     /* it does */
	MAPS_CLOSED = -1, /* its maps may not be read (another user's process), or it is gone */
	MAPS_LONG = -2,   /* not found within the lines the daemon may read */
};

/* A process whose maps a hand-back's judging read ahead, in slices
 * (watch_judge_step()), for watch_judge_endpoints() to take from there. */
struct judged_proc {
	pid_t pid;                /* the daemon's */
	bool recorded;            /* a pid of an endpoint (else a nested namespace's process that has it there) */
	enum maps_answer answer;  /* MAPS_NO: no such process, or it exited or does not map the segment */
	unsigned long long start; /* its start time, read while a pidfd held it: that process (0: unknown) */
};

/* A hand-back's judging under way: the maps of the processes its endpoints
 * name are read REGISTRY_MAPS_SLICE bytes a loop turn (watch_judge_step()),
 * then watch_judge_endpoints() judges from what was read. */
struct reg_judging {
	struct reg_judging *next;
	struct channel *chan;       /* referenced by the client, which waits: kept */
	struct reg_judged done;   /* the client and its reply */
	struct stat st;           /* the segment's file */
	unsigned budget;          /* bytes of maps left to read (REGISTRY_MAPS_BUDGET) */
	struct judged_proc *p;    /* the processes, in the order read */
	unsigned n, cap, cursor;  /* p[cursor] is read now */
	FILE *maps;               /* its maps, open while read */
	int pidfd;                /* and a pidfd that holds it meanwhile, -1: none */
	unsigned limit, bytes;    /* of its maps, the most read and the bytes read */
	bool at_start;            /* the next read starts a line */
	pid_t nested;             /* a recorded pid not proven here: its nested namesakes wanted next, 0: none */
	bool unjudged;            /* a client of pid 0's: its segment locked, no endpoint judged */
};

/* The hand-back whose maps were read ahead, while its endpoints are
 * judged: no maps are read then, a process not read ahead cannot be judged. */
static const struct reg_judging *judging_now;
static const struct judged_proc *judged_lookup(pid_t pid);

/* Whether process @p pid maps the file @p st, reading at most
 * REGISTRY_MAPS_MAX_BYTES of its maps and no more than *@p budget bytes
 * (the bytes read are taken off it; a line is read a buffer at a time, so
 * that a long path costs its length: a process can make its lines long). */
static enum maps_answer maps_file(pid_t pid, const struct stat *st, unsigned *budget)
{
	char path[64], line[512];
	unsigned limit = *budget < REGISTRY_MAPS_MAX_BYTES ? *budget : REGISTRY_MAPS_MAX_BYTES, bytes = 0;
	bool at_start = true;
	enum maps_answer found = MAPS_NO;

	if (judging_now) {
		const struct judged_proc *jp = judged_lookup(pid);
		return jp ? jp->answer : MAPS_LONG;
	}
	if (limit == 0)
		return MAPS_LONG;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return MAPS_CLOSED;
	/* "START-END PERMS OFFSET MAJOR:MINOR INODE PATH", hex device numbers. */
	while (found == MAPS_NO && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		bool starts = at_start;
		size_t len = strlen(line);
		at_start = len > 0 && line[len - 1] == '\n';
		if (len > limit - bytes) {
			bytes = limit;
			found = MAPS_LONG;
			break;
		}
		bytes += (unsigned)len;
		if (starts && sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
		    ino == (unsigned long long)st->st_ino && maj == major(st->st_dev) && min == minor(st->st_dev))
			found = MAPS_YES;
	}
	if (found == MAPS_NO && ferror(f))
		found = MAPS_CLOSED;
	fclose(f);
	*budget -= bytes;
	return found;
}

/* The start time of process @p pid (/proc/PID/stat, clock ticks after
 * boot): with its pid, it names one process.  0: no such process, or one
 * that has exited (a zombie, not yet waited for). */
static unsigned long long proc_start(pid_t pid)
{
	char path[64], buf[1024], state = 'Z';
	unsigned long long start = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "PID (COMM) STATE ...": COMM may hold anything; the fields after the
	 * last ')' are numbers, the start time the 20th of them. */
	char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			 &state, &start) != 2)
		return 0;
	return state == 'Z' || state == 'X' ? 0 : start;
}

/* How the daemon knows a process: a pidfd, else its start time. */
struct proc_handle {
	int pidfd;                /* -1: none */
	unsigned long long start; /* where no pidfd */
};

static bool handle_exited(pid_t pid, const struct proc_handle *h)
{
	struct pollfd p = {.fd = h->pidfd, .events = POLLIN};

	return h->pidfd >= 0 ? poll(&p, 1, 0) == 1 : proc_start(pid) != h->start;
}

static void handle_close(struct proc_handle *h)
{
	if (h->pidfd >= 0)
		close(h->pidfd);
	h->pidfd = -1;
}

/*
 * Whether process @p pid (of this PID namespace) lives and maps the file
 * @p st (maps_file(), @p budget): MAPS_YES with @p h, a handle on it;
 * MAPS_CLOSED or MAPS_LONG where it lives but cannot be judged; MAPS_NO
 * where it does not, and @p why says why.  Its maps are read while the
 * handle holds it, and the handle looked at after, so that they are its
 * own.
 */
static enum maps_answer process_maps(pid_t pid, const struct stat *st, unsigned *budget, struct proc_handle *h,
				     const char **why)
{
	*h = (struct proc_handle){.pidfd = -1};
	*why = "no process has its pid";
#ifdef SYS_pidfd_open
	static bool no_pidfds; /* ENOSYS once: not asked again */
	if (!no_pidfds) {
		h->pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* close-on-exec */
		if (h->pidfd < 0 && (errno == ESRCH || errno == EINVAL)) /* EINVAL: a thread's id, not a process's */
			return MAPS_NO;
		no_pidfds = h->pidfd < 0 && errno == ENOSYS;
	}
#endif
	if (h->pidfd < 0 && (h->start = proc_start(pid)) == 0)
		return MAPS_NO;
	enum maps_answer maps = maps_file(pid, st, budget);
	const struct judged_proc *jp = judging_now ? judged_lookup(pid) : NULL;
	if (handle_exited(pid, h) || (jp && jp->answer != MAPS_NO && proc_start(pid) != jp->start)) {
		*why = "its process has exited";
		maps = MAPS_NO;
	} else if (maps == MAPS_NO) {
		*why = "the process that has its pid does not map the channel (the pid was reused)";
	} else if (maps == MAPS_CLOSED) {
		*why = "its process's maps may not be read";
	} else if (maps == MAPS_LONG) {
		*why = "its process's maps are longer than the daemon reads";
	}
	if (maps != MAPS_YES)
		handle_close(h);
	return maps;
}

/* nested_scan_step() to its end; not while a hand-back is judged from what
 * was read ahead (a scan under way then leaves its pids unjudged). */
static void nested_scan(struct nested_procs *np)
{
	while (!judging_now && !nested_scan_step(np, UINT_MAX))
		;
}

/*
 * The process of a nested PID namespace whose pid there is @p pid and that
 * maps the file @p st: MAPS_YES and @p here where exactly one does;
 * MAPS_NO where none does; MAPS_CLOSED where several do, where a
 * process that has that pid could not be judged, or where the scan
 * stopped short (@p why set): two containers each have a pid 1, and the
 * segment does not say which one's it is.
 */
static enum maps_answer nested_owner(struct nested_procs *np, uint32_t pid, const struct stat *st, unsigned *budget,
				     pid_t *here, const char **why)
{
	unsigned owners = 0;
	bool unsure = false;

	if (np->truncated || np->dir) {
		*why = "the scan of /proc for nested PID namespaces stopped short";
		return MAPS_CLOSED;
	}
	for (unsigned i = 0; i < np->n; i++) {
		if (np->p[i].inner != pid)
			continue;
		/* Read again: since the scan, its pid may be another's. */
		uint32_t now = 0;
		if (!nested_pid(np->p[i].here, &now)) {
			unsure = true;
			continue;
		}
		if (now != pid)
			continue;
		enum maps_answer m = maps_file(np->p[i].here, st, budget);
		if (m == MAPS_YES && owners++ == 0)
			*here = np->p[i].here;
		unsure |= m == MAPS_CLOSED || m == MAPS_LONG;
	}
	if (owners == 1 && !unsure)
		return MAPS_YES;
	if (owners == 0 && !unsure)
		return MAPS_NO;
	*why = owners > 1 ? "several processes of nested PID namespaces have its pid there and map the channel"
			  : "a process of a nested PID namespace that has its pid there cannot be judged";
	return MAPS_CLOSED;
}

/* A distinct pid of an adoption, judged. */
enum verdict {
	OWNER_GONE,    /* reap its endpoints */
	OWNER_WATCHED, /* alive, watched: its endpoints reaped when it exits */
	OWNER_KEPT,    /* taken for alive, not watched: its endpoints stay attached */
};

struct judged {
	uint32_t pid;    /* as the segment records it */
	enum verdict verdict;
	pid_t here;      /* its pid for the daemon */
	unsigned watch;  /* OWNER_WATCHED: its slot */
	const char *why;
};

/* One adoption's judging: each distinct pid once, maps read within one budget. */
struct judge {
	unsigned budget; /* bytes of maps left to read */
	unsigned n;
	struct judged e[PINSHM_MAX_PRODUCERS + PINSHM_MAX_CONSUMERS];
};

/* Give the slot of watch @p w back (its process exited, or the daemon stops). */
static void unwatch(struct registry *r, unsigned w)
{
	struct reg_watch *rw = &r->watches[w];

	if (rw->pidfd >= 0) {
		if (r->watch_epfd >= 0)
			epoll_ctl(r->watch_epfd, EPOLL_CTL_DEL, rw->pidfd, NULL);
		close(rw->pidfd);
	} else {
		r->ticked_watches--;
	}
	*rw = (struct reg_watch){.pidfd = -1};
	r->nwatches--;
}

#define WATCH_EXITED (-2) /* watch_process(): the process exited meanwhile */

/* A watch of process @p here, known by @p h (taken: given to the watch or
 * closed), that lives and maps a segment: the slot of the one that watches
 * it already, else a new one, known by its pidfd while fewer than
 * REGISTRY_MAX_WATCH_PIDFDS are, else by its start time.  @return the
 * slot, WATCH_EXITED where the process has exited meanwhile, or -1 with
 * @p why (the most are watched, or memory is short). */
static int watch_process(struct registry *r, pid_t here, struct proc_handle *h, const char **why)
{
	for (unsigned w = 0; r->watches && w < REGISTRY_MAX_WATCHES; w++) {
		struct reg_watch *rw = &r->watches[w];
		if (rw->here != here)
			continue;
		/* The same process while its watch has not seen it exit (a pid
		 * is reused only after); else a new watch for the new one. */
		if (!handle_exited(here, &(struct proc_handle){.pidfd = rw->pidfd, .start = rw->start})) {
			handle_close(h);
			return (int)w;
		}
	}
	*why = "the daemon watches REGISTRY_MAX_WATCHES processes already";
	if (r->nwatches >= REGISTRY_MAX_WATCHES)
		goto fail;
	if (!r->watches) {
		r->watches = malloc(REGISTRY_MAX_WATCHES * sizeof(*r->watches));
		*why = "out of memory";
		if (!r->watches)
			goto fail;
		for (unsigned w = 0; w < REGISTRY_MAX_WATCHES; w++)
			r->watches[w] = (struct reg_watch){.pidfd = -1};
	}
	unsigned w = 0;
	while (r->watches[w].here != 0)
		w++;
	if (h->pidfd >= 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = w};
		if (r->nwatches - r->ticked_watches >= REGISTRY_MAX_WATCH_PIDFDS || r->watch_epfd < 0 ||
		    epoll_ctl(r->watch_epfd, EPOLL_CTL_ADD, h->pidfd, &ev) != 0) {
			/* Known by its start time instead: read while the pidfd
			 * still holds it, so that the time is this process's. */
			h->start = proc_start(here);
			bool exited = h->start == 0 || handle_exited(here, h);
			handle_close(h);
			if (exited) {
				*why = "its process has exited";
				return WATCH_EXITED;
			}
		}
	}
	r->watches[w] = (struct reg_watch){.here = here, .pidfd = h->pidfd, .start = h->start};
	r->ticked_watches += h->pidfd < 0;
	r->nwatches++;
	return (int)w;
fail:
	handle_close(h);
	return -1;
}

/*
 * Judge @p pid, recorded for an endpoint of the segment @p st (the rules
 * of registry.h), once in @p j: gone, alive and watched, or kept.
 */
static const struct judged *judge_pid(struct registry *r, struct judge *j, uint32_t pid, const struct stat *st)
{
	for (unsigned i = 0; i < j->n; i++)
		if (j->e[i].pid == pid)
			return &j->e[i];
	static const struct judged too_many = {.verdict = OWNER_KEPT, .why = "too many pids to judge"};
	if (j->n == sizeof(j->e) / sizeof(j->e[0]))
		return &too_many; /* not with the daemon's geometries: one per endpoint at most */
	struct judged *e = &j->e[j->n++];
	struct proc_handle h = {.pidfd = -1};
	enum maps_answer direct = MAPS_NO;
	const char *nested_why = NULL;

	*e = (struct judged){.pid = pid, .verdict = OWNER_GONE, .here = (pid_t)pid, .why = "no process can have its pid"};
	if (pid == 0 || pid > INT_MAX)
		return e;
	if ((pid_t)pid == getpid())
		e->why = "its pid is this daemon's now";
	else
		direct = process_maps((pid_t)pid, st, &j->budget, &h, &e->why);
	if (direct != MAPS_YES) {
		/* Not proven here: a nested namespace's process, where one alone
		 * maps it, is the better answer. */
		pid_t nested = 0;
		nested_scan(&r->nested);
		enum maps_answer n = nested_owner(&r->nested, pid, st, &j->budget, &nested, &nested_why);
		if (n == MAPS_YES)
			n = process_maps(nested, st, &j->budget, &h, &nested_why);
		if (n == MAPS_YES) {
			direct = MAPS_YES;
			e->here = nested;
		} else if (n != MAPS_NO) {
			direct = MAPS_CLOSED;
			e->why = nested_why;
		}
	}
	if (direct == MAPS_NO)
		return e;
	e->verdict = OWNER_KEPT;
	if (direct != MAPS_YES)
		return e; /* e->why says why it cannot be judged */
	int w = watch_process(r, e->here, &h, &e->why);
	if (w == WATCH_EXITED)
		e->verdict = OWNER_GONE;
	if (w >= 0) {
		e->verdict = OWNER_WATCHED;
		e->watch = (unsigned)w;
	}
	return e;
}

/* Watch endpoint @p v of @p chan through watch @p w.  @return 0, or -1 with
 * @p why (REGISTRY_MAX_ORPHANS, or memory). */
static int watch_orphan(struct registry *r, struct channel *chan, const struct endpoint_view *v, unsigned w,
			const char **why)
{
	*why = "the daemon watches REGISTRY_MAX_ORPHANS endpoints already";
	if (r->norphans >= REGISTRY_MAX_ORPHANS)
		return -1;
	if (r->norphans == r->orphans_cap) {
		unsigned cap = r->orphans_cap ? r->orphans_cap * 2 : 8;
		struct reg_orphan *o = realloc(r->orphans, cap * sizeof(*o));
		*why = "out of memory";
		if (!o)
			return -1;
		r->orphans = o;
		r->orphans_cap = cap;
	}
	r->orphans[r->norphans++] = (struct reg_orphan){
		.chan = chan, .endpoint = v->endpoint, .pid = v->pid, .generation = v->generation, .watch = w};
	r->watches[w].users++;
	if (chan->watched++ == 0)
		chan->refs++; /* kept while watched */
	return 0;
}

/* Stop watching orphan @p i (its process too, if it was its last); its
 * channel may be destroyed. */
static void drop_orphan(struct registry *r, unsigned i)
{
	struct channel *chan = r->orphans[i].chan;
	unsigned w = r->orphans[i].watch;

	if (--r->watches[w].users == 0)
		unwatch(r, w);
	r->orphans[i] = r->orphans[--r->norphans];
	if (--chan->watched == 0) {
		chan->refs--;
		registry_collect(r, chan);
	}
}

void watch_judge_endpoints(struct registry *r, struct channel *chan)
{
	struct judge *j = calloc(1, sizeof(*j));
	struct stat st;

	if (!j) {
		log_warn("channel '%s': out of memory: the endpoints attached before the restart are not judged",
			 chan->name);
		return;
	}
	unsigned reaped = 0, watched = 0, kept = 0;
	const char *kept_why = "";
	uint32_t kept_pid = 0;
	j->budget = judging_now ? judging_now->budget : REGISTRY_MAPS_BUDGET; /* read ahead already */
	if (fstat(chan->seg.fd, &st) != 0)
		goto out;
	for (unsigned ep = 0; ep < chan->g.max_producers + chan->g.max_consumers; ep++) {
		struct endpoint_view v;
		const char *why;
		if (chan->holder[ep] != 0)
			continue;
		if (view_endpoint(chan, ep, &v) != 0 || v.state != EP_ACTIVE) {
			registry_forget_notify(r, chan, ep); /* an eventfd from the store: its endpoint closed since */
			continue;
		}
		const struct judged *e = judge_pid(r, j, v.pid, &st);
		/* One line an endpoint at info, a summary at notice: a client
		 * chooses how many endpoints a hand-back brings. */
		if (e->verdict == OWNER_GONE) {
			log_info("channel '%s': endpoint %u of pid %u, attached before the restart: %s", chan->name, ep,
				 (unsigned)v.pid, e->why);
			registry_reap_endpoint(r, chan, ep, (pid_t)v.pid);
			registry_forget_notify(r, chan, ep);
			reaped++;
		} else if (e->verdict == OWNER_KEPT) {
			log_info("channel '%s': endpoint %u of pid %u, attached before the restart: %s: "
				 "taken for alive, not watched",
				 chan->name, ep, (unsigned)v.pid, e->why);
			if (kept++ == 0) {
				kept_why = e->why;
				kept_pid = v.pid;
			}
		} else if (watch_orphan(r, chan, &v, e->watch, &why) != 0) {
			log_info("channel '%s': endpoint %u of pid %u (here %d), alive: %s: not watched", chan->name, ep,
				 (unsigned)v.pid, (int)e->here, why);
			if (kept++ == 0) {
				kept_why = why;
				kept_pid = v.pid;
			}
		} else {
			log_info("channel '%s': endpoint %u of pid %u (here %d), alive: watched until it exits%s",
				 chan->name, ep, (unsigned)v.pid, (int)e->here,
				 r->watches[e->watch].pidfd >= 0 ? "" : " (no pidfd: its start time looked at by the tick)");
			watched++;
		}
	}
	char first[200] = "";
	if (kept)
		snprintf(first, sizeof(first), " (the first, of pid %u: %s)", (unsigned)kept_pid, kept_why);
	if (reaped + watched + kept)
		log_notice("channel '%s': of its endpoints attached before the restart, %u reaped (their processes "
			   "are gone), %u watched, %u taken for alive and not watched%s; %u bytes of maps read",
			   chan->name, reaped, watched, kept, first, REGISTRY_MAPS_BUDGET - j->budget);
out:
	/* Watches that no endpoint came to use (all kept past a cap). */
	for (unsigned i = 0; i < j->n; i++)
		if (j->e[i].verdict == OWNER_WATCHED && r->watches[j->e[i].watch].users == 0 &&
		    r->watches[j->e[i].watch].here != 0)
			unwatch(r, j->e[i].watch);
	free(j);
}

/* ---- hand-backs judged in slices ------------------------------------------- */

static const struct judged_proc *judged_lookup(pid_t pid)
{
	for (unsigned i = 0; i < judging_now->n; i++)
		if (judging_now->p[i].pid == pid)
			return &judging_now->p[i];
	return NULL;
}

/* Put process @p pid in @p jg's list at @p at, once.  @return false out of memory. */
static bool judging_add(struct reg_judging *jg, unsigned at, pid_t pid, bool recorded)
{
	for (unsigned i = 0; i < jg->n; i++)
		if (jg->p[i].pid == pid)
			return true;
	if (jg->n == jg->cap) {
		unsigned cap = jg->cap ? jg->cap * 2 : 16;
		struct judged_proc *p = realloc(jg->p, cap * sizeof(*p));
		if (!p)
			return false;
		jg->p = p;
		jg->cap = cap;
	}
	memmove(&jg->p[at + 1], &jg->p[at], (jg->n - at) * sizeof(*jg->p));
	jg->p[at] = (struct judged_proc){.pid = pid, .recorded = recorded, .answer = MAPS_NO};
	jg->n++;
	return true;
}

static void judging_free(struct reg_judging *jg)
{
	if (jg->maps)
		fclose(jg->maps);
	if (jg->pidfd >= 0)
		close(jg->pidfd);
	free(jg->p);
	free(jg);
}

/* Begin reading the maps of jg->p[jg->cursor]: a pidfd on it, its start
 * time, its maps open.  @return false where there is nothing to read (its
 * answer set). */
static bool judging_open(struct reg_judging *jg)
{
	struct judged_proc *jp = &jg->p[jg->cursor];
	char path[64];

	jg->pidfd = -1;
	if (jp->pid == getpid())
		return false; /* MAPS_NO */
#ifdef SYS_pidfd_open
	jg->pidfd = (int)syscall(SYS_pidfd_open, jp->pid, 0);
	if (jg->pidfd < 0 && (errno == ESRCH || errno == EINVAL))
		return false; /* MAPS_NO */
#endif
	jp->start = proc_start(jp->pid);
	jg->limit = jg->budget < REGISTRY_MAPS_MAX_BYTES ? jg->budget : REGISTRY_MAPS_MAX_BYTES;
	jg->bytes = 0;
	jg->at_start = true;
	jp->answer = jp->start == 0 ? MAPS_NO : jg->limit == 0 ? MAPS_LONG : MAPS_CLOSED;
	if (jp->answer != MAPS_CLOSED)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)jp->pid);
	jg->maps = fopen(path, "re");
	jp->answer = MAPS_NO;
	if (!jg->maps)
		jp->answer = MAPS_CLOSED;
	return jg->maps != NULL;
}

/* Read on in the maps of jg->p[jg->cursor], at most about *@p quantum
 * bytes (taken off it), as maps_file() does.  @return whether it is done. */
static bool judging_read(struct reg_judging *jg, unsigned *quantum)
{
	struct judged_proc *jp = &jg->p[jg->cursor];
	char line[512];

	while (*quantum > 0 && fgets(line, sizeof(line), jg->maps)) {
		unsigned maj, min;
		unsigned long long ino;
		bool starts = jg->at_start;
		size_t len = strlen(line);
		jg->at_start = len > 0 && line[len - 1] == '\n';
		if (len > jg->limit - jg->bytes) {
			jg->bytes = jg->limit;
			jp->answer = MAPS_LONG;
			return true;
		}
		jg->bytes += (unsigned)len;
		*quantum = len < *quantum ? *quantum - (unsigned)len : 0;
		if (starts && sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
		    ino == (unsigned long long)jg->st.st_ino && maj == major(jg->st.st_dev) && min == minor(jg->st.st_dev)) {
			jp->answer = MAPS_YES;
			return true;
		}
	}
	if (*quantum > 0 && ferror(jg->maps))
		jp->answer = MAPS_CLOSED;
	return *quantum > 0;
}

/* The maps of jg->p[jg->cursor] are read: close them, see whether it
 * exited meanwhile; where it does not map the segment, the processes of
 * nested PID namespaces that have its pid there are read next. */
static void judging_close(struct reg_judging *jg)
{
	struct judged_proc *jp = &jg->p[jg->cursor];

	if (jg->maps) {
		fclose(jg->maps);
		jg->maps = NULL;
	}
	jg->budget -= jg->bytes;
	jg->bytes = 0;
	if (jp->answer != MAPS_NO && handle_exited(jp->pid, &(struct proc_handle){.pidfd = jg->pidfd, .start = jp->start}))
		jp->answer = MAPS_NO;
	if (jg->pidfd >= 0)
		close(jg->pidfd);
	jg->pidfd = -1;
	jg->cursor++;
	if (jp->recorded && jp->answer != MAPS_YES)
		jg->nested = jp->pid; /* its nested namesakes next (judging_nested()) */
}

/* The processes of nested PID namespaces that have pid jg->nested there,
 * read next, once the scan of /proc (a slice a turn) is complete.
 * @return false while it is not. */
static bool judging_nested(struct registry *r, struct reg_judging *jg)
{
	unsigned at = jg->cursor;

	if (!nested_scan_step(&r->nested, REGISTRY_NESTED_SLICE))
		return false;
	for (unsigned i = 0; !r->nested.truncated && i < r->nested.n; i++)
		if (r->nested.p[i].inner == (uint32_t)jg->nested && !judging_add(jg, at++, r->nested.p[i].here, false))
			break; /* not read: not judged */
	jg->nested = 0;
	return true;
}

/* The pids that @p jg's endpoints record (attached, held by no
 * connection), to be read in turn.  @return false out of memory. */
static bool judging_list(struct reg_judging *jg)
{
	struct channel *chan = jg->chan;

	if (fstat(chan->seg.fd, &jg->st) != 0)
		return true; /* nothing read: judged as it can be */
	/* The daemon's own pid is listed, not read: its nested namesakes are. */
	for (unsigned ep = 0; ep < chan->g.max_producers + chan->g.max_consumers; ep++) {
		struct endpoint_view v;
		if (chan->holder[ep] != 0 || view_endpoint(chan, ep, &v) != 0 || v.state != EP_ACTIVE || v.pid == 0 ||
		    v.pid > INT_MAX)
			continue;
		if (!judging_add(jg, jg->n, (pid_t)v.pid, true))
			return false;
	}
	return true;
}

int watch_judge_start(struct registry *r, struct channel *chan, const struct reg_judged *reply, bool judge)
{
	struct reg_judging *jg = calloc(1, sizeof(*jg));

	if (!jg)
		return -ENOMEM;
	*jg = (struct reg_judging){
		.chan = chan, .done = *reply, .budget = REGISTRY_MAPS_BUDGET, .pidfd = -1, .unjudged = !judge};
	if (judge && !judging_list(jg)) {
		judging_free(jg);
		return -ENOMEM;
	}
	struct reg_judging **q = &r->judging;
	while (*q)
		q = &(*q)->next;
	*q = jg;
	return 0;
}

/* Move @p jg, the first judging, to the end of the list (round robin). */
static void judging_requeue(struct registry *r, struct reg_judging *jg)
{
	struct reg_judging **q = &r->judging;

	r->judging = jg->next;
	while (*q)
		q = &(*q)->next;
	*q = jg;
	jg->next = NULL;
}

bool watch_judge_step(struct registry *r, struct reg_judged *done)
{
	struct reg_judging *jg = r->judging;
	unsigned quantum = REGISTRY_MAPS_SLICE;

	if (!jg)
		return false;
	if (jg->chan->locking) { /* its segment locked first, a slice a turn (registry_step()) */
		judging_requeue(r, jg);
		return false;
	}
	while (quantum > 0 && (jg->cursor < jg->n || jg->nested)) {
		if (jg->nested) {
			if (!judging_nested(r, jg))
				break; /* the scan goes on next turn */
			continue;
		}
		if (!jg->maps && !judging_open(jg)) {
			judging_close(jg);
			continue;
		}
		if (judging_read(jg, &quantum))
			judging_close(jg);
	}
	if (jg->cursor < jg->n || jg->nested) { /* round robin */
		judging_requeue(r, jg);
		return false;
	}
	r->judging = jg->next;
	judging_now = jg;
	if (!jg->unjudged)
		watch_judge_endpoints(r, jg->chan);
	judging_now = NULL;
	*done = jg->done;
	judging_free(jg);
	return true;
}

/* Give up the judgings for client @p id (it went): its channels are judged no more. */
void watch_client_gone(struct registry *r, uint64_t id)
{
	for (struct reg_judging **q = &r->judging; *q;) {
		struct reg_judging *jg = *q;
		if (jg->done.client != id) {
			q = &jg->next;
			continue;
		}
		*q = jg->next;
		judging_free(jg); /* its channel, if kept, is locked on */
	}
}

/* Whether orphan @p i is no longer its process's to reap: claimed by a
 * connection, closed, reaped or attached again, or its segment damaged. */
static bool orphan_stale(struct registry *r, unsigned i)
{
	const struct reg_orphan *o = &r->orphans[i];
	struct endpoint_view v;

	return o->chan->holder[o->endpoint] != 0 || view_endpoint(o->chan, o->endpoint, &v) != 0 ||
	       v.state != EP_ACTIVE || v.pid != o->pid || v.generation != o->generation;
}

/* Forget orphan @p i, stale: its eventfd too, unless a connection holds
 * the endpoint (then it is the holder's). */
static void forget_orphan(struct registry *r, unsigned i)
{
	const struct reg_orphan *o = &r->orphans[i];

	if (o->chan->holder[o->endpoint] == 0)
		registry_forget_notify(r, o->chan, o->endpoint);
	drop_orphan(r, i);
}

/* The process of watch @p w exited: reap the endpoints watched through it
 * (the stale ones forgotten); the watch ends with the last. */
static void watch_exited(struct registry *r, unsigned w)
{
	pid_t here = r->watches[w].here;
	unsigned reaped = 0;

	for (unsigned i = r->norphans; i-- > 0;) {
		const struct reg_orphan *o = &r->orphans[i];
		if (o->watch != w)
			continue;
		if (!orphan_stale(r, i)) {
			log_info("channel '%s': endpoint %u of pid %u, attached before the restart: "
				 "its process has exited",
				 o->chan->name, o->endpoint, (unsigned)o->pid);
			registry_reap_endpoint(r, o->chan, o->endpoint, (pid_t)o->pid);
			reaped++;
		}
		forget_orphan(r, i);
	}
	if (r->watches[w].here != 0)
		unwatch(r, w); /* none watched through it */
	log_notice("pid %d, watched for endpoints of adopted channels, has exited: %u reaped", (int)here, reaped);
}

/* From the tick: forget the stale orphans, REGISTRY_TICK_ORPHANS at most
 * a tick, in turn, so that a channel whose endpoints were all claimed or
 * closed is not kept by them. */
static void orphans_tick(struct registry *r)
{
	unsigned n = r->norphans < REGISTRY_TICK_ORPHANS ? r->norphans : REGISTRY_TICK_ORPHANS;

	for (unsigned k = 0; k < n && r->norphans; k++) {
		if (r->orphan_cursor >= r->norphans)
			r->orphan_cursor = 0;
		if (orphan_stale(r, r->orphan_cursor))
			forget_orphan(r, r->orphan_cursor); /* the last one moved here: looked at next */
		else
			r->orphan_cursor++;
	}
}

void registry_watch_events(struct registry *r)
{
	struct epoll_event ev[32];
	int n = r->watch_epfd >= 0 ? epoll_wait(r->watch_epfd, ev, 32, 0) : 0;

	for (int i = 0; i < n; i++)
		if (ev[i].data.u32 < REGISTRY_MAX_WATCHES && r->watches[ev[i].data.u32].pidfd >= 0)
			watch_exited(r, ev[i].data.u32);
}

/* The watched processes without a pidfd, REGISTRY_TICK_WATCHES at most a
 * tick, in turn: those whose start time changed (gone, or another has
 * their pid) exited. */
static void watches_tick(struct registry *r)
{
	unsigned looked = 0;

	for (unsigned k = 0; r->ticked_watches && k < REGISTRY_MAX_WATCHES && looked < REGISTRY_TICK_WATCHES; k++) {
		unsigned w = r->watch_cursor;
		struct reg_watch *rw = &r->watches[w];
		r->watch_cursor = (w + 1) % REGISTRY_MAX_WATCHES;
		if (rw->here == 0 || rw->pidfd >= 0)
			continue;
		looked++;
		if (proc_start(rw->here) != rw->start)
			watch_exited(r, w);
	}
}


void watch_init(struct registry *r)
{
	r->watch_epfd = epoll_create1(EPOLL_CLOEXEC); /* -1: the watches are looked at by the tick */
}

void watch_tick(struct registry *r)
{
	watches_tick(r);
	orphans_tick(r);
}

void watch_fini(struct registry *r)
{
	for (unsigned w = 0; r->watches && w < REGISTRY_MAX_WATCHES; w++)
		if (r->watches[w].pidfd >= 0)
			close(r->watches[w].pidfd);
	free(r->watches);
	free(r->orphans);
	if (r->nested.dir)
		closedir(r->nested.dir);
	free(r->nested.p);
	r->watches = NULL;
	r->orphans = NULL;
	r->nested = (struct nested_procs){0};
	r->norphans = r->orphans_cap = r->nwatches = r->ticked_watches = 0;
	if (r->watch_epfd >= 0)
		close(r->watch_epfd);
	r->watch_epfd = -1;
	while (r->judging) {
		struct reg_judging *jg = r->judging;
		r->judging = jg->next;
		judging_free(jg);
	}
}
