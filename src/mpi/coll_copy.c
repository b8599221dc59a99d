/*
 * coll_copy.c - streaming stores into a rank's own half of the collective
 * area (coll.h), where PINSHM_MPI_COLL_STREAM asks for them.
 *
 * A half's lines were last read by the other ranks, whose caches still
 * hold them: a plain store first takes each line back from the reader's
 * cache, where a streaming store writes the whole line without reading
 * it, and the readers then read it from memory.  That pays only where the
 * ranks' cores share no cache (PERFORMANCE.md, "Streaming stores into the
 * area"); where they share one, or ranks share cores, memcpy, which
 * leaves the data in a cache the reader reaches, is faster.
 */
#include <string.h>

#include "coll.h"

#if defined(__x86_64__)
#include <immintrin.h>

void coll_stream_in(void *dst, const void *src, size_t n)
{
	char *d = dst;
	const char *s = src;
	if (n < 256) {
		memcpy(d, s, n);
		return;
	}
	size_t head = (size_t)(-(uintptr_t)d & 63); /* whole lines streamed, each written at once */
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
		_mm_stream_si128((__m128i *)(void *)d, a);
		_mm_stream_si128((__m128i *)(void *)(d + 16), b);
		_mm_stream_si128((__m128i *)(void *)(d + 32), c);
		_mm_stream_si128((__m128i *)(void *)(d + 48), e);
	}
	memcpy(d, s, n);
	/* Streaming stores are not ordered with later stores: the post or
	 * mark that publishes them (a release store) must follow them. */
	_mm_sfence();
}
#else
void coll_stream_in(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif
