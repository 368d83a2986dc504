"""The NCCL stand-in (tests/gpu/emu/nccl) against the contract sparkd's NCCL link relies on,
through ctypes as sparkd reaches it through dlopen: libnccl.so.2 found on LD_LIBRARY_PATH.
Rank 0 runs in the test process, rank 1 in a forked child; the unique id crosses a pipe.
Checked: order and bytes of point-to-point messages, a send that completes only when the
peer receives (blocking and non-blocking communicators), abort of a blocked call, a killed
peer seen as ncclRemoteError, groups that send and receive both ways, size mismatches.
"""
import ctypes
import multiprocessing
import os
import signal
import threading
import time

import pytest

pytestmark = [pytest.mark.cuda_path, pytest.mark.emulated_gpu_only]

SUCCESS, INVALID_ARGUMENT, INVALID_USAGE, REMOTE_ERROR, IN_PROGRESS = 0, 4, 5, 6, 7
FLOAT32 = 7
UNDEF = -2147483648


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int)]


def library():
    lib = ctypes.CDLL("libnccl.so.2")  # the same name sparkd's loader asks for
    for name in ("ncclCommInitRankConfig", "ncclCommGetAsyncError", "ncclCommAbort", "ncclCommDestroy",
                 "ncclSend", "ncclRecv", "ncclGetUniqueId", "ncclGroupStart", "ncclGroupEnd"):
        getattr(lib, name).restype = ctypes.c_int
    lib.ncclCommInitRankConfig.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int,
                                           ctypes.POINTER(Config)]
    for name in ("ncclSend", "ncclRecv"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclCommGetAsyncError.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.ncclCommAbort.argtypes = lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    return lib


class Rank:
    """One rank's communicator. Non-blocking calls are completed with wait(), which polls
    ncclCommGetAsyncError as sparkd's link does."""

    def __init__(self, lib, uid, rank, blocking):
        self.lib, self.rank = lib, rank
        self.comm = ctypes.c_void_p()
        cfg = Config(ctypes.sizeof(Config), 0xcafebeef, 22800, 1 if blocking else 0, UNDEF, UNDEF, UNDEF, None, UNDEF)
        rc = lib.ncclCommInitRankConfig(ctypes.byref(self.comm), 2, uid, rank, ctypes.byref(cfg))
        assert rc in (SUCCESS, IN_PROGRESS), rc
        if not blocking:
            assert self.wait() == SUCCESS

    def state(self):
        s = ctypes.c_int(-1)
        assert self.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(s)) == SUCCESS
        return s.value

    def wait(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.state()
            if s != IN_PROGRESS:
                return s
            time.sleep(0.001)
        raise AssertionError("the communicator stayed in progress")

    def send(self, buf, count=None):
        return self.lib.ncclSend(buf, count if count is not None else len(buf), FLOAT32, 1 - self.rank, self.comm, None)

    def recv(self, buf, count=None):
        return self.lib.ncclRecv(buf, count if count is not None else len(buf), FLOAT32, 1 - self.rank, self.comm, None)


def floats(values):
    return (ctypes.c_float * len(values))(*values)


def run_pair(rank1_body, rank0_body, blocking=False, timeout=60):
    """rank1_body(rank, report) in a forked child, rank0_body(rank, child) here; the child's
    report (a string; "" when all held) is returned beside rank 0's result."""
    lib = library()
    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == SUCCESS
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()

    def child():
        try:
            r = Rank(library(), uid, 1, blocking)
            child_end.send(rank1_body(r) or "")
        except BaseException as e:  # reported to the test, never raised in the fork
            child_end.send(f"rank 1 failed: {e!r}")
        os._exit(0)

    proc = ctx.Process(target=child)
    proc.start()
    try:
        r0 = Rank(lib, uid, 0, blocking)
        result = rank0_body(r0, proc)
        report = parent_end.recv() if parent_end.poll(timeout) else "rank 1 sent no report"
        return result, report
    finally:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()


def test_sends_arrive_in_order_with_their_bytes():
    sizes = [1000, 10, 300_000, 1]

    def rank1(r):
        for i, n in enumerate(sizes):
            buf = (ctypes.c_float * n)()
            assert r.recv(buf) in (SUCCESS, IN_PROGRESS)
            assert r.wait() == SUCCESS
            want = [float(i * 1000 + k % 997) for k in range(n)]
            if list(buf) != want:
                return f"message {i} of {n} floats arrived wrong"
        return ""

    def rank0(r, _):
        for i, n in enumerate(sizes):
            buf = floats([float(i * 1000 + k % 997) for k in range(n)])  # alive until the send completes
            assert r.send(buf) in (SUCCESS, IN_PROGRESS)
            assert r.wait() == SUCCESS

    _, report = run_pair(rank1, rank0)
    assert report == ""


@pytest.mark.parametrize("blocking", [True, False])
def test_a_send_completes_only_when_the_peer_receives(blocking):
    hold = 0.5

    def rank1(r):
        time.sleep(hold)
        buf = (ctypes.c_float * 4)()
        r.recv(buf)
        return "" if r.wait() == SUCCESS and list(buf) == [1.0, 2.0, 3.0, 4.0] else "the receive failed"

    def rank0(r, _):
        buf = floats([1, 2, 3, 4])
        t0 = time.monotonic()
        rc = r.send(buf)
        if not blocking:
            assert rc == IN_PROGRESS
            time.sleep(hold / 2)
            assert r.state() == IN_PROGRESS, "a send completed before the peer posted its receive"
            rc = r.wait()
        assert rc == SUCCESS
        return time.monotonic() - t0

    waited, report = run_pair(rank1, rank0, blocking=blocking)
    assert report == ""
    assert waited >= hold * 0.8, f"the send completed after {waited:.3f} s, before the peer received"


def test_abort_while_blocked_fails_the_call_at_once_and_the_peer_sees_it():
    def rank1(r):
        # Never receives; sees the connection end when rank 0 aborts.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if r.state() == REMOTE_ERROR:
                return ""
            time.sleep(0.01)
        return "rank 1 never saw the abort"

    def rank0(r, _):
        buf = (ctypes.c_float * (4 << 20))()  # 16 MiB: more than the socket buffers hold
        timer = threading.Timer(0.3, lambda: r.lib.ncclCommAbort(r.comm))
        timer.start()
        t0 = time.monotonic()
        rc = r.send(buf)
        took = time.monotonic() - t0
        timer.join()
        return rc, took

    (rc, took), report = run_pair(rank1, rank0, blocking=True)
    assert rc not in (SUCCESS, IN_PROGRESS), "an aborted send reported success"
    assert took < 2, f"the blocked send returned {took:.2f} s after it started (abort at 0.3 s)"
    assert report == ""


def test_a_killed_peer_turns_into_a_remote_error_not_a_hang():
    def rank1(r):
        time.sleep(60)  # killed long before

    def rank0(r, proc):
        buf = floats([1.0] * 1000)
        assert r.send(buf) == IN_PROGRESS
        time.sleep(0.2)
        assert r.state() == IN_PROGRESS
        os.kill(proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        state = r.wait(timeout=10)
        r.lib.ncclCommAbort(r.comm)
        return state, time.monotonic() - t0

    (state, took), report = run_pair(rank1, rank0, timeout=1)
    assert state == REMOTE_ERROR and took < 2, (state, took)


def test_a_group_sends_and_receives_both_ways():
    def exchange(r, mine):
        theirs, ours = (ctypes.c_float * 1000)(), floats([mine] * 1000)
        r.lib.ncclGroupStart()
        r.send(ours)
        r.recv(theirs)
        rc = r.lib.ncclGroupEnd()
        assert rc in (SUCCESS, IN_PROGRESS)
        assert r.wait() == SUCCESS
        return set(theirs)

    def rank1(r):
        return "" if exchange(r, 1.0) == {0.0} else "rank 1 got the wrong bytes"

    got, report = run_pair(rank1, lambda r, _: exchange(r, 0.0))
    assert got == {1.0} and report == ""


def test_a_size_mismatch_is_an_error_on_the_receiver():
    def rank1(r):
        buf = (ctypes.c_float * 8)()
        r.recv(buf)
        state = r.wait()
        return "" if state == INVALID_USAGE else f"state {state}"

    def rank0(r, _):
        buf = floats([1.0] * 16)
        r.send(buf)
        return r.wait()

    state, report = run_pair(rank1, rank0)
    assert report == ""
    assert state == REMOTE_ERROR  # the receiver dropped the connection


def test_bad_arguments_are_refused():
    lib = library()
    uid = UniqueId()
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == SUCCESS
    comm = ctypes.c_void_p()
    assert lib.ncclCommInitRankConfig(ctypes.byref(comm), 3, uid, 0, None) == INVALID_ARGUMENT
    assert lib.ncclCommInitRankConfig(ctypes.byref(comm), 2, UniqueId(), 0, None) == INVALID_ARGUMENT
    assert lib.ncclSend(floats([1.0]), 1, FLOAT32, 1, None, None) == INVALID_ARGUMENT
