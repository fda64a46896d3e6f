"""The result channel from the candidate process to the trusted grader.

Nothing the candidate process sends is ever unpickled: each message is a JSON header frame
(validated by a pydantic model) followed by each tensor it declares as an 8-byte length and the raw
bytes, which the trusted side reads straight into a tensor of the declared size; a length that
differs from the declared size is refused before any byte of it is read. The trusted side accepts
exactly one message per request and checks the echoed nonce (see ``grader``). ``encode``/``decode``
give the same message as one buffer (tests, tools).

The other direction (grader -> candidate) is trusted and uses multiprocessing's pickling, so input
tensors travel as CUDA IPC handles / shared memory instead of copies.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "CallResult", "Failure", "HEADER_LIMIT", "KernelTime", "MESSAGE", "MIN_RATE", "Message", "Outputs", "Ready",
    "TensorMeta", "TooLarge", "WireError", "decode", "dtype_name", "encode", "receive", "send", "tensor_meta",
]

HEADER_LIMIT = 1 << 20  # a header larger than 1 MiB is malformed by definition

_DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
               torch.float8_e5m2, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
               torch.bool)
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class TensorMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dtype: str
    shape: list[int]
    device: str
    nbytes: int = Field(ge=0)
    stride: list[int] | None = None  # the output's strides where it lay (to read the grader's DONE copy)


class KernelTime(BaseModel):
    """One device kernel of a profiled call: its name and its summed device time."""

    model_config = ConfigDict(extra="forbid")
    name: str
    us: float = Field(ge=0)


class Ready(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["ready"] = "ready"
    nonce: str
    device: str
    torch_version: str
    dsl_version: str
    import_s: float
    startup_s: dict[str, float] = {}  # where the worker's start went (interpreter and torch, device, dsl, ...)
    sandbox: str = ""


class CallResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["result"] = "result"
    nonce: str
    seq: int
    elapsed_ns: int = Field(ge=0)
    returned_ns: int = Field(default=0, ge=0)  # until solve returned (host launch work); a diagnostic only
    launches: dict[str, int]
    outputs: list[TensorMeta] | None = None
    threads: int
    dsl_ns: int = Field(default=0, ge=0)  # host time inside DSL launches (the CPU path's DSL share)
    kernels: list[KernelTime] | None = None  # a profiled call's device kernels
    kernel_names: dict[str, list[str]] = {}  # launch site -> the kernel symbols it runs


class Outputs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["outputs"] = "outputs"
    nonce: str
    seq: int
    outputs: list[TensorMeta]


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["failure"] = "failure"
    nonce: str
    seq: int
    stage: Literal["setup", "import", "call"]
    category: Literal["compile", "runtime", "oom", "structure", "violation", "hack", "infra"]
    error_type: str
    message: str
    traceback: str = ""


Message = Annotated[Ready | CallResult | Outputs | Failure, Field(discriminator="kind")]
MESSAGE = TypeAdapter(Message)


class WireError(ValueError):
    """A frame from the candidate process does not follow the protocol."""


class TooLarge(WireError):
    """The declared tensors exceed what any valid answer can hold."""


def encode(header: BaseModel, tensors: list[torch.Tensor] = ()) -> bytes:
    """One frame: u32 header length, JSON header, then each tensor's bytes in order."""
    head = header.model_dump_json().encode()
    parts = [struct.pack("<I", len(head)), head]
    parts += [bytes(_raw(t)) for t in tensors]
    return b"".join(parts)


def _raw(t: torch.Tensor) -> memoryview | bytes:
    """The tensor's bytes in host memory (page-locked staging for a GPU tensor: a fast copy out)."""
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if not flat.numel():
        return b""
    if flat.is_cuda:
        staged = torch.empty(flat.numel(), dtype=torch.uint8, pin_memory=True)
        staged.copy_(flat)
        flat = staged
    else:
        flat = flat.cpu()
    return memoryview(flat.numpy())


def _socket_of(conn) -> socket.socket:
    """A socket on the connection's descriptor (a duplicate: closing it leaves ``conn`` open)."""
    return socket.socket(fileno=os.dup(conn.fileno()))


def send(conn, header: BaseModel, tensors: list[torch.Tensor] = ()) -> None:
    """Write one message: the header frame, then each tensor as its 8-byte length and its bytes."""
    conn.send_bytes(header.model_dump_json().encode())
    if not tensors:
        return
    with _socket_of(conn) as sock:
        for t in tensors:
            raw = _raw(t)
            sock.sendall(struct.pack("<Q", len(raw)))
            if len(raw):
                sock.sendall(raw)


MIN_RATE = 64 << 20  # bytes/s a local socket beats by far: a message slower than this is stalled on purpose


