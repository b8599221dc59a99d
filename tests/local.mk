# tests/local.mk, included by Makefile.am: the Check tests and the scripts
# that make check runs. Paths are relative to the top of the tree.

# ---------------------------------------------------------------------------
# Tests (Check). `make check` runs every program in TESTS with the parallel
# harness; each writes tests/<name>.log and tests/<name>.trs.

AM_TESTS_ENVIRONMENT = \
	CK_DEFAULT_TIMEOUT=120; export CK_DEFAULT_TIMEOUT; \
	PINSHMD=$(abs_top_builddir)/daemon/pinshmd; export PINSHMD; \
	PINSHMCTL=$(abs_top_builddir)/clients/pinshmctl; export PINSHMCTL; \
	PINSHM_DEMO=$(abs_top_builddir)/clients/pinshm-demo; export PINSHM_DEMO; \
	PINSHM_FEED=$(abs_top_builddir)/clients/pinshm-feed; export PINSHM_FEED; \
	PINSHM_PERF=$(abs_top_builddir)/clients/pinshm-perf; export PINSHM_PERF; \
	PINSHM_MPI_COMPARE=$(abs_top_srcdir)/clients/pinshm-mpi-compare; export PINSHM_MPI_COMPARE; \
	MPIRUN='$(MPIRUN)'; export MPIRUN; \
	PINSHM_MPI_LIB=$(abs_top_builddir)/src/mpi/.libs/libpinshm_mpi.so; export PINSHM_MPI_LIB; \
	PINSHM_CC='$(CC) $(CPPFLAGS) $(AM_CFLAGS) $(CFLAGS) $(LDFLAGS)'; export PINSHM_CC; \
	PINSHM_INSN_BUILD=$(PINSHM_INSN_BUILD); export PINSHM_INSN_BUILD; \
	PINSHM_FAKE_CUDA=$(abs_top_builddir)/tests/.libs/libfake_cuda.so; export PINSHM_FAKE_CUDA; \
	PINSHM_FAKE_CUDA_FEED=$(abs_top_builddir)/tests/.libs/libfake_cuda_feed.so; export PINSHM_FAKE_CUDA_FEED; \
	PYTHON='$(PYTHON)'; export PYTHON; \
	PINSHM_PYTHONPATH=$(abs_top_builddir)/python/.libs:$(abs_top_srcdir)/python; export PINSHM_PYTHONPATH;

# Test scripts (tests/*.sh) run with the shell.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)

# Shared by every Check test program.
TESTS_CPPFLAGS = \
	-I$(top_srcdir)/include \
	-I$(top_srcdir)/src \
	-I$(top_srcdir)/tests
TESTS_CFLAGS = \
	$(AM_CFLAGS) \
	$(CHECK_CFLAGS)
TESTS_LDADD = \
	src/libpinshm-core.la \
	$(CHECK_LIBS)

if HAVE_CHECK

# The test that takes longest (check_mpi: tests/mpi/local.mk) comes first
# in TESTS, so that the parallel harness (make -j2) runs the others beside
# it rather than after it.
LONG_CHECKS =

check_PROGRAMS = \
	$(LONG_CHECKS) \
	tests/check_corrupt \
	tests/check_crash \
	tests/check_daemon \
	tests/check_demo \
	tests/check_device \
	tests/check_feed \
	tests/check_fuzz_config \
	tests/check_fuzz_protocol \
	tests/check_fuzz_ring \
	tests/check_hostile \
	tests/check_isolation \
	tests/check_lifecycle \
	tests/check_notify \
	tests/check_perf \
	tests/check_pinshmctl \
	tests/check_pool \
	tests/check_protocol \
	tests/check_ring \
	tests/check_segment \
	tests/check_soak \
	tests/check_stress \
	tests/check_wakeup \
	tests/gpu/check_cuda

# tests/check_readme.sh: the README's C example, built and run.
# tests/check_man.sh: every function of the headers in one section-3 page,
# and every reference of the manual to a pinshm page found.
# tests/check_cycles.sh: no file of libpinshm calls into a file that calls
# back into it.
# tests/check_insn.sh: instructions per message of the library's own code
# in tests/insn_loop (built before the tests run; not a test itself),
# against tests/insn-baseline.
TESTS = \
	$(check_PROGRAMS) \
	tests/check_cycles.sh \
	tests/check_man.sh \
	tests/check_readme.sh \
	tests/check_insn.sh

# tests/python/run: the Python module's tests with pytest (exit 77, skipped,
# where the module is not built or pytest or numpy is missing).
TESTS += \
	tests/python/run

EXTRA_PROGRAMS = tests/insn_loop
check_SCRIPTS = tests/insn_loop
CLEANFILES += tests/insn_loop
tests_insn_loop_SOURCES = tests/insn_loop.c
tests_insn_loop_CPPFLAGS = -I$(top_srcdir)/include
tests_insn_loop_LDADD = src/libpinshm.la
tests_insn_loop_LDFLAGS = -no-install

