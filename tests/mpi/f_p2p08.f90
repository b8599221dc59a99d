! f_p2p08.f90 - point-to-point from `use mpi_f08`, carried by the plugin.
!
! mpi_f08 reaches the plugin two ways: most calls through Open MPI's
! ompi_X_f, the Test family, Iprobe, Improbe, Request_get_status and
! Buffer_detach through their own mpi_x_f08_ names.  Each pair of ranks in
! turn (peer = ieor(rank, d)): Send/Recv with TYPE(MPI_Status) and
! MPI_Get_count, Ssend, Bsend with Buffer_attach and the f08 Buffer_detach
! (which returns the address), Isend/Issend/Irecv completed with Test,
! Testany, Testsome, Testall and Waitany (1-based indices, requests set to
! MPI_REQUEST_NULL), Request_get_status, persistent Send_init/Recv_init
! with Startall/Waitall, Iprobe, Improbe, Mprobe, Mrecv, Imrecv, Cancel, a
! truncated receive (ierror MPI_ERR_TRUNCATE), calls without the optional
! ierror, MPI_Init_thread (FUNNELED: carried), and a ring on a
! communicator of MPI_Cart_create (whose mpi_f08 form goes to pmpi_).  MPI_Abort with a
! message on any failure.
program f_p2p08
  use mpi_f08
  use, intrinsic :: iso_c_binding, only : c_ptr, c_intptr_t
  implicit none
  integer, parameter :: n = 500
  integer :: rank, nprocs, peer, d, provided

  call MPI_Init_thread(MPI_THREAD_FUNNELED, provided)
  if (provided < MPI_THREAD_FUNNELED) call fail('MPI_Init_thread: provided below FUNNELED', provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  if (mod(nprocs, 2) /= 0) call fail('needs an even number of ranks', 0)

  do d = 1, nprocs - 1
    peer = ieor(rank, d)
    call blocking()
    call nonblocking()
    call persistent()
    call probes()
    call MPI_Barrier(MPI_COMM_WORLD)
  end do
  call cart_ring()

  if (rank == 0) print '(a, i0, a)', 'f_p2p08: ok (', nprocs, ' ranks)'
  call MPI_Finalize()

contains

  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  subroutine fill(buf, what)
    integer, intent(out) :: buf(:)
    integer, intent(in) :: what
    integer :: i
    do i = 1, size(buf)
      buf(i) = val(rank, peer, what, i)
    end do
  end subroutine fill

  subroutine expect(buf, cnt, what, where)
    integer, intent(in) :: buf(:), cnt, what
    character(len=*), intent(in) :: where
    integer :: i
    do i = 1, cnt
      if (buf(i) /= val(peer, rank, what, i)) call fail(where // ': wrong data', i)
    end do
  end subroutine expect

  subroutine expect_status(st, tag, cnt, where)
    type(MPI_Status), intent(in) :: st
    integer, intent(in) :: tag, cnt
    character(len=*), intent(in) :: where
    integer :: got
    if (st%MPI_SOURCE /= peer) call fail(where // ': wrong MPI_SOURCE', st%MPI_SOURCE)
    if (st%MPI_TAG /= tag) call fail(where // ': wrong MPI_TAG', st%MPI_TAG)
    call MPI_Get_count(st, MPI_INTEGER, got)
    if (got /= cnt) call fail(where // ': wrong MPI_Get_count', got)
  end subroutine expect_status

  subroutine blocking()
    integer :: sbuf(n), rbuf(n), e, cls, size
    integer, allocatable :: bbuf(:)
    type(MPI_Status) :: st
    type(c_ptr) :: addr
    integer(kind=MPI_ADDRESS_KIND) :: attached
    integer :: bytes
    call fill(sbuf, 1)
    rbuf = -1
    if (rank < peer) then
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, 1, MPI_COMM_WORLD)
      call MPI_Ssend(sbuf, n, MPI_INTEGER, peer, 2, MPI_COMM_WORLD)
      call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 1, MPI_COMM_WORLD, st)
      call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    else
      call MPI_Recv(rbuf, n, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, st)
      call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, 1, MPI_COMM_WORLD)
      call MPI_Ssend(sbuf, n, MPI_INTEGER, peer, 2, MPI_COMM_WORLD)
    end if
    call expect(rbuf, n, 1, 'Send/Recv')
    call expect_status(st, 1, n, 'Recv')

    ! Buffered, and the f08 Buffer_detach that returns the address.
    bytes = 4 * n + MPI_BSEND_OVERHEAD
    allocate(bbuf(bytes / 4 + 1))
    call MPI_Buffer_attach(bbuf, bytes, e)
    call MPI_Get_address(bbuf, attached)
    rbuf = -1
    call MPI_Bsend(sbuf, n, MPI_INTEGER, peer, 3, MPI_COMM_WORLD, e)
    if (e /= MPI_SUCCESS) call fail('Bsend', e)
    call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 3, MPI_COMM_WORLD, st)
    call expect(rbuf, n, 1, 'Bsend')
    call MPI_Buffer_detach(addr, size, e)
    if (e /= MPI_SUCCESS .or. size /= bytes) call fail('Buffer_detach: size', size)
    if (transfer(addr, 0_c_intptr_t) /= attached) call fail('Buffer_detach: not the attached address', 0)
    deallocate(bbuf)

    ! Truncated: an error code, not an abort.
    call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)
    if (rank < peer) then
      call MPI_Send(sbuf, 10, MPI_INTEGER, peer, 4, MPI_COMM_WORLD)
      call MPI_Recv(rbuf, 5, MPI_INTEGER, peer, 4, MPI_COMM_WORLD, st, e)
    else
      call MPI_Recv(rbuf, 5, MPI_INTEGER, peer, 4, MPI_COMM_WORLD, st, e)
      call MPI_Send(sbuf, 10, MPI_INTEGER, peer, 4, MPI_COMM_WORLD)
    end if
    call MPI_Error_class(e, cls)
    if (cls /= MPI_ERR_TRUNCATE) call fail('truncated Recv: not MPI_ERR_TRUNCATE', cls)
    call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL)
  end subroutine blocking

  subroutine nonblocking()
    integer :: sbuf(n), rbuf(n, 3), cbuf(n), k, idx(3), outcount, e
    type(MPI_Request) :: rq(3), sq(3), creq
    type(MPI_Status) :: st, sts(3)
    logical :: flag
    call fill(sbuf, 2)
    rbuf = -1
    do k = 1, 3
      call MPI_Irecv(rbuf(1, k), n, MPI_INTEGER, peer, 10 + k, MPI_COMM_WORLD, rq(k))
    end do
    call MPI_Irecv(cbuf, n, MPI_INTEGER, peer, 19, MPI_COMM_WORLD, creq)
    call MPI_Cancel(creq)
    call MPI_Wait(creq, st)
    call MPI_Test_cancelled(st, flag)
    if (.not. flag .or. creq /= MPI_REQUEST_NULL) call fail('Cancel', 0)
    call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 11, MPI_COMM_WORLD, sq(1))
    call MPI_Issend(sbuf, n, MPI_INTEGER, peer, 12, MPI_COMM_WORLD, sq(2))
    call MPI_Isend(sbuf, n, MPI_INTEGER, peer, 13, MPI_COMM_WORLD, sq(3), e)

    flag = .false.
    do while (.not. flag)
      call MPI_Request_get_status(rq(1), flag, st)
    end do
    call expect_status(st, 11, n, 'Request_get_status')
    if (rq(1) == MPI_REQUEST_NULL) call fail('Request_get_status freed the request', 0)
    call MPI_Test(rq(1), flag, st)
    if (.not. flag .or. rq(1) /= MPI_REQUEST_NULL) call fail('Test', 0)
    call expect(rbuf(:, 1), n, 2, 'Test')

    flag = .false.
    do while (.not. flag)
      call MPI_Testany(3, rq, k, flag, st, e)
      if (e /= MPI_SUCCESS) call fail('Testany', e)
    end do
    if (k /= 2 .and. k /= 3) call fail('Testany: index', k)
    if (rq(k) /= MPI_REQUEST_NULL) call fail('Testany left the request', k)
    call expect_status(st, 10 + k, n, 'Testany')
    call expect(rbuf(:, k), n, 2, 'Testany')

    outcount = 0
    do while (outcount == 0)
      call MPI_Testsome(3, rq, outcount, idx, sts)
    end do
    if (outcount /= 1 .or. idx(1) /= 5 - k) call fail('Testsome: index', idx(1))
    call expect_status(sts(1), 10 + idx(1), n, 'Testsome')
    call expect(rbuf(:, idx(1)), n, 2, 'Testsome')

    flag = .false.
    do while (.not. flag)
      call MPI_Testall(2, sq, flag, sts)
    end do
    if (sq(1) /= MPI_REQUEST_NULL .or. sq(2) /= MPI_REQUEST_NULL) call fail('Testall left a request', 0)
    call MPI_Waitany(3, sq, k, st)
    if (k /= 3 .or. sq(3) /= MPI_REQUEST_NULL) call fail('Waitany: index', k)
    call MPI_Waitany(3, sq, k, st)
    if (k /= MPI_UNDEFINED) call fail('Waitany on nulls: not MPI_UNDEFINED', k)
  end subroutine nonblocking

  subroutine persistent()
    integer :: sbuf(n), rbuf(n), round
    type(MPI_Request) :: rq(2)
    type(MPI_Status) :: sts(2)
    call MPI_Recv_init(rbuf, n, MPI_INTEGER, MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, rq(1))
    call MPI_Send_init(sbuf, n, MPI_INTEGER, peer, 21, MPI_COMM_WORLD, rq(2))
    do round = 1, 3
      call fill(sbuf, 20 + round)
      rbuf = -1
      call MPI_Startall(2, rq)
      call MPI_Waitall(2, rq, sts)
      if (rq(1) == MPI_REQUEST_NULL .or. rq(2) == MPI_REQUEST_NULL) call fail('Waitall freed a persistent', round)
      call expect(rbuf, n, 20 + round, 'persistent')
      call expect_status(sts(1), 21, n, 'persistent')
    end do
    call MPI_Request_free(rq(1))
    call MPI_Request_free(rq(2))
  end subroutine persistent

  subroutine probes()
    integer :: sbuf(n), rbuf(n), k
    type(MPI_Request) :: sq(3), req
    type(MPI_Message) :: msg
    type(MPI_Status) :: st
    logical :: flag
    call fill(sbuf, 3)
    do k = 1, 3
      call MPI_Isend(sbuf, n - k, MPI_INTEGER, peer, 30 + k, MPI_COMM_WORLD, sq(k))
    end do
    flag = .false.
    do while (.not. flag)
      call MPI_Iprobe(peer, 31, MPI_COMM_WORLD, flag, st)
    end do
    call expect_status(st, 31, n - 1, 'Iprobe')
    call MPI_Recv(rbuf, n, MPI_INTEGER, peer, 31, MPI_COMM_WORLD, st)
    call expect(rbuf, n - 1, 3, 'Iprobe+Recv')

    flag = .false.
    do while (.not. flag)
      call MPI_Improbe(MPI_ANY_SOURCE, 32, MPI_COMM_WORLD, flag, msg, st)
    end do
    call expect_status(st, 32, n - 2, 'Improbe')
    rbuf = -1
    call MPI_Mrecv(rbuf, n, MPI_INTEGER, msg, st)
    if (msg /= MPI_MESSAGE_NULL) call fail('Mrecv left the message', 0)
    call expect(rbuf, n - 2, 3, 'Mrecv')

    call MPI_Mprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, msg, st)
    call expect_status(st, 33, n - 3, 'Mprobe')
    rbuf = -1
    call MPI_Imrecv(rbuf, n, MPI_INTEGER, msg, req)
    call MPI_Wait(req, st)
    call expect(rbuf, n - 3, 3, 'Imrecv')
    call expect_status(st, 33, n - 3, 'Imrecv')
    call MPI_Waitall(3, sq, MPI_STATUSES_IGNORE)
  end subroutine probes

  ! A periodic 1-D Cartesian communicator, made here: carried like the world.
  subroutine cart_ring()
    type(MPI_Comm) :: cart
    type(MPI_Status) :: st
    integer :: me, sbuf(n), rbuf(n), i, left, right
    call MPI_Cart_create(MPI_COMM_WORLD, 1, [nprocs], [.true.], .false., cart)
    call MPI_Comm_rank(cart, me)
    call MPI_Cart_shift(cart, 0, 1, left, right)
    do i = 1, n
      sbuf(i) = me * 7 + i
    end do
    rbuf = -1
    call MPI_Sendrecv(sbuf, n, MPI_INTEGER, right, 41, rbuf, n, MPI_INTEGER, MPI_ANY_SOURCE, 41, cart, st)
    if (st%MPI_SOURCE /= left) call fail('Cart_create ring: wrong MPI_SOURCE', st%MPI_SOURCE)
    do i = 1, n
      if (rbuf(i) /= left * 7 + i) call fail('Cart_create ring: wrong data', i)
    end do
    call MPI_Comm_free(cart)
  end subroutine cart_ring

  subroutine fail(why, what)
    character(len=*), intent(in) :: why
    integer, intent(in) :: what
    write (0, '(a, i0, a, i0, a, a, a, i0, a)') 'f_p2p08: rank ', rank, ' (peer ', peer, '): FAILED: ', why, &
      ' (', what, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine fail
end program f_p2p08
