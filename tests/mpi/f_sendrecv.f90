! f_sendrecv.f90 - Fortran point-to-point through mpif.h (Open MPI's mpi_x_
! names, which the plugin's Fortran layer defines), between ranks rank and
! ieor(rank, 1): Send/Recv (MPI_ANY_SOURCE, MPI_ANY_TAG), Sendrecv,
! Isend/Irecv/Waitall and their statuses, MPI_STATUS_IGNORE left as it is;
! then a ring Sendrecv (rank + 1), which crosses pretend nodes.  MPI_Abort with a message on any failure.
program f_sendrecv
  implicit none
  include 'mpif.h'
  integer, parameter :: n = 1000
  integer :: ierr, rank, nprocs, peer, i
  integer :: status(MPI_STATUS_SIZE), statuses(MPI_STATUS_SIZE, 2), reqs(2), cnt
  double precision :: sbuf(n), rbuf(n)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  if (mod(nprocs, 2) /= 0) call fail('needs an even number of ranks')
  peer = ieor(rank, 1)

  do i = 1, n
    sbuf(i) = rank * 10000 + i
  end do

  ! Blocking: the lower rank sends first.
  rbuf = -1
  if (rank < peer) then
    call MPI_Send(sbuf, n, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, ierr)
    call MPI_Recv(rbuf, n, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, status, ierr)
  else
    call MPI_Recv(rbuf, n, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, status, ierr)
    call MPI_Send(sbuf, n, MPI_DOUBLE_PRECISION, peer, 1, MPI_COMM_WORLD, ierr)
  end if
  call check_data('Send/Recv')
  if (status(MPI_SOURCE) /= peer .or. status(MPI_TAG) /= 1) call fail('Send/Recv: wrong status')
  call MPI_Get_count(status, MPI_DOUBLE_PRECISION, cnt, ierr)
  if (cnt /= n) call fail('Send/Recv: wrong count')

  rbuf = -1
  call MPI_Sendrecv(sbuf, n, MPI_DOUBLE_PRECISION, peer, 2, rbuf, n, MPI_DOUBLE_PRECISION, peer, 2, &
                    MPI_COMM_WORLD, status, ierr)
  call check_data('Sendrecv')

  rbuf = -1
  call MPI_Irecv(rbuf, n, MPI_DOUBLE_PRECISION, peer, 3, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(sbuf, n, MPI_DOUBLE_PRECISION, peer, 3, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, statuses, ierr)
  call check_data('Isend/Irecv')
  if (statuses(MPI_SOURCE, 1) /= peer .or. statuses(MPI_TAG, 1) /= 3) call fail('Irecv: wrong status')

  ! MPI_STATUS_IGNORE is a common block: nothing may be written there.
  rbuf = -1
  call MPI_Sendrecv(sbuf, n, MPI_DOUBLE_PRECISION, peer, 5, rbuf, n, MPI_DOUBLE_PRECISION, peer, 5, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  call check_data('Sendrecv (MPI_STATUS_IGNORE)')
  if (MPI_STATUS_IGNORE(MPI_TAG) /= 0) call fail('a status was written into MPI_STATUS_IGNORE')

  ! The ring: from rank - 1, to rank + 1.
  peer = mod(rank + nprocs - 1, nprocs)
  rbuf = -1
  call MPI_Sendrecv(sbuf, n, MPI_DOUBLE_PRECISION, mod(rank + 1, nprocs), 4, rbuf, n, MPI_DOUBLE_PRECISION, &
                    MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, status, ierr)
  call check_data('ring Sendrecv')
  if (status(MPI_SOURCE) /= peer .or. status(MPI_TAG) /= 4) call fail('ring Sendrecv: wrong status')

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'f_sendrecv: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  subroutine check_data(what)
    character(len=*), intent(in) :: what
    integer :: k
    do k = 1, n
      if (rbuf(k) /= peer * 10000 + k) call fail(what // ': wrong data')
    end do
  end subroutine check_data

  subroutine fail(why)
    character(len=*), intent(in) :: why
    integer :: e
    write (0, '(a, i0, a, a)') 'f_sendrecv: rank ', rank, ': FAILED: ', why
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_sendrecv
