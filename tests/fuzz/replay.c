/*
 * replay.c - a Check program that runs one fuzz target on every file of its
 * corpus: the seeds and the inputs of crashes found before, kept as
 * regression tests.  Linked with one fuzz_*.c; built in every configuration
 * (with or without --enable-fuzzing), as tests/check_fuzz_TARGET.
 *
 * FUZZ_CORPUS (compiled in) is the corpus folder; $FUZZ_CORPUS_DIR, when
 * set, replaces it.  Each file is its own fork (CK_FORK), so that a crash or
 * a failed invariant (abort) fails the test of that file and names it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS: the corpus folder of the target"
#endif

static char **files;
static unsigned nfiles;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static const char *corpus_dir(void)
{
	const char *env = getenv("FUZZ_CORPUS_DIR");

	return env && *env ? env : FUZZ_CORPUS;
}

static void list_corpus(void)
{
	const char *dir = corpus_dir();
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d) {
		perror(dir);
		exit(EXIT_FAILURE);
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char **f = realloc(files, (nfiles + 1) * sizeof(*f));
		if (!f || asprintf(&f[nfiles], "%s/%s", dir, e->d_name) < 0)
			abort();
		files = f;
		nfiles++;
	}
	closedir(d);
	qsort(files, nfiles, sizeof(*files), by_name);
}

START_TEST(test_replay)
{
	const char *path = files[_i];
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;

	ck_assert_msg(f != NULL, "%s: cannot open", path);
	for (;;) {
		if (len == cap) {
			cap = cap ? 2 * cap : 4096;
			buf = realloc(buf, cap);
			ck_assert(buf != NULL);
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		if (n == 0)
			break;
		len += n;
	}
	ck_assert_msg(!ferror(f), "%s: read error", path);
	fclose(f);
	/* An exact-size copy, so that ASan sees a read past the input. */
	uint8_t *input = malloc(len ? len : 1);
	ck_assert(input != NULL);
	memcpy(input, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(input, len);
	free(input);
}
END_TEST

int main(void)
{
	list_corpus();
	if (nfiles == 0) {
		fprintf(stderr, "%s: no input files\n", corpus_dir());
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("fuzz replay");
	TCase *tc = tcase_create("corpus");
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_replay, 0, (int)nfiles);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	for (unsigned i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
