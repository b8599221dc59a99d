! f_idup.f90 - Fortran's MPI_COMM_IDUP (`use mpi`) is carried.
!
! Every rank MPI_COMM_IDUP's MPI_COMM_WORLD (completed with MPI_TEST, the
! new handle read only then), exchanges with every other rank on the new
! communicator, then MPI_COMM_DUP's MPI_COMM_WORLD and exchanges on that;
! data and statuses checked.  check_mpi runs it alone (its stats show that
! the traffic on the idup'd communicator went through pinshm) and as the
! Fortran half of an MPMD job with idup_c.c, which does the same in C (both
! halves must count the idup on MPI_COMM_WORLD and carry the new
! communicator alike, or the exchanges hang).  Each pair of ranks in turn
! (peer = rank ^ d).  MPI_Abort with a message on any failure.
program f_idup
  use mpi
  implicit none
  integer, parameter :: n = 100
  integer :: ierr, rank, nprocs, idup, dup, req, cmp
  logical :: done

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)

  idup = MPI_COMM_NULL
  call MPI_Comm_idup(MPI_COMM_WORLD, idup, req, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_idup', ierr)
  done = .false.
  do while (.not. done)
    call MPI_Test(req, done, MPI_STATUS_IGNORE, ierr)
    if (ierr /= MPI_SUCCESS) call fail('MPI_Test', ierr)
  end do
  if (req /= MPI_REQUEST_NULL) call fail('MPI_Test left the request', req)
  call MPI_Comm_compare(idup, MPI_COMM_WORLD, cmp, ierr)
  if (ierr /= MPI_SUCCESS .or. cmp /= MPI_CONGRUENT) call fail('idup vs MPI_COMM_WORLD', cmp)
  call exchange_sendrecv(idup, 1)
  call exchange_irecv(idup, 2)

  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  call exchange_sendrecv(dup, 3)
  call exchange_irecv(dup, 4)

  call MPI_Comm_free(idup, ierr)
  call MPI_Comm_free(dup, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'f_idup: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  ! The same as idup_c.c's.
  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  subroutine check(rbuf, peer, what, tag, st)
    integer, intent(in) :: rbuf(n), peer, what, tag, st(MPI_STATUS_SIZE)
    integer :: k, cnt, e
    call MPI_Get_count(st, MPI_INTEGER, cnt, e)
    if (st(MPI_SOURCE) /= peer .or. st(MPI_TAG) /= tag .or. cnt /= n) call fail('status', st(MPI_SOURCE))
    do k = 1, n
      if (rbuf(k) /= val(peer, rank, what, k)) call fail('data', k)
    end do
  end subroutine check

  subroutine exchange_sendrecv(comm, what)
    integer, intent(in) :: comm, what
    integer :: d, peer, k, e, tag, sbuf(n), rbuf(n), st(MPI_STATUS_SIZE)
    do d = 1, nprocs - 1
      peer = ieor(rank, d)
      tag = what * 10 + d
      do k = 1, n
        sbuf(k) = val(rank, peer, what, k)
      end do
      rbuf = 0
      call MPI_Sendrecv(sbuf, n, MPI_INTEGER, peer, tag, rbuf, n, MPI_INTEGER, peer, tag, comm, st, e)
      if (e /= MPI_SUCCESS) call fail('MPI_Sendrecv', e)
      call check(rbuf, peer, what, tag, st)
    end do
  end subroutine exchange_sendrecv

  subroutine exchange_irecv(comm, what)
    integer, intent(in) :: comm, what
    integer :: d, peer, k, e, tag, r, sbuf(n), rbuf(n), st(MPI_STATUS_SIZE)
    do d = 1, nprocs - 1
      peer = ieor(rank, d)
      tag = what * 10 + d
      do k = 1, n
        sbuf(k) = val(rank, peer, what, k)
      end do
      rbuf = 0
      call MPI_Irecv(rbuf, n, MPI_INTEGER, peer, tag, comm, r, e)
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, tag, comm, e)
      call MPI_Wait(r, st, e)
      if (e /= MPI_SUCCESS) call fail('MPI_Irecv/Send/Wait', e)
      call check(rbuf, peer, what, tag, st)
    end do
  end subroutine exchange_irecv

  subroutine fail(why, v)
    character(len=*), intent(in) :: why
    integer, intent(in) :: v
    integer :: e
    write (0, '(a, i0, a, a, a, i0, a)') 'f_idup: rank ', rank, ': FAILED: ', why, ' (', v, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_idup
