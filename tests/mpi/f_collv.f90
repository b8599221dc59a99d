! f_collv.f90 - Fortran's v variants, reduce-scatter and scans through
! `use mpi` (the mpi_x_ names, which the plugin's Fortran layer defines):
! MPI_Gatherv to every root (MPI_IN_PLACE at the root on odd roots) and
! MPI_Scatterv back (MPI_IN_PLACE at odd roots), counts rank + 1 with the
! arrays given only at the root; MPI_Allgatherv in place; MPI_Alltoallv;
! MPI_Reduce_scatter_block (SUM), MPI_Reduce_scatter in place (MAX);
! MPI_Scan (SUM) and MPI_Exscan (SUM, in place) of integers and doubles;
! checked against what each rank computes itself; a ring of MPI_Sendrecv.
! MPI_Abort with a message on any failure.
program f_collv
  use mpi
  implicit none
  integer, parameter :: n = 7
  integer :: ierr, rank, nprocs, root, i, r, k, total
  integer, allocatable :: counts(:), displs(:), all(:), sc(:), sd(:), rc(:), rd(:), src(:), dst(:)
  integer :: mine(64), got(64), none(1)
  double precision :: d(n), ds(n), w

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  allocate(counts(nprocs), displs(nprocs), sc(nprocs), sd(nprocs), rc(nprocs), rd(nprocs))
  total = 0
  do r = 0, nprocs - 1
    counts(r + 1) = r + 1
    displs(r + 1) = total + 1
    total = total + r + 2
  end do
  allocate(all(total + 1), src(nprocs * nprocs * n), dst(nprocs * nprocs * n))

  do root = 0, nprocs - 1
    do i = 1, rank + 1
      mine(i) = rank * 100 + root * 10 + i
    end do
    all = -1
    if (rank == root) then
      if (mod(root, 2) == 1) then
        all(displs(rank + 1) + 1:displs(rank + 1) + rank + 1) = mine(1:rank + 1)
        call MPI_Gatherv(MPI_IN_PLACE, rank + 1, MPI_INTEGER, all, counts, displs, MPI_INTEGER, root, &
                         MPI_COMM_WORLD, ierr)
      else
        call MPI_Gatherv(mine, rank + 1, MPI_INTEGER, all, counts, displs, MPI_INTEGER, root, &
                         MPI_COMM_WORLD, ierr)
      end if
      do r = 0, nprocs - 1
        do i = 1, r + 1
          if (all(displs(r + 1) + i) /= r * 100 + root * 10 + i) call fail('MPI_Gatherv')
        end do
        if (all(displs(r + 1)) /= -1) call fail('MPI_Gatherv wrote a gap')
      end do
      all = all + 1
      if (mod(root, 2) == 1) then
        call MPI_Scatterv(all, counts, displs, MPI_INTEGER, MPI_IN_PLACE, rank + 1, MPI_INTEGER, root, &
                          MPI_COMM_WORLD, ierr)
      else
        got = -1
        call MPI_Scatterv(all, counts, displs, MPI_INTEGER, got, rank + 1, MPI_INTEGER, root, &
                          MPI_COMM_WORLD, ierr)
        if (any(got(1:rank + 1) /= mine(1:rank + 1) + 1)) call fail('MPI_Scatterv at the root')
      end if
    else
      call MPI_Gatherv(mine, rank + 1, MPI_INTEGER, none, none, none, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
      got = -1
      call MPI_Scatterv(none, none, none, MPI_INTEGER, got, rank + 1, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
      if (any(got(1:rank + 1) /= mine(1:rank + 1) + 1)) call fail('MPI_Scatterv')
    end if
  end do

  all = -1
  do i = 1, rank + 1
    all(displs(rank + 1) + i) = rank * 1000 + i
  end do
  call MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, r + 1
      if (all(displs(r + 1) + i) /= r * 1000 + i) call fail('MPI_Allgatherv in place')
    end do
  end do

  ! Alltoallv: rank q sends rank r (q + r) mod 3 + 1 integers.
  k = 0
  do r = 0, nprocs - 1
    sc(r + 1) = mod(rank + r, 3) + 1
    rc(r + 1) = sc(r + 1)
    sd(r + 1) = r * n
    rd(r + 1) = r * n + 1
    do i = 1, sc(r + 1)
      src(r * n + i) = rank * 100 + r * 10 + i
    end do
  end do
  dst = -1
  call MPI_Alltoallv(src, sc, sd, MPI_INTEGER, dst, rc, rd, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do r = 0, nprocs - 1
    do i = 1, rc(r + 1)
      if (dst(rd(r + 1) + i) /= r * 100 + rank * 10 + i) call fail('MPI_Alltoallv')
    end do
  end do

  ! Reduce_scatter_block (SUM): block b, element i of rank q: q + b * 10 + i.
  do r = 0, nprocs - 1
    do i = 1, n
      src(r * n + i) = rank + r * 10 + i
    end do
  end do
  call MPI_Reduce_scatter_block(src, dst, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (dst(i) /= nprocs * (nprocs - 1) / 2 + nprocs * (rank * 10 + i)) call fail('MPI_Reduce_scatter_block')
  end do
  ! Reduce_scatter in place (MAX): block r has r + 1 elements.
  k = 0
  do r = 0, nprocs - 1
    do i = 1, r + 1
      k = k + 1
      src(k) = mod(rank * 7 + k * 3, 11)
    end do
  end do
  call MPI_Reduce_scatter(MPI_IN_PLACE, src, counts, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  k = rank * (rank + 1) / 2
  do i = 1, rank + 1
    w = 0
    do r = 0, nprocs - 1
      w = max(w, dble(mod(r * 7 + (k + i) * 3, 11)))
    end do
    if (src(i) /= int(w)) call fail('MPI_Reduce_scatter in place')
  end do

  ! Scan of integers and doubles (SUM), Exscan in place.
  do i = 1, n
    mine(i) = rank + i
    d(i) = 0.5d0 * rank + i
  end do
  call MPI_Scan(mine, got, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Scan(d, ds, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (got(i) /= rank * (rank + 1) / 2 + (rank + 1) * i) call fail('MPI_Scan')
    if (ds(i) /= 0.25d0 * rank * (rank + 1) + (rank + 1) * i) call fail('MPI_Scan double')
  end do
  got(1:n) = mine(1:n)
  call MPI_Exscan(MPI_IN_PLACE, got, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (rank > 0 .and. got(i) /= rank * (rank - 1) / 2 + rank * i) call fail('MPI_Exscan in place')
    if (rank == 0 .and. got(i) /= mine(i)) call fail('MPI_Exscan wrote rank 0')
  end do

  call MPI_Sendrecv(mine, n, MPI_INTEGER, mod(rank + 1, nprocs), 7, got, n, MPI_INTEGER, &
                    mod(rank + nprocs - 1, nprocs), 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (any(got(1:n) /= mine(1:n) - rank + mod(rank + nprocs - 1, nprocs))) call fail('MPI_Sendrecv')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) write (6, '(a)') 'f_collv: ok'
  call MPI_Finalize(ierr)

contains

  subroutine fail(why)
    character(len=*), intent(in) :: why
    integer :: e
    write (0, '(a, i0, a, a)') 'f_collv: rank ', rank, ': FAILED: ', why
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_collv
