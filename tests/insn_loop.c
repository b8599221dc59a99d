/*
 * insn_loop.c - one thread sends and receives N messages through a channel
 * of its own, for counting the instructions a message costs
 * (tests/check_insn.sh runs it under callgrind).
 *
 *     insn_loop copy|zerocopy SIZE N
 *
 * copy: pinshm_send, then pinshm_recv; zerocopy: pinshm_reserve, fill,
 * pinshm_commit, then pinshm_recv_inplace, read, pinshm_release.  The
 * payload is written and read in both modes, as a program would.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pinshm.h"

static int fail(const char *what, int rc)
{
	fprintf(stderr, "insn_loop: %s: %s\n", what, pinshm_strerror(rc));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "copy") != 0 && strcmp(argv[1], "zerocopy") != 0)) {
		fprintf(stderr, "usage: insn_loop copy|zerocopy SIZE N\n");
		return 2;
	}
	bool copy = strcmp(argv[1], "copy") == 0;
	size_t size = strtoul(argv[2], NULL, 0);
	unsigned long n = strtoul(argv[3], NULL, 0);
	pinshm_channel_attr_t attr;
	pinshm_channel_t *prod, *cons;
	int fd, rc;

	pinshm_channel_attr_init(&attr);
	attr.capacity = 1024 * 1024;
	attr.max_message = 64 * 1024;
	if (size > attr.max_message)
		return fail("size", -EINVAL);
	if ((rc = pinshm_segment_create(&attr, &fd)) != 0)
		return fail("pinshm_segment_create", rc);
	if ((rc = pinshm_channel_attach(fd, PINSHM_PRODUCER, &prod)) != 0 ||
	    (rc = pinshm_channel_attach(fd, PINSHM_CONSUMER, &cons)) != 0)
		return fail("pinshm_channel_attach", rc);
	unsigned char *out = calloc(1, size + 1), *in = calloc(1, size + 1);
	unsigned long sum = 0;
	if (!out || !in)
		return fail("calloc", -ENOMEM);

	for (unsigned long i = 0; i < n; i++) {
		out[0] = (unsigned char)i;
		if (copy) {
			size_t len;
			if ((rc = pinshm_send(prod, out, size, PINSHM_NONBLOCK)) != 0)
				return fail("pinshm_send", rc);
			if ((rc = pinshm_recv(cons, in, size, &len, PINSHM_NONBLOCK)) != 0)
				return fail("pinshm_recv", rc);
			sum += in[0];
		} else {
			void *p;
			pinshm_msg_t m;
			if ((rc = pinshm_reserve(prod, size, &p, PINSHM_NONBLOCK)) != 0)
				return fail("pinshm_reserve", rc);
			memcpy(p, out, size);
			if ((rc = pinshm_commit(prod, size, 0)) != 0)
				return fail("pinshm_commit", rc);
			if ((rc = pinshm_recv_inplace(cons, &m, PINSHM_NONBLOCK)) != 0)
				return fail("pinshm_recv_inplace", rc);
			memcpy(in, m.data, m.len);
			sum += in[0];
			if ((rc = pinshm_release(cons, &m)) != 0)
				return fail("pinshm_release", rc);
		}
	}
	pinshm_channel_close(prod);
	pinshm_channel_close(cons);
	free(out);
	free(in);
	return sum == 0 && n > 1 ? 1 : 0;
}