def _read_exactly(sock: socket.socket, into: memoryview, deadline_ns: int, what: str) -> None:
    """Fill ``into`` from the socket by ``deadline_ns`` (monotonic); a sender that has not sent it all by
    then is a malformed message, however it trickles (no byte moves the deadline)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    done = 0
    while done < len(into):
        left_ms = (deadline_ns - time.monotonic_ns()) / 1e6
        if left_ms <= 0 or not poller.poll(left_ms):
            raise WireError(f"{what} never arrived")
        got = sock.recv_into(into[done:], len(into) - done)
        if got == 0:
            if what == "the header" and done == 0:
                raise EOFError  # the worker is gone (its death or refusal is read by the caller)
            raise WireError(f"the channel closed inside {what}")
        done += got


def _read_header(sock: socket.socket, deadline_ns: int) -> bytes:
    """One ``Connection.send_bytes`` frame (a 4-byte big-endian length, then the bytes), read by the
    deadline: ``Connection.recv_bytes`` would wait forever for a header whose first bytes came alone."""
    prefix = bytearray(4)
    _read_exactly(sock, memoryview(prefix), deadline_ns, "the header")
    (size,) = struct.unpack("!i", prefix)
    if size < 0 or size > HEADER_LIMIT:
        raise WireError("header frame larger than any valid header")
    head = bytearray(size)
    _read_exactly(sock, memoryview(head), deadline_ns, "the header's bytes")
    return bytes(head)


def receive(conn, max_bytes: int, pin: bool = False, timeout_s: float = 30.0) -> tuple[Message, list[torch.Tensor]]:
    """Read one message from ``conn``; every size is checked before its bytes are read.

    Each tensor's bytes are read straight into a tensor allocated for them (page-locked when
    ``pin``: the grader's copy to the GPU is then fast), with no intermediate copies. The whole
    message must arrive within ``timeout_s`` plus its declared bytes at ``MIN_RATE``: nothing the
    sender does (a header cut short, bytes trickled one at a time) holds the reader longer.
    """
    started = time.monotonic_ns()
    with _socket_of(conn) as sock:
        head = _read_header(sock, started + int(timeout_s * 1e9))
        try:
            message = MESSAGE.validate_python(json.loads(head))
        except ValueError as exc:
            raise WireError(f"malformed header: {exc}") from exc
        metas = getattr(message, "outputs", None) or []
        tensors, total = [], 0
        for meta in metas:
            total += meta.nbytes
            if total > max_bytes:
                raise TooLarge("the tensors are larger than any valid answer")
        deadline = started + int((timeout_s + total / MIN_RATE) * 1e9)
        for meta in metas:
            dtype = _checked_dtype(meta)
            length = bytearray(8)
            _read_exactly(sock, memoryview(length), deadline, "a tensor")
            if struct.unpack("<Q", length)[0] != meta.nbytes:
                raise WireError("a tensor frame does not match its declared size")
            flat = torch.empty(meta.nbytes, dtype=torch.uint8, pin_memory=pin)
            if meta.nbytes:
                _read_exactly(sock, memoryview(flat.numpy()), deadline, "a tensor")
            tensors.append(flat.view(dtype).reshape(meta.shape))
    return message, tensors


def _checked_dtype(meta: TensorMeta) -> torch.dtype:
    if meta.dtype not in _DTYPES:
        raise WireError(f"unsupported dtype {meta.dtype!r}")
    dtype = _DTYPES[meta.dtype]
    numel = int(np.prod(meta.shape)) if meta.shape else 1
    if any(s < 0 for s in meta.shape) or numel * dtype.itemsize != meta.nbytes:
        raise WireError("tensor metadata is inconsistent")
    return dtype


def tensor_meta(t: torch.Tensor, stride: list[int] | None = None) -> TensorMeta:
    return TensorMeta(dtype=dtype_name(t.dtype), shape=list(t.shape), device=t.device.type,
                      nbytes=t.numel() * t.element_size(), stride=stride)


def decode(frame: bytes) -> tuple[Message, list[torch.Tensor]]:
    """Parse one frame into its validated header and the tensors it carries (CPU, owned copies)."""
    if len(frame) < 4:
        raise WireError("frame shorter than its length prefix")
    (head_len,) = struct.unpack_from("<I", frame)
    if head_len > HEADER_LIMIT or 4 + head_len > len(frame):
        raise WireError("header length out of range")
    try:
        message = MESSAGE.validate_python(json.loads(frame[4:4 + head_len]))
    except ValueError as exc:
        raise WireError(f"malformed header: {exc}") from exc
    metas = getattr(message, "outputs", None) or []
    offset, tensors = 4 + head_len, []
    for meta in metas:
        dtype = _checked_dtype(meta)
        if offset + meta.nbytes > len(frame):
            raise WireError("frame ends before its tensors do")
        raw = bytearray(frame[offset:offset + meta.nbytes])
        offset += meta.nbytes
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        tensors.append(flat.view(dtype).reshape(meta.shape))
    if offset != len(frame):
        raise WireError("trailing bytes after the declared tensors")
    return message, tensors
