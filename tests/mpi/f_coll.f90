! f_coll.f90 - Fortran collectives through `use mpi` (the mpi_x_ names, which
! the plugin's Fortran layer defines): MPI_Barrier; MPI_Bcast from every
! root; MPI_Reduce (MAX) to every root, MPI_IN_PLACE at the root on odd
! roots; MPI_Allreduce (SUM) of integers and doubles, in place and not;
! MPI_Gather to rank 0, MPI_Scatter back, MPI_Allgather and MPI_Alltoall
! in place;
! checked against what each rank computes itself; a ring of MPI_Sendrecv
! between them (which crosses pretend nodes).  MPI_Abort with a
! message on any failure.
program f_coll
  use mpi
  implicit none
  integer, parameter :: n = 1000
  integer :: ierr, rank, nprocs, root, i, r
  integer :: ibuf(n), iout(n), want(n)
  integer, allocatable :: blocks(:)
  double precision :: dbuf(n), dout(n)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Barrier')

  do root = 0, nprocs - 1
    dbuf = -1
    if (rank == root) then
      do i = 1, n
        dbuf(i) = root * 1000 + i
      end do
    end if
    call MPI_Bcast(dbuf, n, MPI_DOUBLE_PRECISION, root, MPI_COMM_WORLD, ierr)
    do i = 1, n
      if (dbuf(i) /= root * 1000 + i) call fail('MPI_Bcast: wrong data')
    end do

    do i = 1, n
      ibuf(i) = mod(rank * 37 + i * 11, 101)
      want(i) = 0
      do r = 0, nprocs - 1
        want(i) = max(want(i), mod(r * 37 + i * 11, 101))
      end do
    end do
    iout = -1
    if (rank == root .and. mod(root, 2) == 1) then
      iout = ibuf
      call MPI_Reduce(MPI_IN_PLACE, iout, n, MPI_INTEGER, MPI_MAX, root, MPI_COMM_WORLD, ierr)
    else
      call MPI_Reduce(ibuf, iout, n, MPI_INTEGER, MPI_MAX, root, MPI_COMM_WORLD, ierr)
    end if
    if (rank == root .and. any(iout /= want)) call fail('MPI_Reduce: wrong result')
  end do

  do i = 1, n
    ibuf(i) = rank + i
    dbuf(i) = 0.5d0 * rank + i
  end do
  call MPI_Allreduce(MPI_IN_PLACE, ibuf, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(dbuf, dout, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (ibuf(i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) call fail('MPI_Allreduce in place: wrong result')
    if (dout(i) /= 0.25d0 * nprocs * (nprocs - 1) + nprocs * i) call fail('MPI_Allreduce: wrong result')
  end do

  allocate(blocks(4 * nprocs))
  blocks = -1
  call MPI_Gather(ibuf, 4, MPI_INTEGER, blocks, 4, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, 4
      if (rank == 0 .and. blocks(4 * r + i) /= nprocs * (nprocs - 1) / 2 + nprocs * i) call fail('MPI_Gather')
    end do
  end do
  iout = -1
  call MPI_Scatter(blocks, 4, MPI_INTEGER, iout, 4, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (any(iout(1:4) /= ibuf(1:4))) call fail('MPI_Scatter')
  do i = 1, 4
    blocks(4 * rank + i) = rank * 10 + i
  end do
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, blocks, 4, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, 4
      if (blocks(4 * r + i) /= r * 10 + i) call fail('MPI_Allgather in place')
    end do
  end do
  do r = 0, nprocs - 1
    do i = 1, 4
      blocks(4 * r + i) = rank * 100 + r * 10 + i
    end do
  end do
  call MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, blocks, 4, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, 4
      if (blocks(4 * r + i) /= r * 100 + rank * 10 + i) call fail('MPI_Alltoall in place')
    end do
  end do
  call MPI_Sendrecv(ibuf, n, MPI_INTEGER, mod(rank + 1, nprocs), 7, iout, n, MPI_INTEGER, &
                    mod(rank + nprocs - 1, nprocs), 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (any(iout /= ibuf)) call fail('MPI_Sendrecv: wrong data')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) write (6, '(a)') 'f_coll: ok'
  call MPI_Finalize(ierr)

contains

  subroutine fail(why)
    character(len=*), intent(in) :: why
    integer :: e
    write (0, '(a, i0, a, a)') 'f_coll: rank ', rank, ': FAILED: ', why
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_coll