# Devices: the OpenCL backend for real (where an OpenCL platform is
# installed) and the CUDA backend against tests/fake_cuda.c, a double of
# libcuda.so.1 built as a module that the library loads at run time.
check_LTLIBRARIES = tests/libfake_cuda.la
tests_libfake_cuda_la_SOURCES = \
	tests/fake_cuda.c \
	tests/fake_cuda.h
tests_libfake_cuda_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

# pinshm-feed's CUDA backend against a double of the driver that runs its
# kernels as C (check_feed loads it through PINSHM_CUDA_LIBRARY).
check_LTLIBRARIES += tests/libfake_cuda_feed.la
tests_libfake_cuda_feed_la_SOURCES = tests/fake_cuda_feed.c
tests_libfake_cuda_feed_la_CPPFLAGS = -I$(top_srcdir)/include -I$(top_srcdir)/clients
tests_libfake_cuda_feed_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

tests_check_device_SOURCES = \
	tests/check_device.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/fake_cuda.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_device_CPPFLAGS = $(TESTS_CPPFLAGS) $(OPENCL_CPPFLAGS)
tests_check_device_CFLAGS = $(TESTS_CFLAGS)
tests_check_device_LDADD = $(TESTS_LDADD) $(OPENCL_LIBS)
if HAVE_OPENCL_LIB
tests_check_device_CPPFLAGS += -DHAVE_OPENCL_TEST
endif

# The CUDA backend against the real driver (tests/gpu/run runs them on a
# GPU machine; without a driver or a GPU they exit 77, skipped).
tests_gpu_check_cuda_SOURCES = tests/gpu/check_cuda.c
tests_gpu_check_cuda_CPPFLAGS = -I$(top_srcdir)/include
tests_gpu_check_cuda_LDADD = src/libpinshm-core.la
# What the machine allows (tests/gpu/run runs it first; not a test).
EXTRA_PROGRAMS += tests/gpu/probe
check_SCRIPTS += tests/gpu/probe
CLEANFILES += tests/gpu/probe
tests_gpu_probe_SOURCES = tests/gpu/probe.c

# Runs the pinshm-feed just built ($PINSHM_FEED) with a pinshmd of its own.
tests_check_feed_SOURCES = \
	tests/check_feed.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_feed_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_feed_CFLAGS = $(TESTS_CFLAGS)
tests_check_feed_LDADD = $(TESTS_LDADD)

tests_check_corrupt_SOURCES = \
	tests/check_corrupt.c \
	tests/testutil.c \
	tests/testutil.h
tests_check_corrupt_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_corrupt_CFLAGS = $(TESTS_CFLAGS)
tests_check_corrupt_LDADD = $(TESTS_LDADD)

# The wire format, byte for byte (golden packets), and the decoder's checks.
tests_check_protocol_SOURCES = tests/check_protocol.c
tests_check_protocol_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_protocol_CFLAGS = $(TESTS_CFLAGS)
tests_check_protocol_LDADD = $(TESTS_LDADD)

# kill -9 loops against a real pinshmd (PINSHM_CRASH_KILLS, PINSHM_CRASH_SEED).
tests_check_crash_SOURCES = \
	tests/check_crash.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_crash_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_crash_CFLAGS = $(TESTS_CFLAGS)
tests_check_crash_LDADD = $(TESTS_LDADD)

# Links the configuration to check the defaults it derives.
tests_check_hostile_SOURCES = \
	daemon/config.c \
	daemon/config.h \
	daemon/cred.c \
	daemon/cred.h \
	daemon/names.c \
	daemon/names.h \
	tests/check_hostile.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_hostile_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-I$(top_srcdir)/daemon
tests_check_hostile_CFLAGS = \
	$(TESTS_CFLAGS) \
	$(INIH_CFLAGS)
tests_check_hostile_LDADD = \
	$(TESTS_LDADD) \
	$(INIH_LIBS)

# Needs root (exit 77, skipped, otherwise): users, groups and namespaces.
tests_check_isolation_SOURCES = \
	tests/check_isolation.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_isolation_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_isolation_CFLAGS = $(TESTS_CFLAGS)
tests_check_isolation_LDADD = $(TESTS_LDADD)

tests_check_segment_SOURCES = \
	daemon/log.c \
	daemon/numa.c \
	daemon/segment.c \
	tests/check_segment.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_segment_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_segment_CFLAGS = $(TESTS_CFLAGS)
tests_check_segment_LDADD = $(TESTS_LDADD) $(NUMA_LIBS)

tests_check_daemon_SOURCES = \
	tests/check_daemon.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_daemon_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_daemon_CFLAGS = $(TESTS_CFLAGS)
tests_check_daemon_LDADD = $(TESTS_LDADD)

# Runs the pinshm-demo just built ($PINSHM_DEMO).
tests_check_demo_SOURCES = \
	tests/check_demo.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_demo_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_demo_CFLAGS = $(TESTS_CFLAGS)
tests_check_demo_LDADD = $(TESTS_LDADD)

tests_check_lifecycle_SOURCES = \
	tests/check_lifecycle.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_lifecycle_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_lifecycle_CFLAGS = $(TESTS_CFLAGS)
tests_check_lifecycle_LDADD = $(TESTS_LDADD)

