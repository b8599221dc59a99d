! f_negcount.f90 - a negative count of requests from Fortran (`use mpi`).
!
! MPI_WAITALL, MPI_TESTALL, MPI_WAITANY, MPI_TESTANY, MPI_WAITSOME,
! MPI_TESTSOME and MPI_STARTALL with count -1, on an array that holds a
! pending receive (MPI_IRECV) and an inactive persistent send
! (MPI_SEND_INIT), under an error handler on MPI_COMM_WORLD that counts its
! calls.  With the plugin preloaded (LD_PRELOAD names libpinshm_mpi, whether
! it carries traffic, is turned off or fell back: its Fortran layer is
! there), each returns MPI_ERR_ARG and calls that handler once with it, as
! pinshm-mpi(7) says.  Without it, Open MPI 4.1's own bindings fail their
! allocation instead (MPI_ERR_NO_MEM): there each must return an error and
! call the handler once with it.  Then the array is unchanged: the peer's
! MPI_SEND completes the receive, MPI_START and MPI_WAITALL the persistent
! send, data and statuses checked.  Each pair of ranks in turn
! (peer = rank ^ d).  Call families: blocking, nonblocking, persistent.
! MPI_Abort with a message on any failure.
module f_negcount_handler
  implicit none
  integer :: calls = 0, last_code = 0, last_comm = 0
contains
  subroutine count_error(comm, code)
    integer :: comm, code
    calls = calls + 1
    last_comm = comm
    last_code = code
  end subroutine count_error
end module f_negcount_handler

program f_negcount
  use mpi
  use f_negcount_handler
  implicit none
  integer, parameter :: n = 64, ncalls = 7
  character(len=12), parameter :: names(ncalls) = [character(len=12) :: 'MPI_WAITALL', 'MPI_TESTALL', &
       'MPI_WAITANY', 'MPI_TESTANY', 'MPI_WAITSOME', 'MPI_TESTSOME', 'MPI_STARTALL']
  integer :: ierr, rank, nprocs, eh, d, peer, k, i, rq(2), given(2)
  integer :: sbuf(n), pbuf(n), rbuf(n), st(MPI_STATUS_SIZE, 2)
  character(len=4096) :: preload
  logical :: plugin

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  preload = ''
  call get_environment_variable('LD_PRELOAD', preload)
  plugin = index(preload, 'libpinshm_mpi') > 0
  call MPI_Comm_create_errhandler(count_error, eh, ierr)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh, ierr)

  do d = 1, nprocs - 1
    peer = ieor(rank, d)
    do i = 1, n
      sbuf(i) = val(rank, peer, d, i)
      pbuf(i) = val(rank, peer, 100 + d, i)
    end do
    rbuf = -1
    call MPI_Irecv(rbuf, n, MPI_INTEGER, peer, d, MPI_COMM_WORLD, rq(1), ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Irecv', ierr)
    call MPI_Send_init(pbuf, n, MPI_INTEGER, peer, 100 + d, MPI_COMM_WORLD, rq(2), ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Send_init', ierr)
    given = rq
    do k = 1, ncalls
      call negative(k)
    end do
    if (any(rq /= given)) call fail('a negative count changed a request', rq(1))

    call MPI_Send(sbuf, n, MPI_INTEGER, peer, d, MPI_COMM_WORLD, ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Send', ierr)
    call MPI_Wait(rq(1), st(:, 1), ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Wait', ierr)
    call check(peer, d, st(:, 1))

    rbuf = -1
    call MPI_Irecv(rbuf, n, MPI_INTEGER, peer, 100 + d, MPI_COMM_WORLD, rq(1), ierr)
    call MPI_Start(rq(2), ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Start', ierr)
    call MPI_Waitall(2, rq, st, ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Waitall', ierr)
    call check(peer, 100 + d, st(:, 1))
    if (rq(1) /= MPI_REQUEST_NULL .or. rq(2) == MPI_REQUEST_NULL) call fail('requests after MPI_Waitall', rq(1))
    call MPI_Request_free(rq(2), ierr)
  end do

  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  call MPI_Errhandler_free(eh, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'f_negcount: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  ! Call k of names with count -1 on rq; its result and the handler checked.
  subroutine negative(k)
    integer, intent(in) :: k
    integer :: e, cls, hcls, idx, outcount, indices(2), st1(MPI_STATUS_SIZE), stn(MPI_STATUS_SIZE, 2)
    logical :: flag
    calls = 0
    last_code = MPI_SUCCESS
    select case (k)
    case (1)
      call MPI_Waitall(-1, rq, stn, e)
    case (2)
      call MPI_Testall(-1, rq, flag, stn, e)
    case (3)
      call MPI_Waitany(-1, rq, idx, st1, e)
    case (4)
      call MPI_Testany(-1, rq, idx, flag, st1, e)
    case (5)
      call MPI_Waitsome(-1, rq, outcount, indices, stn, e)
    case (6)
      call MPI_Testsome(-1, rq, outcount, indices, stn, e)
    case default
      call MPI_Startall(-1, rq, e)
    end select
    if (e == MPI_SUCCESS) call fail(trim(names(k)) // '(-1) succeeded', e)
    if (calls /= 1) call fail(trim(names(k)) // '(-1): handler calls', calls)
    if (last_code /= e) call fail(trim(names(k)) // '(-1): the handler got another code', last_code)
    if (last_comm /= MPI_COMM_WORLD) call fail(trim(names(k)) // '(-1): the handler got another comm', last_comm)
    call MPI_Error_class(e, cls, ierr)
    call MPI_Error_class(last_code, hcls, ierr)
    if (plugin .and. (cls /= MPI_ERR_ARG .or. hcls /= MPI_ERR_ARG)) &
      call fail(trim(names(k)) // '(-1) with the plugin: class, want MPI_ERR_ARG', cls)
  end subroutine negative

  subroutine check(peer, what, s)
    integer, intent(in) :: peer, what, s(MPI_STATUS_SIZE)
    integer :: i, cnt, e
    call MPI_Get_count(s, MPI_INTEGER, cnt, e)
    if (s(MPI_SOURCE) /= peer .or. s(MPI_TAG) /= what .or. cnt /= n) call fail('status', s(MPI_SOURCE))
    do i = 1, n
      if (rbuf(i) /= val(peer, rank, what, i)) call fail('data', i)
    end do
  end subroutine check

  subroutine fail(why, v)
    character(len=*), intent(in) :: why
    integer, intent(in) :: v
    integer :: e
    write (0, '(a, i0, a, a, a, i0, a)') 'f_negcount: rank ', rank, ': FAILED: ', why, ' (', v, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_negcount
