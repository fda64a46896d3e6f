"""Device-side timing helpers: device-wide sync, cold L2 and no persisting-L2 carve-out.

The same functions serve the candidate and the eager reference, so both sides pay identical
overheads. On a CPU device (the tests) flushing is a no-op and sync does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DeviceTools"]

_synchronize = torch.cuda.synchronize  # bound at import, before any submission code runs


@dataclass
class DeviceTools:
    device: torch.device
    flush_buffer: torch.Tensor | None = None
    flush_source: torch.Tensor | None = None
    touch_buffer: torch.Tensor | None = None
    cudart: object | None = None

    @classmethod
    def create(cls, device: torch.device, flush: bool = True) -> DeviceTools:
        """``flush``: allocate the L2 flush buffer (the grader's input stage flushes before each call;
        a worker does not flush, since the grader does it from outside, so it passes False and keeps the GPU memory)."""
        tools = cls(device)
        if device.type == "cuda":
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            if flush:
                size = max(2 * l2, 8 << 20)
                tools.flush_buffer = torch.empty(size, dtype=torch.uint8, device=device)
                tools.flush_source = torch.empty(size, dtype=torch.uint8, device=device)
            else:
                tools.touch_buffer = torch.zeros(1, dtype=torch.int32, device=device)
            try:
                from cuda.bindings import runtime as cudart

                tools.cudart = cudart
            except ImportError:  # no cuda-bindings: persisting-L2 reset unavailable (recorded)
                tools.cudart = None
        return tools

    def sync(self) -> None:
        """Wait for all work on every stream of the device (not just the current stream)."""
        if self.device.type == "cuda":
            _synchronize(self.device)

    def reset_persisting_l2(self) -> bool:
        """Set the persisting-L2 limit to 0 and evict persisting lines; False when unavailable."""
        if self.cudart is None:
            return False
        rt = self.cudart
        rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, 0)
        rt.cudaCtxResetPersistingL2Cache()
        return True

    def persisting_l2_bytes(self) -> int:
        """The persisting-L2 carve-out now set (0: none; also 0 when cuda-bindings is unavailable).

        A query, not a reset: setting the limit before every call made the next CuTe DSL launch's
        host side ~30 us slower on the H200 (``results/h200/drift.json``), so the worker sets the
        limit to 0 once and checks after each call that it stayed there (``Worker``).
        """
        if self.cudart is None:
            return 0
        err, value = self.cudart.cudaDeviceGetLimit(self.cudart.cudaLimit.cudaLimitPersistingL2CacheSize)
        return int(value) if int(err) == 0 else 0

    def cold_l2(self) -> None:
        """Evict the L2 by copying a buffer twice its size over another (no persisting lines can
        survive it: the worker keeps the persisting carve-out at 0, see ``persisting_l2_bytes``).

        The input stage runs this in the grader's CUDA context right before STAGED; the worker then
        takes the GPU's switch back to its own context in ``touch``, outside the call's span.
        """
        if self.flush_buffer is not None:
            self.flush_buffer.copy_(self.flush_source)

    def touch(self) -> None:
        """One tiny kernel in this process's context (a worker, between STAGED and TOUCHED): after the
        grader's stage ran in the grader's context, the GPU's switch back to this context (~140 us on
        an H100, ``results/h200/context-switch.json``) happens here instead of in the call's first
        launch."""
        if self.touch_buffer is not None:
            self.touch_buffer.add_(1)

    def name(self) -> str:
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return "cpu"
