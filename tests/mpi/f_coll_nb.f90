! f_coll_nb.f90 - Fortran's nonblocking collectives through `use mpi` (the
! mpi_x_ names, which the plugin's Fortran layer defines): MPI_Ibarrier,
! MPI_Ibcast from every root, MPI_Ireduce (MAX) to every root with
! MPI_IN_PLACE at odd roots, MPI_Iallreduce (SUM) in place, MPI_Iallgather,
! all outstanding at once with an MPI_Isend/MPI_Irecv pair, completed by
! MPI_Waitall, MPI_Waitany and MPI_Test; checked against what each rank
! computes itself.  MPI_Abort with a message on any failure.
program f_coll_nb
  use mpi
  implicit none
  integer, parameter :: n = 1000
  integer :: ierr, rank, nprocs, root, i, r, idx, k, go, usum, umax
  external :: fsum, fmax
  integer :: bc(n), ar(n), rd(n), rdo(n), want(n), sent, got
  integer, allocatable :: ag(:)
  integer :: reqs(7)
  logical :: flag

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  allocate(ag(n * nprocs))
  ! A blocking call first: the plugin carries the nonblocking ones after it.
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  do root = 0, nprocs - 1
    bc = -1
    if (rank == root) then
      do i = 1, n
        bc(i) = root * 1000 + i
      end do
    end if
    do i = 1, n
      ar(i) = rank + i
      rd(i) = mod(rank * 37 + i * 11, 101)
      ag(rank * n + i) = rank * 7 + i
    end do
    rdo = -1
    sent = rank * 100 + root
    call MPI_Ibarrier(MPI_COMM_WORLD, reqs(1), ierr)
    call MPI_Ibcast(bc, n, MPI_INTEGER, root, MPI_COMM_WORLD, reqs(2), ierr)
    call MPI_Iallreduce(MPI_IN_PLACE, ar, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, reqs(3), ierr)
    if (rank == root .and. mod(root, 2) == 1) then
      call MPI_Ireduce(MPI_IN_PLACE, rd, n, MPI_INTEGER, MPI_MAX, root, MPI_COMM_WORLD, reqs(4), ierr)
    else
      call MPI_Ireduce(rd, rdo, n, MPI_INTEGER, MPI_MAX, root, MPI_COMM_WORLD, reqs(4), ierr)
    end if
    call MPI_Iallgather(MPI_IN_PLACE, n, MPI_INTEGER, ag, n, MPI_INTEGER, MPI_COMM_WORLD, reqs(5), ierr)
    call MPI_Isend(sent, 1, MPI_INTEGER, mod(rank + 1, nprocs), 3, MPI_COMM_WORLD, reqs(6), ierr)
    call MPI_Irecv(got, 1, MPI_INTEGER, mod(rank + nprocs - 1, nprocs), 3, MPI_COMM_WORLD, reqs(7), ierr)
    if (ierr /= MPI_SUCCESS) call fail('starting')
    select case (mod(root, 3))
    case (0)
      call MPI_Waitall(7, reqs, MPI_STATUSES_IGNORE, ierr)
    case (1)
      do k = 1, 7
        call MPI_Waitany(7, reqs, idx, MPI_STATUS_IGNORE, ierr)
      end do
    case default
      do k = 7, 1, -1
        flag = .false.
        do while (.not. flag)
          call MPI_Test(reqs(k), flag, MPI_STATUS_IGNORE, ierr)
        end do
      end do
    end select
    if (ierr /= MPI_SUCCESS) call fail('completing')
    if (any(reqs /= MPI_REQUEST_NULL)) call fail('a request left')

    do i = 1, n
      if (bc(i) /= root * 1000 + i) call fail('MPI_Ibcast: wrong data')
      if (ar(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) call fail('MPI_Iallreduce: wrong result')
      want(i) = 0
      do r = 0, nprocs - 1
        want(i) = max(want(i), mod(r * 37 + i * 11, 101))
        if (ag(r * n + i) /= r * 7 + i) call fail('MPI_Iallgather: wrong data')
      end do
    end do
    if (rank == root .and. mod(root, 2) == 1 .and. any(rd /= want)) call fail('MPI_Ireduce in place')
    if (rank == root .and. mod(root, 2) == 0 .and. any(rdo /= want)) call fail('MPI_Ireduce')
    if (got /= mod(rank + nprocs - 1, nprocs) * 100 + root) call fail('point to point among them')
  end do

  go = 1
  if (rank > 0) call MPI_Recv(go, 1, MPI_INTEGER, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  do i = 1, n
    ar(i) = rank + i
    rd(i) = mod(rank * 37 + i * 11, 101)
  end do
  call MPI_Op_create(fsum, .true., usum, ierr)
  call MPI_Iallreduce(MPI_IN_PLACE, ar, n, MPI_INTEGER, usum, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Op_free(usum, ierr)
  if (ierr /= MPI_SUCCESS .or. usum /= MPI_OP_NULL) call fail('MPI_Op_free')
  call MPI_Op_create(fmax, .true., umax, ierr)
  call MPI_Iallreduce(MPI_IN_PLACE, rd, n, MPI_INTEGER, umax, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Op_free(umax, ierr)
  if (rank == 0) then
    do r = 1, nprocs - 1
      call MPI_Send(go, 1, MPI_INTEGER, r, 9, MPI_COMM_WORLD, ierr)
    end do
  end if
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  if (ierr /= MPI_SUCCESS) call fail('completing, ops freed')
  do i = 1, n
    if (ar(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) call fail('MPI_Iallreduce, op freed: wrong result')
    want(i) = 0
    do r = 0, nprocs - 1
      want(i) = max(want(i), mod(r * 37 + i * 11, 101))
    end do
  end do
  if (any(rd /= want)) call fail('MPI_Iallreduce, second op freed: wrong result')

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a)', 'f_coll_nb: ok'
  call MPI_Finalize(ierr)

contains

  subroutine fail(what)
    character(*), intent(in) :: what
    integer :: e
    print '(a,i0,2a)', 'f_coll_nb: rank ', rank, ': ', what
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_coll_nb

! The user's operations: a sum and a max of integers.
subroutine fsum(invec, inoutvec, len, type)
  implicit none
  integer :: len, type
  integer :: invec(len), inoutvec(len)
  inoutvec = inoutvec + invec
end subroutine fsum

subroutine fmax(invec, inoutvec, len, type)
  implicit none
  integer :: len, type
  integer :: invec(len), inoutvec(len)
  inoutvec = max(inoutvec, invec)
end subroutine fmax
