# tests/mpi/local.mk, included by tests/local.mk inside HAVE_CHECK: the MPI
# test programs and check_mpi. Paths are relative to the top of the tree.

# MPI: check_mpi runs the MPI test programs of tests/mpi under
# mpirun ($MPIRUN), without and with the plugin ($PINSHM_MPI_LIB). Those
# programs are not tests by themselves (each needs mpirun), so they are
# EXTRA_PROGRAMS that check_SCRIPTS builds before the tests run; they are
# built with $(CC) and Open MPI's flags, sanitizers included.
if HAVE_MPI

LONG_CHECKS += \
	tests/check_mpi

# tests/check_coll.sh: the collectives' benchmark in a quick run, and a
# dead rank in a collective (tests/mpi/coll_dead).
TESTS += \
	tests/check_coll.sh

MPI_TEST_BINS = \
	tests/mpi/coll_basic \
	tests/mpi/coll_commfree \
	tests/mpi/coll_mismatch \
	tests/mpi/coll_hier \
	tests/mpi/coll_a2a_hier \
	tests/mpi/coll_nb_hier \
	tests/mpi/coll_truncate \
	tests/mpi/coll_scan \
	tests/mpi/coll_v \
	tests/mpi/coll_nb \
	tests/mpi/coll_random \
	tests/mpi/coll_nb_first \
	tests/mpi/coll_kept \
	tests/mpi/coll_dead \
	tests/mpi/p2p_address \
	tests/mpi/p2p_basic \
	tests/mpi/p2p_comms \
	tests/mpi/p2p_complete \
	tests/mpi/p2p_crossing \
	tests/mpi/p2p_datatypes \
	tests/mpi/p2p_distgraph \
	tests/mpi/p2p_large \
	tests/mpi/p2p_modes \
	tests/mpi/p2p_negcount \
	tests/mpi/p2p_order \
	tests/mpi/p2p_persistent \
	tests/mpi/p2p_pieces \
	tests/mpi/p2p_probe \
	tests/mpi/p2p_random \
	tests/mpi/p2p_threads
EXTRA_PROGRAMS += $(MPI_TEST_BINS)
check_SCRIPTS += $(MPI_TEST_BINS)
CLEANFILES += $(MPI_TEST_BINS)

# A tool's library (it defines MPI_Send), preloaded before the plugin by
# check_mpi: shared (-rpath), never installed.
check_LTLIBRARIES += \
	tests/mpi/libwrap_send.la
tests_mpi_libwrap_send_la_SOURCES = tests/mpi/wrap_send.c
tests_mpi_libwrap_send_la_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_libwrap_send_la_LIBADD = $(MPI_LIBS)
tests_mpi_libwrap_send_la_LDFLAGS = -module -avoid-version -rpath $(abs_builddir)/tests/mpi

tests_check_mpi_SOURCES = \
	tests/check_mpi.c \
	tests/daemonutil.c \
	tests/daemonutil.h \
	tests/testutil.c \
	tests/testutil.h
tests_check_mpi_CPPFLAGS = \
	$(TESTS_CPPFLAGS) \
	-DMPI_TESTS_DIR='"$(abs_top_builddir)/tests/mpi"' \
	$(MPI_FORTRAN_CPPFLAGS)
tests_check_mpi_CFLAGS = $(TESTS_CFLAGS)
tests_check_mpi_LDADD = $(TESTS_LDADD)

MPI_TEST_CFLAGS = \
	$(AM_CFLAGS) \
	$(MPI_CFLAGS)
