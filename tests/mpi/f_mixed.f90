! f_mixed.f90 - the Fortran half of mixed_cf (mixed_cf.c has the C half
! and the main program): receives what C sent, answers it, posts a receive
! that C completes, and drives persistent requests that C made.  The
! values: from * 1000003 + to * 10007 + what * 101 + i, as in C.

! Receive tag 1 (any source, any tag) and answer with tag 2.
subroutine f_mixed_recv(peer, n) bind(C, name='f_mixed_recv')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: peer, n
  integer :: buf(n), st(MPI_STATUS_SIZE), req, rank, cnt, ierr, i
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  buf = -1
  call MPI_Recv(buf, n, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, st, ierr)
  call MPI_Get_count(st, MPI_INTEGER, cnt, ierr)
  if (ierr /= MPI_SUCCESS .or. st(MPI_SOURCE) /= peer .or. st(MPI_TAG) /= 1 .or. cnt /= n) &
    call f_mixed_fail('Recv from C: status', st(MPI_SOURCE))
  do i = 1, n
    if (buf(i) /= peer * 1000003 + rank * 10007 + 101 + i) call f_mixed_fail('Recv from C: data', i)
    buf(i) = rank * 1000003 + peer * 10007 + 2 * 101 + i
  end do
  call MPI_Isend(buf, n, MPI_INTEGER, peer, 2, MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  if (ierr /= MPI_SUCCESS .or. req /= MPI_REQUEST_NULL) call f_mixed_fail('Isend to C', ierr)
end subroutine f_mixed_recv

! Post a receive of tag 3 into buf; C waits for it.
integer(c_int) function f_mixed_irecv(buf, peer, n) bind(C, name='f_mixed_irecv')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: peer, n
  integer(c_int) :: buf(n)
  integer :: req, ierr
  call MPI_Irecv(buf, n, MPI_INTEGER, peer, 3, MPI_COMM_WORLD, req, ierr)
  if (ierr /= MPI_SUCCESS) call f_mixed_fail('Irecv', ierr)
  f_mixed_irecv = req
end function f_mixed_irecv

! Start and complete C's persistent receive and send (tag 4) for a few
! rounds: they stay valid; the data arrives.
subroutine f_mixed_persistent(rreq, sreq, sbuf, rbuf, peer, n) bind(C, name='f_mixed_persistent')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: rreq, sreq, peer, n
  integer(c_int) :: sbuf(n), rbuf(n)
  integer :: reqs(2), sts(MPI_STATUS_SIZE, 2), rank, round, i, ierr
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  reqs = [rreq, sreq]
  do round = 1, 3
    do i = 1, n
      sbuf(i) = rank * 1000003 + peer * 10007 + (10 + round) * 101 + i
    end do
    rbuf = -1
    if (round == 2) then
      call MPI_Start(reqs(1), ierr)
      call MPI_Start(reqs(2), ierr)
    else
      call MPI_Startall(2, reqs, ierr)
    end if
    if (ierr /= MPI_SUCCESS) call f_mixed_fail('Start of a request made in C', ierr)
    call MPI_Waitall(2, reqs, sts, ierr)
    if (ierr /= MPI_SUCCESS .or. reqs(1) /= rreq .or. reqs(2) /= sreq) &
      call f_mixed_fail('Waitall changed a persistent request', round)
    if (sts(MPI_SOURCE, 1) /= peer .or. sts(MPI_TAG, 1) /= 4) call f_mixed_fail('persistent: status', round)
    do i = 1, n
      if (rbuf(i) /= peer * 1000003 + rank * 10007 + (10 + round) * 101 + i) &
        call f_mixed_fail('persistent: data', i)
    end do
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
  end do
end subroutine f_mixed_persistent

! Post n receives of one integer each, tag 1000 + position, into bufs.
subroutine f_mixed_many_post(reqs, bufs, peer, n) bind(C, name='f_mixed_many_post')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: peer, n
  integer(c_int) :: reqs(n), bufs(n)
  integer :: i, ierr
  bufs = -1
  do i = 1, n
    call MPI_Irecv(bufs(i), 1, MPI_INTEGER, peer, 1000 + i, MPI_COMM_WORLD, reqs(i), ierr)
    if (ierr /= MPI_SUCCESS) call f_mixed_fail('Irecv of many', i)
  end do
end subroutine f_mixed_many_post

! Testany, Testsome and Testall over the n receives, calls times each,
! while nothing has come: none finds one, none changes a request.  The
! arrays are the caller's, so that nothing here allocates.
subroutine f_mixed_many_test(reqs, sts, ind, n, calls) bind(C, name='f_mixed_many_test')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: n, calls
  integer(c_int) :: reqs(n), sts(MPI_STATUS_SIZE, n), ind(n)
  integer :: k, idx, outcount, ierr
  logical :: flag
  do k = 1, calls
    call MPI_Testany(n, reqs, idx, flag, sts(:, 1), ierr)
    if (ierr /= MPI_SUCCESS .or. flag .or. idx /= MPI_UNDEFINED) call f_mixed_fail('Testany of many', idx)
    call MPI_Testsome(n, reqs, outcount, ind, sts, ierr)
    if (ierr /= MPI_SUCCESS .or. outcount /= 0) call f_mixed_fail('Testsome of many', outcount)
    call MPI_Testall(n, reqs, flag, sts, ierr)
    if (ierr /= MPI_SUCCESS .or. flag) call f_mixed_fail('Testall of many', k)
  end do
  if (any(reqs == MPI_REQUEST_NULL)) call f_mixed_fail('a test of many nulled a request', k)
end subroutine f_mixed_many_test

! Complete the n receives with Waitany, Testany, Waitsome and Testsome in
! turn: each position once, with its message.
subroutine f_mixed_many_finish(reqs, sts, ind, bufs, peer, n) bind(C, name='f_mixed_many_finish')
  use mpi
  use, intrinsic :: iso_c_binding, only : c_int
  implicit none
  integer(c_int), value :: peer, n
  integer(c_int) :: reqs(n), sts(MPI_STATUS_SIZE, n), ind(n), bufs(n)
  integer :: which, got, outcount, k, i, rank, ierr
  logical :: flag
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  got = 0
  which = 0
  do while (got < n)
    outcount = 0
    select case (which)
    case (0)
      call MPI_Waitany(n, reqs, ind(1), sts(:, 1), ierr)
      outcount = 1
    case (1)
      call MPI_Testany(n, reqs, ind(1), flag, sts(:, 1), ierr)
      outcount = merge(1, 0, flag)
    case (2)
      call MPI_Waitsome(n, reqs, outcount, ind, sts, ierr)
    case default
      call MPI_Testsome(n, reqs, outcount, ind, sts, ierr)
    end select
    if (ierr /= MPI_SUCCESS .or. outcount < 0) call f_mixed_fail('completing many', which)
    do k = 1, outcount
      i = ind(k)
      if (i < 1 .or. i > n) call f_mixed_fail('completing many: index', i)
      if (reqs(i) /= MPI_REQUEST_NULL) call f_mixed_fail('completing many: request left', i)
      if (sts(MPI_TAG, k) /= 1000 + i .or. sts(MPI_SOURCE, k) /= peer) call f_mixed_fail('completing many: status', i)
      if (bufs(i) /= peer * 1000003 + rank * 10007 + 5 * 101 + i) call f_mixed_fail('completing many: data', i)
      bufs(i) = -2 ! seen
    end do
    got = got + outcount
    which = mod(which + 1, 4)
  end do
end subroutine f_mixed_many_finish

subroutine f_mixed_fail(why, what)
  use mpi
  implicit none
  character(len=*), intent(in) :: why
  integer, intent(in) :: what
  integer :: rank, ierr
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  write (0, '(a, i0, a, a, a, i0, a)') 'mixed_cf: rank ', rank, ': FAILED in Fortran: ', why, ' (', what, ')'
  call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
end subroutine f_mixed_fail
