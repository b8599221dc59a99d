! f_p2p.f90 - every point-to-point call from Fortran (`use mpi`), carried
! by the plugin's Fortran layer (src/mpi/fortran.c).
!
! Each pair of ranks in turn (peer = ieor(rank, d), d = 1 .. size - 1, so
! that with pretend nodes some pairs cross to the MPI library): blocking,
! synchronous, buffered (Buffer_attach/detach) and ready sends; Sendrecv and
! Sendrecv_replace; Isend, Issend, Ibsend, Irsend and Irecv completed with
! Waitany, Waitsome, Testany, Testsome, Testall, Test and Waitall (1-based
! indices, requests set to MPI_REQUEST_NULL); persistent requests with
! Start and Startall (they stay valid) and Request_get_status; Probe,
! Iprobe, Mprobe, Improbe, Mrecv, Imrecv; MPI_ANY_SOURCE and MPI_ANY_TAG;
! MPI_PROC_NULL; a truncated receive (ierr MPI_ERR_TRUNCATE under
! MPI_ERRORS_RETURN); a derived type; MPI_BOTTOM with an absolute address;
! Cancel and Request_free; a Waitall over more requests than fortran.c
! keeps on its stack, mixing the plugin's, the library's (Ibarrier) and
! MPI_REQUEST_NULL.  Statuses: source, tag and MPI_Get_count.
! MPI_Abort with a message on any failure; "f_p2p: ok" from rank 0.
program f_p2p
  use mpi
  implicit none
  integer, parameter :: n = 300, big = 40000
  integer :: ierr, rank, nprocs, peer, d
  logical :: lower

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  if (mod(nprocs, 2) /= 0) call fail('needs an even number of ranks', 0)

  do d = 1, nprocs - 1
    peer = ieor(rank, d)
    lower = rank < peer
    call blocking()
    call buffered()
    call nonblocking()
    call tests()
    call arrays()
    call persistent()
    call probes()
    call special()
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end do

  if (rank == 0) print '(a, i0, a)', 'f_p2p: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  subroutine fill(buf, cnt, what)
    integer, intent(in) :: cnt, what
    integer, intent(out) :: buf(cnt)
    integer :: i
    do i = 1, cnt
      buf(i) = val(rank, peer, what, i)
    end do
  end subroutine fill

  ! buf holds what peer sent for @what.
  subroutine expect(buf, cnt, what, where)
    integer, intent(in) :: cnt, what, buf(cnt)
    character(len=*), intent(in) :: where
    integer :: i
    do i = 1, cnt
      if (buf(i) /= val(peer, rank, what, i)) call fail(where // ': wrong data', what)
    end do
  end subroutine expect

  subroutine expect_status(st, source, tag, cnt, where)
    integer, intent(in) :: st(MPI_STATUS_SIZE), source, tag, cnt
    character(len=*), intent(in) :: where
    integer :: got, e
    if (st(MPI_SOURCE) /= source) call fail(where // ': wrong MPI_SOURCE', st(MPI_SOURCE))
    if (st(MPI_TAG) /= tag) call fail(where // ': wrong MPI_TAG', st(MPI_TAG))
    call MPI_Get_count(st, MPI_INTEGER, got, e)
    if (got /= cnt) call fail(where // ': wrong MPI_Get_count', got)
  end subroutine expect_status

  subroutine check(e, where)
    integer, intent(in) :: e
    character(len=*), intent(in) :: where
    if (e /= MPI_SUCCESS) call fail(where // ': ierr', e)
  end subroutine check

  ! Send, Ssend, Rsend, Recv (ANY_SOURCE/ANY_TAG), Sendrecv, Sendrecv_replace.
  subroutine blocking()
    integer, allocatable :: sbuf(:), rbuf(:)
    integer :: st(MPI_STATUS_SIZE), req, e
    allocate(sbuf(big), rbuf(big))
    call fill(sbuf, big, 1)
    rbuf = -1
    if (lower) then
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, 11, MPI_COMM_WORLD, e)
      call check(e, 'Send')
      call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 11, MPI_COMM_WORLD, st, e)
    else
      call MPI_Recv(rbuf, n, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, st, e)
      call check(e, 'Recv')
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, 11, MPI_COMM_WORLD, e)
    end if
    call check(e, 'Send/Recv')
    call expect(rbuf, n, 1, 'Send/Recv')
    call expect_status(st, peer, 11, n, 'Recv')

    ! Synchronous, and large (past the eager size).
    rbuf = -1
    if (lower) then
      call MPI_Ssend(sbuf, big, MPI_INTEGER, peer, 12, MPI_COMM_WORLD, e)
      call MPI_Recv(rbuf, big, MPI_INTEGER, peer, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE, e)
    else
      call MPI_Recv(rbuf, big, MPI_INTEGER, MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, st, e)
      call expect_status(st, peer, 12, big, 'Recv after Ssend')
      call MPI_Ssend(sbuf, big, MPI_INTEGER, peer, 12, MPI_COMM_WORLD, e)
    end if
    call check(e, 'Ssend')
    call expect(rbuf, big, 1, 'Ssend')

    ! Ready: the receive is posted before the peer hears of it.
    rbuf = -1
    call MPI_Irecv(rbuf, n, MPI_INTEGER, peer, 13, MPI_COMM_WORLD, req, e)
    call MPI_Sendrecv(0, 0, MPI_INTEGER, peer, 14, 0, 0, MPI_INTEGER, peer, 14, MPI_COMM_WORLD, st, e)
    call expect_status(st, peer, 14, 0, 'Sendrecv (empty)')
    call MPI_Rsend(sbuf, n, MPI_INTEGER, peer, 13, MPI_COMM_WORLD, e)
    call check(e, 'Rsend')
    call MPI_Wait(req, st, e)
    call check(e, 'Wait (Rsend)')
    if (req /= MPI_REQUEST_NULL) call fail('Wait left the request', req)
    call expect(rbuf, n, 1, 'Rsend')
    call expect_status(st, peer, 13, n, 'Rsend')

    rbuf = -1
    call MPI_Sendrecv(sbuf, n, MPI_INTEGER, peer, 15, rbuf, big, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, &
                      MPI_COMM_WORLD, st, e)
    call check(e, 'Sendrecv')
    call expect(rbuf, n, 1, 'Sendrecv')
    call expect_status(st, peer, 15, n, 'Sendrecv')

    rbuf(1:n) = sbuf(1:n)
    call MPI_Sendrecv_replace(rbuf, n, MPI_INTEGER, peer, 16, peer, 16, MPI_COMM_WORLD, st, e)
    call check(e, 'Sendrecv_replace')
    call expect(rbuf, n, 1, 'Sendrecv_replace')
    call expect_status(st, peer, 16, n, 'Sendrecv_replace')
    deallocate(sbuf, rbuf)
  end subroutine blocking

  ! Bsend, Ibsend, Bsend_init with an attached buffer; Buffer_detach waits.
  subroutine buffered()
    integer :: sbuf(n), rbuf(n, 3), st(MPI_STATUS_SIZE), req, preq, e, size, k
    integer, allocatable :: bbuf(:)
    integer :: bytes
    bytes = 3 * (4 * n + MPI_BSEND_OVERHEAD)
    allocate(bbuf(bytes / 4 + 1))
    call MPI_Buffer_attach(bbuf, bytes, e)
    call check(e, 'Buffer_attach')
    call fill(sbuf, n, 2)
    rbuf = -1
    call MPI_Bsend(sbuf, n, MPI_INTEGER, peer, 21, MPI_COMM_WORLD, e)
    call check(e, 'Bsend')
    call MPI_Ibsend(sbuf, n, MPI_INTEGER, peer, 22, MPI_COMM_WORLD, req, e)
    call check(e, 'Ibsend')
    call MPI_Bsend_init(sbuf, n, MPI_INTEGER, peer, 23, MPI_COMM_WORLD, preq, e)
    call MPI_Start(preq, e)
    call check(e, 'Start (Bsend_init)')
    do k = 1, 3
      call MPI_Recv(rbuf(1, k), n, MPI_INTEGER, peer, 20 + k, MPI_COMM_WORLD, st, e)
      call expect(rbuf(1, k), n, 2, 'buffered')
      call expect_status(st, peer, 20 + k, n, 'buffered')
    end do
    call MPI_Wait(req, MPI_STATUS_IGNORE, e)
    if (req /= MPI_REQUEST_NULL) call fail('Wait (Ibsend) left the request', req)
    call MPI_Wait(preq, MPI_STATUS_IGNORE, e)
    if (preq == MPI_REQUEST_NULL) call fail('Wait freed a persistent request', 0)
    call MPI_Request_free(preq, e)
    if (preq /= MPI_REQUEST_NULL) call fail('Request_free left the request', preq)
    call MPI_Buffer_detach(bbuf, size, e)
    call check(e, 'Buffer_detach')
    if (size /= bytes) call fail('Buffer_detach: wrong size', size)
    deallocate(bbuf)
  end subroutine buffered

  ! Irecv x4 then Isend, Issend, Irsend, Isend; Waitany and Waitsome.
  subroutine nonblocking()
    integer :: sbuf(n), rbuf(n, 4), rq(4), sq(4), st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 4)
    integer :: idx(4), seen(4), i, k, outcount, done, e
    call fill(sbuf, n, 3)
    rbuf = -1
    do k = 1, 4
      call MPI_Irecv(rbuf(1, k), n, MPI_INTEGER, peer, 30 + k, MPI_COMM_WORLD, rq(k), e)
      call check(e, 'Irecv')
    end do
    call MPI_Sendrecv(0, 0, MPI_INTEGER, peer, 39, 0, 0, MPI_INTEGER, peer, 39, MPI_COMM_WORLD, st, e)
    call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 31, MPI_COMM_WORLD, sq(1), e)
    call MPI_Issend(sbuf, n, MPI_INTEGER, peer, 32, MPI_COMM_WORLD, sq(2), e)
    call MPI_Irsend(sbuf, n, MPI_INTEGER, peer, 33, MPI_COMM_WORLD, sq(3), e)
    call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 34, MPI_COMM_WORLD, sq(4), e)
    call check(e, 'Isend')

    seen = 0
    do i = 1, 4
      call MPI_Waitany(4, rq, k, st, e)
      call check(e, 'Waitany')
      if (k < 1 .or. k > 4) call fail('Waitany: index not in 1..4', k)
      if (seen(k) /= 0) call fail('Waitany: an index twice', k)
      seen(k) = 1
      if (rq(k) /= MPI_REQUEST_NULL) call fail('Waitany left the request', k)
      call expect_status(st, peer, 30 + k, n, 'Waitany')
      call expect(rbuf(1, k), n, 3, 'Waitany')
    end do
    call MPI_Waitany(4, rq, k, st, e)
    if (k /= MPI_UNDEFINED) call fail('Waitany on nulls: index not MPI_UNDEFINED', k)

    done = 0
    do while (done < 4)
      call MPI_Waitsome(4, sq, outcount, idx, sts, e)
      call check(e, 'Waitsome')
      if (outcount < 1) call fail('Waitsome: outcount', outcount)
      do i = 1, outcount
        if (idx(i) < 1 .or. idx(i) > 4) call fail('Waitsome: index not in 1..4', idx(i))
        if (sq(idx(i)) /= MPI_REQUEST_NULL) call fail('Waitsome left the request', idx(i))
      end do
      done = done + outcount
    end do
    call MPI_Waitsome(4, sq, outcount, idx, sts, e)
    if (outcount /= MPI_UNDEFINED) call fail('Waitsome on nulls: outcount not MPI_UNDEFINED', outcount)
  end subroutine nonblocking

  ! Test, Testany, Testsome, Testall; Request_get_status; Cancel.
  subroutine tests()
    integer :: sbuf(n), rbuf(n, 3), cbuf(n), rq(3), sq(3), st(MPI_STATUS_SIZE), sts(MPI_STATUS_SIZE, 3)
    integer :: idx(3), k, outcount, got, e, creq
    logical :: flag, cancelled
    call fill(sbuf, n, 4)
    rbuf = -1
    do k = 1, 3
      call MPI_Irecv(rbuf(1, k), n, MPI_INTEGER, MPI_ANY_SOURCE, 40 + k, MPI_COMM_WORLD, rq(k), e)
    end do
    ! A receive that never matches: cancelled.
    call MPI_Irecv(cbuf, n, MPI_INTEGER, peer, 49, MPI_COMM_WORLD, creq, e)
    call MPI_Cancel(creq, e)
    call check(e, 'Cancel')
    call MPI_Wait(creq, st, e)
    call MPI_Test_cancelled(st, cancelled, e)
    if (.not. cancelled) call fail('Cancel: not cancelled', 0)
    if (creq /= MPI_REQUEST_NULL) call fail('Wait (cancelled) left the request', creq)

    do k = 1, 3
      call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 40 + k, MPI_COMM_WORLD, sq(k), e)
    end do

    ! Request_get_status does not free; Test then does.
    flag = .false.
    do while (.not. flag)
      call MPI_Request_get_status(rq(1), flag, st, e)
      call check(e, 'Request_get_status')
    end do
    if (rq(1) == MPI_REQUEST_NULL) call fail('Request_get_status freed the request', 0)
    call expect_status(st, peer, 41, n, 'Request_get_status')
    call MPI_Test(rq(1), flag, st, e)
    if (.not. flag .or. rq(1) /= MPI_REQUEST_NULL) call fail('Test after Request_get_status', 0)
    call expect_status(st, peer, 41, n, 'Test')
    call expect(rbuf(1, 1), n, 4, 'Test')

    flag = .false.
    do while (.not. flag)
      call MPI_Testany(3, rq, k, flag, st, e)
      call check(e, 'Testany')
    end do
    if (k /= 2 .and. k /= 3) call fail('Testany: index', k)
    if (rq(k) /= MPI_REQUEST_NULL) call fail('Testany left the request', k)
    call expect_status(st, peer, 40 + k, n, 'Testany')
    call expect(rbuf(1, k), n, 4, 'Testany')

    got = 0
    do while (got == 0)
      call MPI_Testsome(3, rq, outcount, idx, sts, e)
      call check(e, 'Testsome')
      if (outcount == MPI_UNDEFINED) call fail('Testsome: MPI_UNDEFINED with one active', 0)
      got = outcount
    end do
    if (got /= 1 .or. idx(1) /= 5 - k) call fail('Testsome: index', idx(1))
    call expect_status(sts(:, 1), peer, 40 + idx(1), n, 'Testsome')
    call expect(rbuf(1, idx(1)), n, 4, 'Testsome')
    if (any(rq /= MPI_REQUEST_NULL)) call fail('Testsome left a request', 0)

    flag = .false.
    do while (.not. flag)
      call MPI_Testall(3, sq, flag, MPI_STATUSES_IGNORE, e)
      call check(e, 'Testall')
    end do
    if (any(sq /= MPI_REQUEST_NULL)) call fail('Testall left a request', 0)
  end subroutine tests

  ! A long array of requests of all kinds.
  subroutine arrays()
    integer, parameter :: m = 12
    integer :: sbuf(n), rbuf(n, m), reqs(2 * m + 2), sts(MPI_STATUS_SIZE, 2 * m + 2), k, e
    call fill(sbuf, n, 8)
    rbuf = -1
    do k = 1, m
      call MPI_Irecv(rbuf(1, k), n, MPI_INTEGER, peer, 80 + k, MPI_COMM_WORLD, reqs(k), e)
    end do
    call MPI_Ibarrier(MPI_COMM_WORLD, reqs(m + 1), e)
    reqs(m + 2) = MPI_REQUEST_NULL
    do k = 1, m
      call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 80 + k, MPI_COMM_WORLD, reqs(m + 2 + k), e)
    end do
    call MPI_Waitall(2 * m + 2, reqs, sts, e)
    call check(e, 'Waitall (long)')
    if (any(reqs /= MPI_REQUEST_NULL)) call fail('Waitall (long) left a request', 0)
    do k = 1, m
      call expect(rbuf(1, k), n, 8, 'Waitall (long)')
      call expect_status(sts(:, k), peer, 80 + k, n, 'Waitall (long)')
    end do
    call expect_status(sts(:, m + 2), MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 'Waitall (long), MPI_REQUEST_NULL')
  end subroutine arrays

  ! Every persistent kind, Startall over rounds, Start, Waitall; they stay.
  subroutine persistent()
    integer :: sbuf(n, 4), rbuf(n, 4), sq(4), rq(4), sts(MPI_STATUS_SIZE, 4), st(MPI_STATUS_SIZE)
    integer :: k, round, e, bytes
    integer, allocatable :: bbuf(:)
    bytes = 4 * n + MPI_BSEND_OVERHEAD
    allocate(bbuf(bytes / 4 + 1))
    call MPI_Buffer_attach(bbuf, bytes, e)
    call MPI_Send_init(sbuf(1, 1), n, MPI_INTEGER, peer, 51, MPI_COMM_WORLD, sq(1), e)
    call MPI_Ssend_init(sbuf(1, 2), n, MPI_INTEGER, peer, 52, MPI_COMM_WORLD, sq(2), e)
    call MPI_Bsend_init(sbuf(1, 3), n, MPI_INTEGER, peer, 53, MPI_COMM_WORLD, sq(3), e)
    call MPI_Rsend_init(sbuf(1, 4), n, MPI_INTEGER, peer, 54, MPI_COMM_WORLD, sq(4), e)
    do k = 1, 4
      call MPI_Recv_init(rbuf(1, k), n, MPI_INTEGER, merge(MPI_ANY_SOURCE, peer, k == 2), 50 + k, &
                         MPI_COMM_WORLD, rq(k), e)
      call check(e, 'Recv_init')
    end do
    do round = 1, 3
      do k = 1, 4
        call fill(sbuf(1, k), n, 500 + round * 10 + k)
      end do
      rbuf = -1
      call MPI_Startall(4, rq, e)
      call check(e, 'Startall')
      call MPI_Sendrecv(0, 0, MPI_INTEGER, peer, 59, 0, 0, MPI_INTEGER, peer, 59, MPI_COMM_WORLD, st, e)
      if (round == 2) then
        do k = 1, 4
          call MPI_Start(sq(k), e)
          call check(e, 'Start')
        end do
      else
        call MPI_Startall(4, sq, e)
      end if
      call MPI_Waitall(4, rq, sts, e)
      call check(e, 'Waitall')
      call MPI_Waitall(4, sq, MPI_STATUSES_IGNORE, e)
      do k = 1, 4
        if (rq(k) == MPI_REQUEST_NULL .or. sq(k) == MPI_REQUEST_NULL) call fail('Waitall freed a persistent', k)
        call expect(rbuf(1, k), n, 500 + round * 10 + k, 'persistent')
        call expect_status(sts(:, k), peer, 50 + k, n, 'persistent')
      end do
    end do
    do k = 1, 4
      call MPI_Request_free(sq(k), e)
      call MPI_Request_free(rq(k), e)
      if (sq(k) /= MPI_REQUEST_NULL .or. rq(k) /= MPI_REQUEST_NULL) call fail('Request_free', k)
    end do
    call MPI_Buffer_detach(bbuf, bytes, e)
    deallocate(bbuf)
  end subroutine persistent

  ! Probe, Iprobe, Mprobe, Improbe, Mrecv, Imrecv.
  subroutine probes()
    integer :: sbuf(n), rbuf(n), st(MPI_STATUS_SIZE), msg, req, sq(4), k, e
    logical :: flag
    call fill(sbuf, n, 6)
    do k = 1, 4
      call MPI_Isend(sbuf, n - k, MPI_INTEGER, peer, 60 + k, MPI_COMM_WORLD, sq(k), e)
    end do

    call MPI_Probe(peer, 61, MPI_COMM_WORLD, st, e)
    call check(e, 'Probe')
    call expect_status(st, peer, 61, n - 1, 'Probe')
    rbuf = -1
    call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 61, MPI_COMM_WORLD, st, e)
    call expect(rbuf, n - 1, 6, 'Probe+Recv')

    flag = .false.
    do while (.not. flag)
      call MPI_Iprobe(MPI_ANY_SOURCE, 62, MPI_COMM_WORLD, flag, st, e)
      call check(e, 'Iprobe')
    end do
    call expect_status(st, peer, 62, n - 2, 'Iprobe')
    call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 62, MPI_COMM_WORLD, MPI_STATUS_IGNORE, e)

    rbuf = -1
    call MPI_Mprobe(peer, 63, MPI_COMM_WORLD, msg, st, e)
    call check(e, 'Mprobe')
    call expect_status(st, peer, 63, n - 3, 'Mprobe')
    call MPI_Mrecv(rbuf, n, MPI_INTEGER, msg, st, e)
    call check(e, 'Mrecv')
    if (msg /= MPI_MESSAGE_NULL) call fail('Mrecv left the message', msg)
    call expect(rbuf, n - 3, 6, 'Mrecv')
    call expect_status(st, peer, 63, n - 3, 'Mrecv')

    rbuf = -1
    flag = .false.
    do while (.not. flag)
      call MPI_Improbe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, flag, msg, st, e)
      call check(e, 'Improbe')
    end do
    call expect_status(st, peer, 64, n - 4, 'Improbe')
    call MPI_Imrecv(rbuf, n, MPI_INTEGER, msg, req, e)
    call check(e, 'Imrecv')
    call MPI_Wait(req, st, e)
    call expect(rbuf, n - 4, 6, 'Imrecv')
    call expect_status(st, peer, 64, n - 4, 'Imrecv')
    call MPI_Waitall(4, sq, MPI_STATUSES_IGNORE, e)
  end subroutine probes

  ! PROC_NULL, truncation, a derived type, MPI_BOTTOM, Request_free of an active send.
  subroutine special()
    integer :: sbuf(2 * n), rbuf(2 * n), st(MPI_STATUS_SIZE), vec, abs_type, req, e, cls
    integer(kind=MPI_ADDRESS_KIND) :: addr
    call MPI_Recv(rbuf, n, MPI_INTEGER, MPI_PROC_NULL, 1, MPI_COMM_WORLD, st, e)
    call check(e, 'Recv from PROC_NULL')
    call expect_status(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, 'Recv from PROC_NULL')
    call MPI_Send(sbuf, n, MPI_INTEGER, MPI_PROC_NULL, 1, MPI_COMM_WORLD, e)
    call check(e, 'Send to PROC_NULL')

    ! Truncation: ierr, not an abort.
    call fill(sbuf, 2 * n, 7)
    call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, e)
    if (lower) then
      call MPI_Send(sbuf, 10, MPI_INTEGER, peer, 71, MPI_COMM_WORLD, ierr)
      call MPI_Recv(rbuf, 5, MPI_INTEGER, peer, 71, MPI_COMM_WORLD, st, e)
    else
      call MPI_Recv(rbuf, 5, MPI_INTEGER, peer, 71, MPI_COMM_WORLD, st, e)
      call MPI_Send(sbuf, 10, MPI_INTEGER, peer, 71, MPI_COMM_WORLD, ierr)
    end if
    call MPI_Error_class(e, cls, ierr)
    if (cls /= MPI_ERR_TRUNCATE) call fail('truncated Recv: ierr class not MPI_ERR_TRUNCATE', cls)
    call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL, e)

    ! Every other integer, received contiguous.
    call MPI_Type_vector(n, 1, 2, MPI_INTEGER, vec, e)
    call MPI_Type_commit(vec, e)
    rbuf = -1
    call MPI_Sendrecv(sbuf, 1, vec, peer, 72, rbuf, n, MPI_INTEGER, peer, 72, MPI_COMM_WORLD, st, e)
    call check(e, 'Sendrecv (vector)')
    call expect_status(st, peer, 72, n, 'vector')
    call check_every_other(rbuf, sbuf)
    call MPI_Type_free(vec, e)
    call check(e, 'Type_free')
    if (vec /= MPI_DATATYPE_NULL) call fail('Type_free left the type', vec)

    ! MPI_BOTTOM: a type holding the buffer's absolute address.
    call MPI_Get_address(sbuf, addr, e)
    call MPI_Type_create_hindexed(1, [n], [addr], MPI_INTEGER, abs_type, e)
    call MPI_Type_commit(abs_type, e)
    rbuf = -1
    call MPI_Isend(MPI_BOTTOM, 1, abs_type, peer, 73, MPI_COMM_WORLD, req, e)
    call check(e, 'Isend (MPI_BOTTOM)')
    call MPI_Request_free(req, e)
    call check(e, 'Request_free (active send)')
    if (req /= MPI_REQUEST_NULL) call fail('Request_free left the request', req)
    call MPI_Recv(rbuf, 2 * n, MPI_INTEGER, peer, 73, MPI_COMM_WORLD, st, e)
    call expect(rbuf, n, 7, 'MPI_BOTTOM')
    call expect_status(st, peer, 73, n, 'MPI_BOTTOM')
    call MPI_Barrier(MPI_COMM_WORLD, e)
    call MPI_Type_free(abs_type, e)
  end subroutine special

  subroutine check_every_other(got, mine)
    integer, intent(in) :: got(:), mine(:)
    integer :: i
    do i = 1, n
      if (got(i) /= val(peer, rank, 7, 2 * i - 1)) call fail('vector: wrong data', i)
    end do
    if (size(mine) < 2 * n) call fail('vector: buffer', 0)
  end subroutine check_every_other

  subroutine fail(why, what)
    character(len=*), intent(in) :: why
    integer, intent(in) :: what
    integer :: e
    write (0, '(a, i0, a, i0, a, a, a, i0, a)') 'f_p2p: rank ', rank, ' (peer ', peer, '): FAILED: ', why, &
      ' (', what, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_p2p
