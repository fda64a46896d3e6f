"""The timed call's start and end signals, in a page of memory shared by the grader and a worker.

A pickled request and reply over a pipe costs about 1.6 ms with 0.1-0.3 ms of jitter on the H200,
as much as many kernels take, so the grader cannot time a call by its round trip. Instead, for each
call the worker synchronises its device and writes READY; the grader writes the draw into the
worker's input buffers, evicts the L2, synchronises and writes STAGED; the worker runs one tiny kernel
of its own (the GPU's switch back to its CUDA context, ~140 us on an H100, happens there and not in
the call), synchronises and writes TOUCHED; the grader stamps its clock, writes GO, spins until the
worker writes DONE (after ``solve`` returned and the device was synchronised again) and stamps its
clock again. That span, measured by a process the submission cannot reach, is the call's time: it
exceeds the call itself by the two signal latencies, 1-3 us. The stretch from the first byte of the
draw to TOUCHED is timed too: whatever the worker does there beyond what the trusted reference worker
takes for the same stretch is added to the call's time (``timing.window_charges``).

The page is a small file mapped shared (in the evaluation's scratch folder); slots are aligned int64
words, which x86-64 reads and writes atomically. Besides the three signals it holds:

- the output table: before DONE the worker writes where each returned output lies in its memory
  (address and byte extent); on the CPU the grader reads those bytes itself at DONE, from outside the
  process (``outside.read_memory``), and holds the call's final outputs to them;
- the refusal record: the audit hook (``guard``) writes the reason of a refusal here and ends the
  process, so a refusal reaches the grader even though nothing of the worker survives to send it;
- the LOADING mark: a candidate worker writes it when the grader releases it, just before it imports
  the kernel file (still the grader's code), so the grader can start the compile budget's clock at
  the moment the submission begins to run and not before (the worker's own start is not the
  submission's time).

The worker's own stopwatch reading of the same call is sent back too: it can only be shorter than the
grader's span, so a longer one means the signals were forged (rung early by the submission) and the
grade is REWARD_HACK.
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
import time

__all__ = [
    "COPIED", "DONE", "Doorbell", "GO", "LOADING", "MAX_OUTPUTS", "N_OUT", "OUT_TABLE", "READY", "REFUSAL_EXIT",
    "REFUSAL_LEN", "REFUSED", "SIZE", "STAGED", "TEXT_AT", "TOUCHED",
]

READY, GO, DONE = 0, 1, 2
# REFUSED: 0 none, 1 rule violation, 2 tampering (REWARD_HACK); COPIED: the grader took its copy of the outputs;
# LOADING: 1 once the candidate worker starts importing the kernel file
REFUSED, REFUSAL_LEN, N_OUT, COPIED, LOADING = 3, 4, 5, 6, 7
# STAGED: the grader has written the draw (the worker may bring its CUDA context back); TOUCHED: it has
STAGED, TOUCHED = 8, 9
OUT_TABLE = 10  # slots 10.. hold (address, extent in bytes) per output
MAX_OUTPUTS = 56
TEXT_AT = 1024  # byte offset of the refusal text
SIZE = 4096
REFUSAL_EXIT = 86  # the worker's exit code after a refusal
_ns = time.perf_counter_ns


def _folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class Doorbell:
    """One shared page; ``create`` on the grader's side, ``attach`` in the worker."""

    def __init__(self, path: str, fd: int, owner: bool):
        self.path, self.owner = path, owner
        self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        self.slots = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, folder: str | None = None) -> Doorbell:
        """A new page, as a file in ``folder`` (the evaluation's scratch folder: under landlock no
        other evaluation's worker may open it for writing) or in ``/dev/shm``."""
        path = os.path.join(folder or _folder(), f"mkb-bell-{secrets.token_hex(8)}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.ftruncate(fd, SIZE)
        bell = cls(path, fd, owner=True)
        for i in range(SIZE // 8):
            bell.slots[i] = 0
        return bell

    @classmethod
    def attach(cls, path: str) -> Doorbell:
        """Map the page and remove its file at once: nothing imported later can open it by name."""
        bell = cls(path, os.open(path, os.O_RDWR | os.O_CLOEXEC), owner=False)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return bell

    def unlink(self) -> None:
        """Remove the file once both sides have it mapped (nothing is left behind on a crash)."""
        if self.owner:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.unlink()
        try:
            self.slots.release()
            self._map.close()
        except (BufferError, ValueError):
            pass

    # --- worker side ----------------------------------------------------------------------------
    def refusal_reporter(self):
        """The audit hook's way out: record the reason, then end the process (never returns).

        Everything it uses is captured here, so rebinding module names later changes nothing.
        """
        slots, raw, exit_now, length = self.slots, memoryview(self._map), os._exit, len
        limit = SIZE - TEXT_AT

        def report(text: str, hack: bool) -> None:
            try:
                data = text.encode("utf-8", "replace")[:limit]
                raw[TEXT_AT:TEXT_AT + length(data)] = data
                slots[REFUSAL_LEN] = length(data)
            finally:  # whatever went wrong above, the refusal stands and the process ends
                slots[REFUSED] = 2 if hack else 1
                exit_now(REFUSAL_EXIT)

        return report

    def publish_outputs(self, spans: list[tuple[int, int]]) -> None:
        """Where the call's outputs lie (address, extent in bytes), written before DONE; -1 entries
        when the outputs could not be described (the grader then has nothing to read)."""
        slots = self.slots
        n = min(len(spans), MAX_OUTPUTS)
        for i in range(n):
            slots[OUT_TABLE + 2 * i], slots[OUT_TABLE + 2 * i + 1] = spans[i]
        slots[N_OUT] = n if len(spans) <= MAX_OUTPUTS else -1

    def wait_copied(self, seq: int, timeout_s: float) -> bool:
        """After DONE of a call whose outputs the grader reads: hold them (and everything else) until
        it has (False on timeout)."""
        slots = self.slots
        deadline = _ns() + int(timeout_s * 1e9)
        spins = 0
        while slots[COPIED] != seq:
            spins += 1
            if not spins & 0xFFF:
                os.sched_yield()
                if _ns() > deadline:
                    return False
        return True

    def ready_and_wait(self, seq: int, timeout_s: float, warm=None) -> bool:
        """Announce READY for ``seq``, spin until the grader has STAGED the draw, run ``warm`` (the
        worker's own tiny kernel and sync: the GPU switches back to this process's context here,
        not in the call), announce TOUCHED and spin until the grader says GO (False on timeout)."""
        slots = self.slots
        slots[READY] = seq
        deadline = _ns() + int(timeout_s * 1e9)
        spins = 0
        while slots[STAGED] != seq:
            spins += 1
            if not spins & 0xFFFF and _ns() > deadline:
                return False
        if warm is not None:
            warm()
        slots[TOUCHED] = seq
        while slots[GO] != seq:
            spins += 1
            if not spins & 0xFFFF and _ns() > deadline:
                return False
        return True

    def loading(self) -> None:
        """The candidate worker is about to import the kernel file (written before any of it runs)."""
        self.slots[LOADING] = 1

    # --- grader side ----------------------------------------------------------------------------
    def wait_loading(self, deadline_ns: int, alive, nap_s: float = 0.01) -> int | None:
        """Wait until the worker marked LOADING; the grader's clock at the first look that saw it.

        None when ``alive()`` says no first (the worker died or sent a failure) or the deadline passed.
        The mark is written by the grader's own code in the worker before the submission is imported;
        whatever the submission later writes there is never read again.
        """
        while True:
            if self.slots[LOADING]:
                return _ns()
            if not alive() or _ns() > deadline_ns:
                return _ns() if self.slots[LOADING] else None
            time.sleep(nap_s)

    def wait_for(self, slot: int, seq: int, deadline_ns: int, alive, tight_ns: int = 20_000_000,
                 nap_s: float = 20e-6, share_cpu: bool = False) -> int | None:
        """Spin until ``slot`` holds ``seq``; return the clock reading at that moment.

        The first ``tight_ns`` are a pure spin (microsecond resolution for every call a kernel
        benchmark cares about); after that the loop naps ``nap_s`` between looks, so a long call
        (a compile, a slow eager reference) does not hold a core: the added error is then at most
        ``nap_s`` on a call longer than ``tight_ns`` (< 0.1 %). ``alive()`` is asked now and then;
        None means it said no (the worker died or replied with a failure) or the deadline passed.
        ``share_cpu`` (machines with too few cores to give the spin one of its own) yields the CPU
        every few looks, so the spin does not starve the worker it waits for.
        """
        slots = self.slots
        start = _ns()
        spins = 0
        yield_mask = 0x3F if share_cpu else -1
        while True:
            if slots[slot] == seq:
                return _ns()
            spins += 1
            if spins & yield_mask == 0:
                os.sched_yield()
            if spins & 0x3FFF == 0:
                now = _ns()
                if now > deadline_ns or not alive():
                    # the worker writes DONE before it replies: look once more before giving up
                    return _ns() if slots[slot] == seq else None
                if now - start > tight_ns:
                    while True:
                        if slots[slot] == seq:
                            return _ns()
                        time.sleep(nap_s)
                        now = _ns()
                        spins += 1
                        if (spins & 0xFF == 0 and not alive()) or now > deadline_ns:
                            return _ns() if slots[slot] == seq else None

    def refusal(self) -> tuple[bool, str] | None:
        """(tampering, reason) when the worker's audit hook refused something, else None."""
        kind = self.slots[REFUSED]
        if not kind:
            return None
        n = max(0, min(int(self.slots[REFUSAL_LEN]), SIZE - TEXT_AT))
        return kind == 2, bytes(self._map[TEXT_AT:TEXT_AT + n]).decode("utf-8", "replace")

    def output_spans(self) -> list[tuple[int, int]] | None:
        """The output table the worker wrote before DONE (None: it declared it could not)."""
        n = int(self.slots[N_OUT])
        if n < 0 or n > MAX_OUTPUTS:
            return None
        return [(int(self.slots[OUT_TABLE + 2 * i]), int(self.slots[OUT_TABLE + 2 * i + 1])) for i in range(n)]

    def copied(self, seq: int) -> None:
        """The grader has its copy of call ``seq``'s outputs."""
        self.slots[COPIED] = seq

    def staged(self, seq: int) -> int:
        """The draw is in the buffers: the worker may run its own tiny kernel (the clock of the
        window starts here)."""
        stamp = _ns()
        self.slots[STAGED] = seq
        return stamp

    def go(self, seq: int) -> int:
        stamp = _ns()
        self.slots[GO] = seq
        return stamp