tests_mpi_coll_basic_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_basic.c
tests_mpi_coll_basic_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_basic_LDADD = $(MPI_LIBS)
tests_mpi_coll_commfree_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_commfree.c
tests_mpi_coll_commfree_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_commfree_LDADD = $(MPI_LIBS)
tests_mpi_coll_hier_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_hier.c
tests_mpi_coll_hier_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_hier_LDADD = $(MPI_LIBS) -lm
tests_mpi_coll_a2a_hier_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_a2a_hier.c
tests_mpi_coll_a2a_hier_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_a2a_hier_LDADD = $(MPI_LIBS)
tests_mpi_coll_nb_hier_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_nb_hier.c
tests_mpi_coll_nb_hier_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_nb_hier_LDADD = $(MPI_LIBS)
tests_mpi_coll_truncate_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_truncate.c
tests_mpi_coll_truncate_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_truncate_LDADD = $(MPI_LIBS)
tests_mpi_coll_mismatch_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_mismatch.c
tests_mpi_coll_mismatch_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_mismatch_LDADD = $(MPI_LIBS)
tests_mpi_coll_scan_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_scan.c
tests_mpi_coll_scan_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_scan_LDADD = $(MPI_LIBS)
tests_mpi_coll_v_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_v.c
tests_mpi_coll_v_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_v_LDADD = $(MPI_LIBS)
tests_mpi_coll_nb_SOURCES = tests/mpi/mpitest.h tests/mpi/coll_nb.c
tests_mpi_coll_nb_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_nb_LDADD = $(MPI_LIBS)
tests_mpi_coll_random_SOURCES = tests/mpi/mpitest.h tests/mpi/coll_random.c
tests_mpi_coll_random_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_random_LDADD = $(MPI_LIBS)
tests_mpi_coll_nb_first_SOURCES = tests/mpi/mpitest.h tests/mpi/colltest.h tests/mpi/coll_nb_first.c
tests_mpi_coll_nb_first_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_nb_first_LDADD = $(MPI_LIBS)
tests_mpi_coll_kept_SOURCES = tests/mpi/colltest.h tests/mpi/mpitest.h tests/mpi/coll_kept.c
tests_mpi_coll_kept_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_kept_LDADD = $(MPI_LIBS)
tests_mpi_coll_dead_SOURCES = tests/mpi/coll_dead.c
tests_mpi_coll_dead_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_coll_dead_LDADD = $(MPI_LIBS)
tests_mpi_p2p_basic_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_basic.c
tests_mpi_p2p_basic_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_basic_LDADD = $(MPI_LIBS)
tests_mpi_p2p_comms_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_comms.c
tests_mpi_p2p_comms_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_comms_LDADD = $(MPI_LIBS)
tests_mpi_p2p_complete_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_complete.c
tests_mpi_p2p_complete_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_complete_LDADD = $(MPI_LIBS)
tests_mpi_p2p_crossing_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_crossing.c
tests_mpi_p2p_crossing_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_crossing_LDADD = $(MPI_LIBS)
tests_mpi_p2p_datatypes_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_datatypes.c
tests_mpi_p2p_datatypes_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_datatypes_LDADD = $(MPI_LIBS)
tests_mpi_p2p_pieces_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_pieces.c
tests_mpi_p2p_pieces_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_pieces_LDADD = $(MPI_LIBS)
tests_mpi_p2p_distgraph_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_distgraph.c
tests_mpi_p2p_distgraph_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_distgraph_LDADD = $(MPI_LIBS)
tests_mpi_p2p_threads_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_threads.c
tests_mpi_p2p_threads_CFLAGS = $(MPI_TEST_CFLAGS) -pthread
tests_mpi_p2p_threads_LDADD = $(MPI_LIBS) -lpthread
tests_mpi_p2p_large_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_large.c
tests_mpi_p2p_large_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_large_LDADD = $(MPI_LIBS)
tests_mpi_p2p_modes_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_modes.c
tests_mpi_p2p_modes_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_modes_LDADD = $(MPI_LIBS)
tests_mpi_p2p_negcount_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_negcount.c
tests_mpi_p2p_negcount_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_negcount_LDADD = $(MPI_LIBS)
tests_mpi_p2p_order_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_order.c
tests_mpi_p2p_order_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_order_LDADD = $(MPI_LIBS)
tests_mpi_p2p_persistent_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_persistent.c
tests_mpi_p2p_persistent_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_persistent_LDADD = $(MPI_LIBS)
# Not position-independent: its pointers to MPI calls are PLT entries.
tests_mpi_p2p_address_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_address.c
tests_mpi_p2p_address_CFLAGS = $(MPI_TEST_CFLAGS) -fno-pie
tests_mpi_p2p_address_LDFLAGS = -no-pie
tests_mpi_p2p_address_LDADD = $(MPI_LIBS)
tests_mpi_p2p_probe_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_probe.c
tests_mpi_p2p_probe_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_probe_LDADD = $(MPI_LIBS)
tests_mpi_p2p_random_SOURCES = tests/mpi/mpitest.h tests/mpi/p2p_random.c
tests_mpi_p2p_random_CFLAGS = $(MPI_TEST_CFLAGS)
tests_mpi_p2p_random_LDADD = $(MPI_LIBS)

