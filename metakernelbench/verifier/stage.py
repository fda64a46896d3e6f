"""The grader's input buffers for one worker, written with each draw only after the worker is READY.

A draw must not reach the candidate's process before its call's clock starts: whatever can run there
(the submission, or anything it redefined in the worker's own preparation) could compute the answer
before the clock. So the worker holds *buffers* of the draw's layout, allocated here (shared memory on
the CPU, CUDA memory shared by IPC on the GPU), and sent to it once per layout; for every call the
grader writes the draw into them from this process after READY, evicts the L2 (a buffer twice its size
copied here), synchronises, and rings STAGED; the worker brings its own CUDA context back onto the GPU
(one tiny kernel: the switch away from this process's context costs ~140 us on an H100 and must not
land in the call) and rings TOUCHED, and only then does the grader stamp its clock and ring GO
(``launch``). The stretch from the draw's first byte to TOUCHED is timed, and what the candidate takes
there beyond the trusted reference worker is charged to its call (``timing.window_charges``). In-place
outputs are therefore updated in the grader's own memory, where it reads them.

Inputs that share memory in a draw share it in the buffers (one buffer per distinct storage, every
view rebuilt with its offset and strides). Python numbers in a draw (the NVFP4 problems' global
scales) travel with each request: a number alone gives nothing to compute on.
"""

from __future__ import annotations

from typing import Any

import torch

from .device import DeviceTools

__all__ = ["InputStage"]


def _layout(draw: tuple) -> tuple:
    """What must match for a draw to reuse the buffers: per input, its tensor layout and the storage it
    shares with the inputs before it, or just 'a number' for a Python value."""
    keys: dict[tuple[str, int], int] = {}
    out: list[Any] = []
    for x in draw:
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            key = (str(x.device), storage.data_ptr())
            index = keys.setdefault(key, len(keys))
            out.append((x.dtype, tuple(x.shape), tuple(x.stride()), x.storage_offset(), index, storage.nbytes(),
                        str(x.device)))
        else:
            out.append(("value", type(x).__name__))
    return tuple(out)


class InputStage:
    """One worker's input buffers: ``prepare`` before a request, ``fill`` after its READY."""

    def __init__(self, device: torch.device):
        self.device = device
        self.layout: tuple | None = None
        self.views: tuple = ()
        self.pairs: list[tuple[int, torch.UntypedStorage]] = []  # (draw input index, its buffer's storage)
        self._tools = DeviceTools.create(device)  # the L2 flush and the device-wide sync

    def prepare(self, draw: tuple) -> tuple | None:
        """The buffers to send with this request (None: the worker's last ones fit this draw)."""
        layout = _layout(draw)
        if layout == self.layout:
            return None
        buffers: dict[int, torch.UntypedStorage] = {}
        views: list[Any] = []
        self.pairs = []
        for i, (x, shape) in enumerate(zip(draw, layout, strict=True)):
            if not isinstance(x, torch.Tensor):
                views.append(None)
                continue
            index = shape[4]
            if index not in buffers:
                nbytes = x.untyped_storage().nbytes()
                storage = torch.empty(nbytes, dtype=torch.uint8, device=x.device).untyped_storage()
                if x.device.type == "cpu":
                    storage.share_memory_()
                buffers[index] = storage
                self.pairs.append((i, storage))
            view = torch.empty(0, dtype=x.dtype, device=x.device)
            view.set_(buffers[index], x.storage_offset(), x.size(), x.stride())
            views.append(view)
        self.layout, self.views = layout, tuple(views)
        return self.views

    @staticmethod
    def values(draw: tuple) -> list[tuple[int, Any]]:
        """The draw's Python numbers, by position (sent with every request)."""
        return [(i, x) for i, x in enumerate(draw) if not isinstance(x, torch.Tensor)]

    def fill(self, draw: tuple) -> None:
        """Write the draw into the buffers, evict the L2 and wait for the device (after READY)."""
        for i, storage in self.pairs:
            storage.copy_(draw[i].untyped_storage())
        self._tools.cold_l2()
        self._tools.sync()

    def inputs(self, draw: tuple) -> tuple:
        """The call's inputs as the grader sees them afterwards: the buffers (in-place results, and
        any change the call made) and the draw's numbers."""
        return tuple(v if isinstance(v, torch.Tensor) else x for v, x in zip(self.views, draw, strict=True))
