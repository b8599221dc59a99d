# tests/fuzz/local.mk, included by Makefile.am: the libFuzzer targets and
# make fuzz. Paths are relative to the top of the tree.

# ---------------------------------------------------------------------------
# Fuzzing (libFuzzer). configure CC=clang --enable-fuzzing builds the
# targets; `make fuzz` runs each for FUZZ_SECONDS on a copy of its corpus
# (tests/fuzz/corpus/TARGET, never written to), writing
# tests/fuzz/fuzz_TARGET.log and .trs (PASS: no crash, leak or hang) and
# keeping any crashing input in tests/fuzz/crashes-TARGET/.

EXTRA_DIST += \
	tests/fuzz/corpus

FUZZ_SECONDS = 60
FUZZ_TARGETS = \
	config \
	protocol \
	ring

if ENABLE_FUZZING

noinst_PROGRAMS = \
	tests/fuzz/fuzz_config \
	tests/fuzz/fuzz_protocol \
	tests/fuzz/fuzz_ring

# The code under test is compiled into each target, instrumented for
# coverage (-fsanitize=fuzzer), with ASan and UBSan.
tests_fuzz_fuzz_config_SOURCES = \
	daemon/config.c \
	daemon/config.h \
	daemon/cred.c \
	daemon/cred.h \
	daemon/names.c \
	daemon/names.h \
	src/protocol.c \
	src/protocol.h \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_config.c
tests_fuzz_fuzz_config_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-I$(top_srcdir)/daemon
tests_fuzz_fuzz_config_CFLAGS = \
	$(AM_CFLAGS) \
	$(FUZZ_CFLAGS) \
	$(INIH_CFLAGS)
tests_fuzz_fuzz_config_LDFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_config_LDADD = $(INIH_LIBS)

tests_fuzz_fuzz_protocol_SOURCES = \
	src/protocol.c \
	src/protocol.h \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_protocol.c
tests_fuzz_fuzz_protocol_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_fuzz_fuzz_protocol_CFLAGS = \
	$(AM_CFLAGS) \
	$(FUZZ_CFLAGS)
tests_fuzz_fuzz_protocol_LDFLAGS = $(FUZZ_CFLAGS)

tests_fuzz_fuzz_ring_SOURCES = \
	src/autostart.c \
	src/autostart.h \
	src/channel.c \
	src/channel.h \
	src/client.c \
	src/client.h \
	src/client_error.c \
	src/client_views.c \
	src/consume.c \
	src/device/cuda.c \
	src/device/device.h \
	src/device/load.c \
	src/device/opencl.c \
	src/device/commit.c \
	src/device/register.c \
	src/device/release.c \
	src/device/state.c \
	src/error.c \
	src/fdpass.c \
	src/fdpass.h \
	src/handle.c \
	src/layout.h \
	src/peer_fetch.c \
	src/produce.c \
	src/protocol.c \
	src/protocol.h \
	src/queue.c \
	src/ring.h \
	src/seg.c \
	src/seg.h \
	src/wait.c \
	src/wait.h \
	src/wakeup.c \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_ring.c
tests_fuzz_fuzz_ring_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-DPINSHM_SBINDIR='"$(sbindir)"'
tests_fuzz_fuzz_ring_CFLAGS = \
	$(AM_CFLAGS) \
	$(FUZZ_CFLAGS)
tests_fuzz_fuzz_ring_LDFLAGS = $(FUZZ_CFLAGS)

# Longest inputs: a packet and a bit more, a config file, ops on a ring.
FUZZ_ARGS_config = -max_len=4096
FUZZ_ARGS_protocol = -max_len=4200
FUZZ_ARGS_ring = -max_len=2048

fuzz: tests/fuzz/fuzz_config tests/fuzz/fuzz_protocol tests/fuzz/fuzz_ring
	@status=0; \
	for t in $(FUZZ_TARGETS); do \
	  case $$t in \
	  config) args='$(FUZZ_ARGS_config)';; \
	  protocol) args='$(FUZZ_ARGS_protocol)';; \
	  ring) args='$(FUZZ_ARGS_ring)';; \
	  esac; \
	  work=$$(mktemp -d "$${TMPDIR:-/tmp}/pinshm-fuzz.XXXXXX") || exit 1; \
	  mkdir "$$work/corpus" "$$work/out" && \
	  cp $(srcdir)/tests/fuzz/corpus/$$t/* "$$work/corpus/" || exit 1; \
	  log=tests/fuzz/fuzz_$$t.log; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s (log: $$log)"; \
	  if (cd "$$work/out" && exec $(abs_builddir)/tests/fuzz/fuzz_$$t $$args \
	        -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	        -print_final_stats=1 "$$work/corpus") >$$log 2>&1; then \
	    res=PASS; \
	  else \
	    res=FAIL; status=1; \
	    rm -rf tests/fuzz/crashes-$$t; mkdir -p tests/fuzz/crashes-$$t; \
	    cp "$$work"/out/* tests/fuzz/crashes-$$t/ 2>/dev/null; \
	    tail -n 40 $$log; \
	    echo "fuzz_$$t: the input is in tests/fuzz/crashes-$$t/"; \
	  fi; \
	  echo ":test-result: $$res" >tests/fuzz/fuzz_$$t.trs; \
	  runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $$log); \
	  rate=$$(sed -n 's/^stat::average_exec_per_sec: *//p' $$log); \
	  echo "$$res: fuzz_$$t: $${runs:-?} executions, $${rate:-?}/s"; \
	  rm -rf "$$work"; \
	done; \
	exit $$status

else !ENABLE_FUZZING

fuzz:
	@echo "error: the fuzz targets are not built: configure with CC=clang --enable-fuzzing" >&2
	@exit 1

endif !ENABLE_FUZZING

clean-local:
	-rm -rf tests/fuzz/crashes-*
	-rm -f tests/fuzz/*.log tests/fuzz/*.trs

.PHONY: fuzz