# The Fortran programs (mpif.h, `use mpi`, `use mpi_f08`; the plugin carries
# them through src/mpi/fortran.c) and mixed_cf (a C main program and Fortran
# on the same messages), when configure found a working mpifort. They are
# built with $(MPIFORT) (and $(CC) for mixed_cf's C half), without the
# sanitizers: the plugin they load is what check_mpi tests.
if HAVE_MPIFORT
MPI_FORTRAN_CPPFLAGS = -DHAVE_MPIFORT_TEST
MPI_FORTRAN_BINS = \
	tests/mpi/f_coll \
	tests/mpi/f_collv \
	tests/mpi/f_coll_nb \
	tests/mpi/f_comms \
	tests/mpi/f_idup \
	tests/mpi/f_idup08 \
	tests/mpi/f_idup_inter \
	tests/mpi/f_negcount \
	tests/mpi/f_p2p \
	tests/mpi/f_p2p08 \
	tests/mpi/f_sendrecv \
	tests/mpi/idup_c \
	tests/mpi/mixed_cf
check_SCRIPTS += $(MPI_FORTRAN_BINS)
CLEANFILES += \
	$(MPI_FORTRAN_BINS) \
	tests/mpi/f_negcount_handler.mod \
	tests/mpi/mixed_cf-c.o

tests/mpi/f_coll: $(srcdir)/tests/mpi/f_coll.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_coll.f90
tests/mpi/f_collv: $(srcdir)/tests/mpi/f_collv.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_collv.f90
tests/mpi/f_coll_nb: $(srcdir)/tests/mpi/f_coll_nb.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_coll_nb.f90
tests/mpi/f_comms: $(srcdir)/tests/mpi/f_comms.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_comms.f90
tests/mpi/f_idup: $(srcdir)/tests/mpi/f_idup.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_idup.f90
tests/mpi/f_idup08: $(srcdir)/tests/mpi/f_idup08.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_idup08.f90
tests/mpi/f_idup_inter: $(srcdir)/tests/mpi/f_idup_inter.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_idup_inter.f90
# f_negcount has a module: compiled in tests/mpi, where its .mod is written.
tests/mpi/f_negcount: $(srcdir)/tests/mpi/f_negcount.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	cd tests/mpi && $(MPIFORT) -Wall -o f_negcount $(abs_srcdir)/tests/mpi/f_negcount.f90
tests/mpi/f_p2p: $(srcdir)/tests/mpi/f_p2p.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_p2p.f90
tests/mpi/f_p2p08: $(srcdir)/tests/mpi/f_p2p08.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_p2p08.f90
tests/mpi/f_sendrecv: $(srcdir)/tests/mpi/f_sendrecv.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_sendrecv.f90
# idup_c: the C half of an MPMD job with f_idup (built here: check_mpi runs
# it only with its Fortran half), with the sanitizers like the C programs.
tests/mpi/idup_c: $(srcdir)/tests/mpi/idup_c.c $(srcdir)/tests/mpi/mpitest.h
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(CC) $(AM_CFLAGS) $(MPI_CFLAGS) $(CFLAGS) -o $@ $(srcdir)/tests/mpi/idup_c.c $(MPI_LIBS)
tests/mpi/mixed_cf: $(srcdir)/tests/mpi/mixed_cf.c $(srcdir)/tests/mpi/mpitest.h $(srcdir)/tests/mpi/f_mixed.f90
	$(AM_V_GEN)$(MKDIR_P) tests/mpi && \
	$(CC) $(AM_CFLAGS) $(MPI_CFLAGS) -c -o tests/mpi/mixed_cf-c.o $(srcdir)/tests/mpi/mixed_cf.c && \
	$(MPIFORT) -Wall -o $@ $(srcdir)/tests/mpi/f_mixed.f90 tests/mpi/mixed_cf-c.o
endif HAVE_MPIFORT

endif HAVE_MPI
