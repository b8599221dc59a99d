! f_comms.f90 - communicators made from Fortran (`use mpi`) are carried.
!
! MPI_COMM_DUP, MPI_COMM_DUP_WITH_INFO, MPI_COMM_SPLIT, MPI_COMM_SPLIT_TYPE,
! MPI_COMM_CREATE, MPI_COMM_CREATE_GROUP, MPI_CART_CREATE (LOGICAL periods)
! and MPI_CART_SUB, MPI_GRAPH_CREATE, MPI_DIST_GRAPH_CREATE_ADJACENT
! (MPI_UNWEIGHTED), and MPI_INTERCOMM_MERGE of an
! intercommunicator between the even and the odd ranks; on each, a ring
! exchange both ways (Sendrecv from MPI_ANY_SOURCE, Irecv/Isend/Waitall)
! with data and statuses checked, then MPI_COMM_FREE.  check_mpi's stats
! show whether that traffic went through pinshm (on one node, none may go
! to the MPI library).  MPI_Abort with a message on any failure.
program f_comms
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, c, c2, grp, inter, half, info, i, what
  integer :: dims(1), nodes_index(64), edges(128), srcs(1), dsts(1)
  logical :: periods(1), remain(1)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  if (nprocs > 64) call fail('at most 64 ranks', nprocs)
  what = 0

  call MPI_Comm_dup(MPI_COMM_WORLD, c, ierr)
  call ring(c, 'Comm_dup')
  call MPI_Comm_dup(MPI_COMM_WORLD, c, ierr)

  call MPI_Info_create(info, ierr)
  call MPI_Comm_dup_with_info(c, info, c2, ierr)
  call MPI_Info_free(info, ierr)
  call MPI_Comm_free(c, ierr)
  call ring(c2, 'Comm_dup_with_info')

  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), -rank, c, ierr)
  call ring(c, 'Comm_split')

  call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, c, ierr)
  call ring(c, 'Comm_split_type')

  call MPI_Comm_group(MPI_COMM_WORLD, grp, ierr)
  call MPI_Comm_create(MPI_COMM_WORLD, grp, c, ierr)
  call ring(c, 'Comm_create')
  call MPI_Comm_create_group(MPI_COMM_WORLD, grp, 7, c, ierr)
  call ring(c, 'Comm_create_group')
  call MPI_Group_free(grp, ierr)

  dims(1) = nprocs
  periods(1) = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., c, ierr)
  remain(1) = .true.
  call MPI_Cart_sub(c, remain, c2, ierr)
  call ring(c, 'Cart_create')
  call ring(c2, 'Cart_sub')

  ! A ring graph: node i's neighbours are i - 1 and i + 1.
  do i = 1, nprocs
    nodes_index(i) = 2 * i
    edges(2 * i - 1) = mod(i - 2 + nprocs, nprocs)
    edges(2 * i) = mod(i, nprocs)
  end do
  call MPI_Graph_create(MPI_COMM_WORLD, nprocs, nodes_index, edges, .false., c, ierr)
  call ring(c, 'Graph_create')

  srcs(1) = mod(rank - 1 + nprocs, nprocs)
  dsts(1) = mod(rank + 1, nprocs)
  call MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, srcs, MPI_UNWEIGHTED, 1, dsts, MPI_UNWEIGHTED, &
                                      MPI_INFO_NULL, .false., c, ierr)
  call ring(c, 'Dist_graph_create_adjacent')
  ! Not MPI_DIST_GRAPH_CREATE: Open MPI 4.1's topo/treematch hangs in it now
  ! and then with ranks oversubscribed (open-mpi/ompi#8991), plugin or not.

  ! Even and odd ranks, joined by an intercommunicator (the library's), merged.
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), rank, half, ierr)
  call MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - mod(rank, 2), 9, inter, ierr)
  call MPI_Intercomm_merge(inter, mod(rank, 2) == 1, c, ierr)
  call ring(c, 'Intercomm_merge')
  call MPI_Comm_free(inter, ierr)
  call MPI_Comm_free(half, ierr)

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'f_comms: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  ! Around @comm both ways; frees it.
  subroutine ring(comm, where)
    integer, intent(inout) :: comm
    character(len=*), intent(in) :: where
    integer, parameter :: n = 200
    integer :: me, sz, next, prev, sbuf(n), rbuf(n), rbuf2(n), reqs(2), st(MPI_STATUS_SIZE), k, e
    if (comm == MPI_COMM_NULL) call fail(where // ': MPI_COMM_NULL', 0)
    what = what + 1
    call MPI_Comm_rank(comm, me, e)
    call MPI_Comm_size(comm, sz, e)
    next = mod(me + 1, sz)
    prev = mod(me - 1 + sz, sz)
    do k = 1, n
      sbuf(k) = me * 100003 + what * 1009 + k
    end do
    rbuf = -1
    call MPI_Sendrecv(sbuf, n, MPI_INTEGER, next, what, rbuf, n, MPI_INTEGER, MPI_ANY_SOURCE, what, comm, st, e)
    if (e /= MPI_SUCCESS) call fail(where // ': Sendrecv', e)
    if (st(MPI_SOURCE) /= prev .or. st(MPI_TAG) /= what) call fail(where // ': Sendrecv status', st(MPI_SOURCE))
    rbuf2 = -1
    call MPI_Irecv(rbuf2, n, MPI_INTEGER, next, what + 1000, comm, reqs(1), e)
    call MPI_Isend(sbuf, n, MPI_INTEGER, prev, what + 1000, comm, reqs(2), e)
    call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, e)
    do k = 1, n
      if (rbuf(k) /= prev * 100003 + what * 1009 + k) call fail(where // ': data from prev', k)
      if (rbuf2(k) /= next * 100003 + what * 1009 + k) call fail(where // ': data from next', k)
    end do
    call MPI_Comm_free(comm, e)
    if (comm /= MPI_COMM_NULL) call fail(where // ': Comm_free', comm)
  end subroutine ring

  subroutine fail(why, v)
    character(len=*), intent(in) :: why
    integer, intent(in) :: v
    integer :: e
    write (0, '(a, i0, a, a, a, i0, a)') 'f_comms: rank ', rank, ': FAILED: ', why, ' (', v, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_comms
