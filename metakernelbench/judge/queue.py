"""One timed evaluation per device at a time, across every attempt: a worker thread per device slot.

The queue itself is the ``submissions`` table (``store``): a slot claims the next queued row (final
grades before feedback, then first come first served), runs it through the isolation backend and
writes the verdict. Because the rows are the queue, a restart resumes exactly where the judge
stopped. An evaluation interrupted by a judge restart runs again; interrupted a second time while
the same submission ran, it is charged as tampering (the grader's own process is the only thing a
submission could have used to stop the judge twice).
"""

from __future__ import annotations

import logging
import threading
import time

from metakernelbench.verifier.result import Status, failure

from .isolation import EvalOutcome, EvalRequest, Isolation
from .store import Store, Submission

__all__ = ["MAX_TRIES", "Scheduler"]

log = logging.getLogger("metakernelbench.judge")
MAX_TRIES = 2


class Scheduler:
    """Device slots pulling from the store; ``wake()`` after queueing something."""

    def __init__(self, store: Store, isolation: Isolation, devices: list[str]):
        if not devices:
            raise ValueError("the judge needs at least one device")
        self.store, self.isolation, self.devices = store, isolation, devices
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.busy: dict[str, int | None] = dict.fromkeys(devices)

    def start(self) -> None:
        for slot, device in enumerate(self.devices):
            t = threading.Thread(target=self._loop, args=(slot, device), name=f"judge-slot-{slot}", daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.wake()
        for t in self._threads:
            t.join(timeout)

    def abandon(self) -> None:
        """Stop claiming work and never record what is running (a crash, for tests)."""
        self._abandoned = True
        self._stop.set()
        self.wake()

    _abandoned = False

    def _loop(self, slot: int, device: str) -> None:
        while not self._stop.is_set():
            if not self.isolation.available(device):  # a remote device can be lost (engine_ray)
                log.error("device %s is gone: its slot claims no more work", device)
                return
            sub = self.store.claim(device)
            if sub is None:
                self._idle(slot, device)
                with self._cond:
                    self._cond.wait(timeout=1.0)
                continue
            self.busy[device] = sub.id
            try:
                self._evaluate(sub, slot, device)
            except Exception as exc:  # noqa: BLE001 - a judge bug must not kill the slot
                if self._abandoned:
                    return
                log.exception("evaluation %s failed inside the judge", sub.id)
                res = failure(Status.INFRA_ERROR, sub.problem, sub.dsl, f"judge fault: {type(exc).__name__}: {exc}")
                self.store.finish(sub.id, res.model_dump(mode="json"), charged=False)
            finally:
                self.busy[device] = None

    def _idle(self, slot: int, device: str) -> None:
        """Nothing queued for the slot: let the isolation prepare its next evaluation (``idle``: the
        subprocess isolation's pool of warm runners). From this thread, which lives as long as the slot:
        a runner started here dies with its parent thread (``runner._undumpable``)."""
        try:
            self.isolation.idle(slot, device)
        except Exception:  # noqa: BLE001 - a judge bug must not kill the slot
            log.exception("slot %s: preparing the next evaluation failed", slot)

    def _evaluate(self, sub: Submission, slot: int, device: str) -> None:
        if sub.tries > MAX_TRIES:
            res = failure(Status.REWARD_HACK, sub.problem, sub.dsl,
                          "the judge stopped twice while this submission was being evaluated")
            self.store.finish(sub.id, res.model_dump(mode="json"), charged=sub.kind == "feedback")
            return
        source = self.store.source(sub.id)
        req = EvalRequest(sub.id, sub.problem, sub.dsl, source)
        started = time.time()
        log.info("evaluating submission %s (%s %s, %s) on %s", sub.id, sub.problem, sub.dsl, sub.kind, device)
        outcome: EvalOutcome = self.isolation.evaluate(req, device, slot, lambda s: self.store.set_stage(sub.id, s))
        if self._abandoned:
            return
        result = dict(outcome.result)
        charged = outcome.charged and sub.kind == "feedback"
        self.store.finish(sub.id, result, charged=charged)
        log.info("submission %s: %s in %.1f s (charged: %s)", sub.id, result.get("status"),
                 time.time() - started, charged)