tests_check_notify_SOURCES = \
	tests/check_notify.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_notify_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_notify_CFLAGS = $(TESTS_CFLAGS)
tests_check_notify_LDADD = $(TESTS_LDADD)

# Runs the pinshm-perf just built ($PINSHM_PERF), and pinshm-mpi-compare
# ($PINSHM_MPI_COMPARE) with a stand-in for mpirun; links the plot module
# to look for gnuplot as they do.
tests_check_perf_SOURCES = \
	clients/perf_plot.c \
	clients/perf_plot.h \
	clients/perf_stats.c \
	clients/perf_stats.h \
	tests/check_perf.c \
	tests/testutil.c \
	tests/testutil.h
tests_check_perf_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-I$(top_srcdir)/clients
tests_check_perf_CFLAGS = $(TESTS_CFLAGS)
tests_check_perf_LDADD = $(TESTS_LDADD) -lm

# Runs the pinshmctl just built ($PINSHMCTL); links its output module to
# test it directly.
tests_check_pinshmctl_SOURCES = \
	clients/ctl_output.c \
	clients/ctl_output.h \
	tests/check_pinshmctl.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_pinshmctl_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-I$(top_srcdir)/clients
tests_check_pinshmctl_CFLAGS = $(TESTS_CFLAGS)
tests_check_pinshmctl_LDADD = $(TESTS_LDADD)

# Links the pool and the segments to drive them step by step; starts pinshmd too.
tests_check_pool_SOURCES = \
	daemon/dying.c \
	daemon/log.c \
	daemon/numa.c \
	daemon/pool.c \
	daemon/segment.c \
	tests/check_pool.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_pool_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_pool_CFLAGS = $(TESTS_CFLAGS)
tests_check_pool_LDADD = $(TESTS_LDADD) $(NUMA_LIBS)

tests_check_ring_SOURCES = \
	tests/check_ring.c \
	tests/testutil.c \
	tests/testutil.h
tests_check_ring_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_ring_CFLAGS = $(TESTS_CFLAGS)
tests_check_ring_LDADD = $(TESTS_LDADD)

# PINSHM_SOAK_SECONDS: how long the producers send (default 30).
tests_check_soak_SOURCES = \
	tests/check_soak.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_soak_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_soak_CFLAGS = $(TESTS_CFLAGS)
tests_check_soak_LDADD = $(TESTS_LDADD)

tests_check_wakeup_SOURCES = \
	tests/check_wakeup.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_wakeup_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_wakeup_CFLAGS = $(TESTS_CFLAGS)
tests_check_wakeup_LDADD = $(TESTS_LDADD)

tests_check_stress_SOURCES = \
	tests/check_stress.c \
	tests/testutil.c \
	tests/testutil.h
tests_check_stress_CPPFLAGS = $(TESTS_CPPFLAGS)
tests_check_stress_CFLAGS = $(TESTS_CFLAGS)
tests_check_stress_LDADD = $(TESTS_LDADD)

# Each fuzz target replayed on its corpus (tests/fuzz/replay.c): the seeds
# and past crashes, as regression tests, in every build.
tests_check_fuzz_config_SOURCES = \
	daemon/config.c \
	daemon/config.h \
	daemon/cred.c \
	daemon/cred.h \
	daemon/names.c \
	daemon/names.h \
	src/protocol.c \
	src/protocol.h \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_config.c \
	tests/fuzz/replay.c
tests_check_fuzz_config_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-I$(top_srcdir)/daemon \
	-DFUZZ_CORPUS='"$(abs_top_srcdir)/tests/fuzz/corpus/config"'
tests_check_fuzz_config_CFLAGS = \
	$(TESTS_CFLAGS) \
	$(INIH_CFLAGS)
tests_check_fuzz_config_LDADD = \
	$(CHECK_LIBS) \
	$(INIH_LIBS)

tests_check_fuzz_protocol_SOURCES = \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_protocol.c \
	tests/fuzz/replay.c
tests_check_fuzz_protocol_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-DFUZZ_CORPUS='"$(abs_top_srcdir)/tests/fuzz/corpus/protocol"'
tests_check_fuzz_protocol_CFLAGS = $(TESTS_CFLAGS)
tests_check_fuzz_protocol_LDADD = $(TESTS_LDADD)

tests_check_fuzz_ring_SOURCES = \
	tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_ring.c \
	tests/fuzz/replay.c
tests_check_fuzz_ring_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-DFUZZ_CORPUS='"$(abs_top_srcdir)/tests/fuzz/corpus/ring"'
tests_check_fuzz_ring_CFLAGS = $(TESTS_CFLAGS)
tests_check_fuzz_ring_LDADD = $(TESTS_LDADD)

include $(srcdir)/tests/mpi/local.mk

else !HAVE_CHECK

check-local:
	@echo "error: Check >= 0.15 was not found when configure ran, so the tests" >&2
	@echo "error: cannot be built. Install Check (Debian: check libsubunit-dev)" >&2
	@echo "error: and run configure again." >&2
	@exit 1

endif !HAVE_CHECK

