! f_idup08.f90 - MPI_Comm_idup from `use mpi_f08` is carried.
!
! mpi_f08's MPI_Comm_idup calls Open MPI's ompi_comm_idup_f, which the
! plugin defines.  Every rank idups MPI_COMM_WORLD (the new handle is
! ASYNCHRONOUS: read only after MPI_Wait), exchanges with every other rank
! on it (Sendrecv, then Irecv/Send/Wait; data and statuses checked), then
! MPI_Comm_dup's MPI_COMM_WORLD and does the same there (a wrong count of
! creations on MPI_COMM_WORLD would give it another context at some rank).
! check_mpi's stats show that the traffic on the idup'd communicator went
! through pinshm.  Each pair of ranks in turn (peer = ieor(rank, d)).
! MPI_Abort with a message on any failure.
program f_idup08
  use mpi_f08
  implicit none
  integer, parameter :: n = 100
  integer :: rank, nprocs, cmp
  type(MPI_Comm), asynchronous :: idup
  type(MPI_Comm) :: dup
  type(MPI_Request) :: req

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)

  call MPI_Comm_idup(MPI_COMM_WORLD, idup, req)
  call MPI_Wait(req, MPI_STATUS_IGNORE)
  if (req /= MPI_REQUEST_NULL) call fail('MPI_Wait left the request', 0)
  call MPI_Comm_compare(idup, MPI_COMM_WORLD, cmp)
  if (cmp /= MPI_CONGRUENT) call fail('idup vs MPI_COMM_WORLD', cmp)
  call exchange(idup, 1)

  call MPI_Comm_dup(MPI_COMM_WORLD, dup)
  call exchange(dup, 2)

  call MPI_Comm_free(idup)
  call MPI_Comm_free(dup)
  call MPI_Barrier(MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a)', 'f_idup08: ok (', nprocs, ' ranks)'
  call MPI_Finalize()

contains

  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  subroutine check(rbuf, peer, what, tag, st)
    integer, intent(in) :: rbuf(n), peer, what, tag
    type(MPI_Status), intent(in) :: st
    integer :: k, cnt
    call MPI_Get_count(st, MPI_INTEGER, cnt)
    if (st%MPI_SOURCE /= peer .or. st%MPI_TAG /= tag .or. cnt /= n) call fail('status', st%MPI_SOURCE)
    do k = 1, n
      if (rbuf(k) /= val(peer, rank, what, k)) call fail('data', k)
    end do
  end subroutine check

  subroutine exchange(comm, what)
    type(MPI_Comm), intent(in) :: comm
    integer, intent(in) :: what
    integer :: d, peer, k, tag, sbuf(n), rbuf(n)
    type(MPI_Status) :: st
    type(MPI_Request) :: r
    do d = 1, nprocs - 1
      peer = ieor(rank, d)
      tag = what * 10 + d
      do k = 1, n
        sbuf(k) = val(rank, peer, what, k)
      end do
      rbuf = 0
      call MPI_Sendrecv(sbuf, n, MPI_INTEGER, peer, tag, rbuf, n, MPI_INTEGER, peer, tag, comm, st)
      call check(rbuf, peer, what, tag, st)
      rbuf = 0
      call MPI_Irecv(rbuf, n, MPI_INTEGER, peer, tag + 5, comm, r)
      call MPI_Send(sbuf, n, MPI_INTEGER, peer, tag + 5, comm)
      call MPI_Wait(r, st)
      call check(rbuf, peer, what, tag + 5, st)
    end do
  end subroutine exchange

  subroutine fail(why, v)
    character(len=*), intent(in) :: why
    integer, intent(in) :: v
    write (0, '(a, i0, a, a, a, i0, a)') 'f_idup08: rank ', rank, ': FAILED: ', why, ' (', v, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine fail
end program f_idup08
