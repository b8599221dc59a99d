! f_idup_inter.f90 - Fortran's MPI_COMM_IDUP (`use mpi`) of an
! intercommunicator.
!
! The plugin leaves intercommunicators to the MPI library, and its
! MPI_COMM_IDUP writes the new handle at once where it does not carry the
! parent (pm_comm_idup); the idup'd intercommunicator must still work.
! The even and odd ranks of MPI_COMM_WORLD make an intercommunicator, idup
! it (completed by MPI_WAIT; the request nulled, the new handle checked:
! an intercommunicator congruent to the parent, of the same remote size),
! then on the idup'd one: the same tag on the parent and on the idup never
! mix, every rank exchanges with every rank of the other side
! (MPI_ISEND + MPI_IRECV + MPI_WAITALL), and an MPI_SSEND each way
! (received with MPI_IRECV + MPI_WAIT); data and statuses checked.  Then MPI_INTERCOMM_MERGE of the idup'd one (an
! intracommunicator, the odd side first) and an MPI_COMM_DUP of
! MPI_COMM_WORLD, each with a Sendrecv exchange between every pair, which
! the plugin carries: so the idup of an intercommunicator does not upset
! the contexts that the plugin derives on the communicators it does carry.
!
! Call families: nonblocking and synchronous only on the
! intercommunicators (check_mpi wants them to go to the MPI library),
! blocking on the merged communicator and the dup (through pinshm).
! MPI_Abort with a message on any failure.
program f_idup_inter
  use mpi
  implicit none
  integer, parameter :: n = 100
  integer :: ierr, rank, nprocs, color, half, hr, hsize, inter, idup, merged, dup, req, rsize, flag_inter
  integer :: cmp, mr, k
  logical :: is_inter

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  color = mod(rank, 2)
  call MPI_Comm_split(MPI_COMM_WORLD, color, rank, half, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_split', ierr)
  call MPI_Comm_rank(half, hr, ierr)
  call MPI_Comm_size(half, hsize, ierr)
  if (hsize /= nprocs / 2) call fail('half size', hsize)
  call MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 60, inter, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Intercomm_create', ierr)

  idup = MPI_COMM_NULL
  req = MPI_REQUEST_NULL
  call MPI_Comm_idup(inter, idup, req, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_idup', ierr)
  if (req == MPI_REQUEST_NULL) call fail('MPI_Comm_idup gave no request', req)
  call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Wait', ierr)
  if (req /= MPI_REQUEST_NULL) call fail('MPI_Wait left the request', req)
  if (idup == MPI_COMM_NULL .or. idup == inter) call fail('the idup handle', idup)
  call MPI_Comm_set_errhandler(idup, MPI_ERRORS_RETURN, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_set_errhandler on the idup', ierr)
  call MPI_Comm_test_inter(idup, is_inter, ierr)
  flag_inter = 0
  if (is_inter) flag_inter = 1
  if (ierr /= MPI_SUCCESS .or. .not. is_inter) call fail('the idup is not an intercommunicator', flag_inter)
  call MPI_Comm_remote_size(idup, rsize, ierr)
  if (ierr /= MPI_SUCCESS .or. rsize /= nprocs / 2) call fail('remote size of the idup', rsize)
  call MPI_Comm_compare(idup, inter, cmp, ierr)
  if (ierr /= MPI_SUCCESS .or. cmp /= MPI_CONGRUENT) call fail('idup vs its parent', cmp)

  call isolation()
  call exchange_inter(idup, 2)
  call ssend_each_way(idup, 3)

  ! Merged: the odd side first (high on the even side).
  call MPI_Intercomm_merge(idup, color == 0, merged, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Intercomm_merge', ierr)
  call MPI_Comm_rank(merged, mr, ierr)
  k = hr
  if (color == 0) k = nprocs / 2 + hr
  if (mr /= k) call fail('merged rank', mr)
  call exchange_sendrecv(merged, 4)
  call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
  if (ierr /= MPI_SUCCESS) call fail('MPI_Comm_dup', ierr)
  call exchange_sendrecv(dup, 5)

  call MPI_Comm_free(dup, ierr)
  call MPI_Comm_free(merged, ierr)
  call MPI_Comm_free(idup, ierr)
  if (ierr /= MPI_SUCCESS .or. idup /= MPI_COMM_NULL) call fail('MPI_Comm_free of the idup', ierr)
  call MPI_Comm_free(inter, ierr)
  call MPI_Comm_free(half, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'f_idup_inter: ok (', nprocs, ' ranks)'
  call MPI_Finalize(ierr)

contains

  integer function val(from, to, what, i)
    integer, intent(in) :: from, to, what, i
    val = from * 1000003 + to * 10007 + what * 101 + i
  end function val

  ! rbuf holds what WORLD rank wfrom sent for what; st names source, tag.
  subroutine check(rbuf, wfrom, source, what, tag, st)
    integer, intent(in) :: rbuf(n), wfrom, source, what, tag, st(MPI_STATUS_SIZE)
    integer :: i, cnt, e
    call MPI_Get_count(st, MPI_INTEGER, cnt, e)
    if (st(MPI_SOURCE) /= source .or. st(MPI_TAG) /= tag .or. cnt /= n) call fail('status', st(MPI_SOURCE))
    do i = 1, n
      if (rbuf(i) /= val(wfrom, rank, what, i)) call fail('data', i)
    end do
  end subroutine check

  ! The WORLD rank of rank r of the other side.
  integer function remote_world(r)
    integer, intent(in) :: r
    remote_world = 2 * r + 1 - color
  end function remote_world

  ! The same remote rank and tag on the parent and on the idup: the one
  ! sent second (on the idup) received first, then the parent's.
  subroutine isolation()
    integer :: a, b, x, y, r, rq(2), st(MPI_STATUS_SIZE), e
    a = 1000 + rank
    b = 2000 + rank
    x = -1
    y = -1
    call MPI_Isend(a, 1, MPI_INTEGER, hr, 1, inter, rq(1), e)
    call MPI_Isend(b, 1, MPI_INTEGER, hr, 1, idup, rq(2), e)
    call MPI_Irecv(y, 1, MPI_INTEGER, hr, 1, idup, r, e)
    call MPI_Wait(r, st, e)
    if (e /= MPI_SUCCESS .or. st(MPI_SOURCE) /= hr .or. y /= 2000 + remote_world(hr)) call fail('on the idup', y)
    call MPI_Irecv(x, 1, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, inter, r, e)
    call MPI_Wait(r, st, e)
    if (e /= MPI_SUCCESS .or. st(MPI_SOURCE) /= hr .or. st(MPI_TAG) /= 1 .or. x /= 1000 + remote_world(hr)) &
      call fail('on the parent', x)
    call MPI_Waitall(2, rq, MPI_STATUSES_IGNORE, e)
    if (e /= MPI_SUCCESS) call fail('isolation: MPI_Waitall', e)
  end subroutine isolation

  ! With every rank of the other side: Irecv + Isend + Waitall.
  subroutine exchange_inter(comm, what)
    integer, intent(in) :: comm, what
    integer :: r, i, e, tag, rq(2), sbuf(n), rbuf(n), st(MPI_STATUS_SIZE, 2)
    do r = 0, rsize - 1
      tag = what * 100 + hr * 10 + r
      do i = 1, n
        sbuf(i) = val(rank, remote_world(r), what, i)
      end do
      rbuf = 0
      ! Rank r of the other side sends with its tag what*100 + r*10 + hr.
      call MPI_Irecv(rbuf, n, MPI_INTEGER, r, what * 100 + r * 10 + hr, comm, rq(1), e)
      call MPI_Isend(sbuf, n, MPI_INTEGER, r, tag, comm, rq(2), e)
      call MPI_Waitall(2, rq, st, e)
      if (e /= MPI_SUCCESS) call fail('exchange_inter: MPI_Waitall', e)
      call check(rbuf, remote_world(r), r, what, what * 100 + r * 10 + hr, st(:, 1))
    end do
  end subroutine exchange_inter

  ! MPI_SSEND to the same rank of the other side, the even side first.
  subroutine ssend_each_way(comm, what)
    integer, intent(in) :: comm, what
    integer :: turn, i, e, r, sbuf(n), rbuf(n), st(MPI_STATUS_SIZE)
    do i = 1, n
      sbuf(i) = val(rank, remote_world(hr), what, i)
    end do
    do turn = 0, 1
      if (turn == color) then
        call MPI_Ssend(sbuf, n, MPI_INTEGER, hr, what, comm, e)
        if (e /= MPI_SUCCESS) call fail('MPI_Ssend', e)
      else
        rbuf = 0
        call MPI_Irecv(rbuf, n, MPI_INTEGER, hr, what, comm, r, e)
        call MPI_Wait(r, st, e)
        if (e /= MPI_SUCCESS) call fail('MPI_Irecv + MPI_Wait of an MPI_Ssend', e)
        call check(rbuf, remote_world(hr), hr, what, what, st)
      end if
    end do
  end subroutine ssend_each_way

  ! With every other rank of the intracommunicator comm: MPI_SENDRECV.
  subroutine exchange_sendrecv(comm, what)
    integer, intent(in) :: comm, what
    integer :: me, d, peer, i, e, tag, wpeer(1), sbuf(n), rbuf(n), st(MPI_STATUS_SIZE), wg, cg
    call MPI_Comm_rank(comm, me, e)
    call MPI_Comm_group(comm, cg, e)
    call MPI_Comm_group(MPI_COMM_WORLD, wg, e)
    do d = 1, nprocs - 1
      peer = ieor(me, d)
      call MPI_Group_translate_ranks(cg, 1, [peer], wg, wpeer, e)
      tag = what * 10 + d
      do i = 1, n
        sbuf(i) = val(rank, wpeer(1), what, i)
      end do
      rbuf = 0
      call MPI_Sendrecv(sbuf, n, MPI_INTEGER, peer, tag, rbuf, n, MPI_INTEGER, peer, tag, comm, st, e)
      if (e /= MPI_SUCCESS) call fail('MPI_Sendrecv', e)
      call check(rbuf, wpeer(1), peer, what, tag, st)
    end do
    call MPI_Group_free(cg, e)
    call MPI_Group_free(wg, e)
  end subroutine exchange_sendrecv

  subroutine fail(why, v)
    character(len=*), intent(in) :: why
    integer, intent(in) :: v
    integer :: e
    write (0, '(a, i0, a, a, a, i0, a)') 'f_idup_inter: rank ', rank, ': FAILED: ', why, ' (', v, ')'
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
  end subroutine fail
end program f_idup_inter
