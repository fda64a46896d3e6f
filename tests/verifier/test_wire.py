"""The result channel (``verifier.wire``): frames round-trip, and anything malformed is refused.

The trusted side decodes whatever the candidate process writes, so every way a frame can lie
(lengths, metadata, types, trailing data, pickles) must end in ``WireError``, never in a wrong tensor
or an exception of another kind.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import threading
import time

import pytest
import torch

from metakernelbench.verifier.wire import (
    HEADER_LIMIT,
    CallResult,
    Failure,
    Outputs,
    Ready,
    WireError,
    decode,
    encode,
    tensor_meta,
)

TENSORS = [
    torch.randn(3, 5),
    torch.randn(2, 7).to(torch.bfloat16),
    torch.randn(4).to(torch.float16),
    torch.randn(2, 2, dtype=torch.float64),
    torch.randint(-100, 100, (6,), dtype=torch.int64),
    torch.randint(0, 255, (2, 3), dtype=torch.uint8),
    torch.randint(-5, 5, (5,), dtype=torch.int8),
    torch.randint(-5, 5, (5,), dtype=torch.int16),
    torch.randint(-5, 5, (5,), dtype=torch.int32),
    torch.tensor([True, False, True]),
    torch.randn(8).to(torch.float8_e4m3fn),
    torch.randn(8).to(torch.float8_e5m2),
    torch.tensor(3.5),  # 0-d
    torch.empty(0, 4),  # empty
    torch.arange(12.0).reshape(3, 4).t(),  # non-contiguous
]


def _result(tensors, **extra) -> CallResult:
    return CallResult(nonce="ab" * 8, seq=3, elapsed_ns=1234, launches={"tirx:main@x": 1},
                      outputs=[tensor_meta(t) for t in tensors], threads=2, **extra)


def _frame(header: dict, body: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head + body


def _good_header(**changes) -> dict:
    header = json.loads(_result([torch.zeros(2, dtype=torch.float32)]).model_dump_json())
    header.update(changes)
    return header


# ---- round trips ----------------------------------------------------------------------------

def test_call_result_round_trip_keeps_every_dtype_shape_and_value():
    message, tensors = decode(encode(_result(TENSORS), TENSORS))
    assert isinstance(message, CallResult)
    assert message.seq == 3 and message.elapsed_ns == 1234 and message.launches == {"tirx:main@x": 1}
    assert len(tensors) == len(TENSORS)
    for got, want in zip(tensors, TENSORS, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.view(torch.uint8) if got.dim() else got.reshape(1).view(torch.uint8),
                           want.contiguous().view(torch.uint8) if want.dim()
                           else want.reshape(1).view(torch.uint8))


def test_profiled_kernels_and_output_strides_travel_in_the_header():
    from metakernelbench.verifier.wire import KernelTime

    outs = [torch.ones(2, 3).t()]
    header = _result(outs, kernels=[KernelTime(name="kernel_cutlass_x", us=1.5)], dsl_ns=7,
                     kernel_names={"cutedsl:kernel_cutlass_x": ["kernel_cutlass_x"]})
    header.outputs = [tensor_meta(t, list(t.stride())) for t in outs]
    message, tensors = decode(encode(header, outs))
    assert message.kernels[0].name == "kernel_cutlass_x" and message.dsl_ns == 7
    assert message.outputs[0].stride == [1, 3] and torch.equal(tensors[0], outs[0].contiguous())


@pytest.mark.parametrize("header", [
    Ready(nonce="n", device="cpu", torch_version="2", dsl_version="0", import_s=1.5),
    Failure(nonce="n", seq=1, stage="call", category="runtime", error_type="E", message="m", traceback="t"),
    Outputs(nonce="n", seq=2, outputs=[]),
    CallResult(nonce="n", seq=4, elapsed_ns=0, launches={}, threads=1),
])
def test_other_messages_round_trip(header):
    message, tensors = decode(encode(header))
    assert message == header and tensors == []


def test_decoded_tensors_are_owned_copies():
    t = torch.arange(4, dtype=torch.int32)
    frame = bytearray(encode(_result([t]), [t]))
    _, (got,) = decode(bytes(frame))
    frame[-4:] = b"\xff" * 4
    got += 1  # writable, and independent of the frame
    assert torch.equal(got, t + 1)


# ---- malformed frames -----------------------------------------------------------------------

def _malformed():
    good_tensor = struct.pack("<2f", 1.0, 2.0)
    cases = {
        "empty": b"",
        "shorter_than_prefix": b"\x01\x00",
        "header_longer_than_frame": struct.pack("<I", 100) + b"{}",
        "header_over_limit": struct.pack("<I", HEADER_LIMIT + 1) + b"{" * 16,
        "not_json": struct.pack("<I", 5) + b"hello",
        "a_pickle": struct.pack("<I", 20) + pickle.dumps({"kind": "result"})[:20],
        "unknown_kind": _frame({"kind": "verdict", "nonce": "n", "status": "PASSED"}),
        "extra_field": _frame(_good_header(status="PASSED"), good_tensor),
        "missing_field": _frame({k: v for k, v in _good_header().items() if k != "elapsed_ns"}, good_tensor),
        "negative_elapsed": _frame(_good_header(elapsed_ns=-1), good_tensor),
        "wrong_type": _frame(_good_header(seq="three"), good_tensor),
        "unsupported_dtype": _frame(_good_header(outputs=[{"dtype": "complex64", "shape": [1], "device": "cpu",
                                                             "nbytes": 8}]), b"\x00" * 8),
        "nbytes_disagrees_with_shape": _frame(_good_header(outputs=[{"dtype": "float32", "shape": [2],
                                                                       "device": "cpu", "nbytes": 4}]),
                                              good_tensor[:4]),
        "negative_shape": _frame(_good_header(outputs=[{"dtype": "float32", "shape": [-2, -1], "device": "cpu",
                                                          "nbytes": 8}]), good_tensor),
        "negative_nbytes": _frame(_good_header(outputs=[{"dtype": "uint8", "shape": [0], "device": "cpu",
                                                           "nbytes": -1}])),
        "tensor_data_missing": _frame(_good_header(), good_tensor[:4]),
        "trailing_bytes": _frame(_good_header(), good_tensor + b"\x00"),
        "failure_with_unknown_category": _frame({"kind": "failure", "nonce": "n", "seq": 1, "stage": "call",
                                                 "category": "passed", "error_type": "E", "message": "m"}),
    }
    return [pytest.param(frame, id=name) for name, frame in cases.items()]


@pytest.mark.parametrize("frame", _malformed())
def test_malformed_frame_is_refused(frame):
    with pytest.raises(WireError):
        decode(frame)


def test_the_good_frame_of_the_malformed_cases_decodes():
    """The malformed cases are one change away from this frame, which is valid."""
    message, (t,) = decode(_frame(_good_header(), struct.pack("<2f", 1.0, 2.0)))
    assert message.elapsed_ns == 1234 and torch.equal(t, torch.tensor([1.0, 2.0]))


# ---- size limits ----------------------------------------------------------------------------

def _ready_header(device: str) -> dict:
    return {"kind": "ready", "nonce": "n", "device": device, "torch_version": "2", "dsl_version": "0",
            "import_s": 0.0}


def test_header_exactly_at_the_limit_is_read():
    base = len(json.dumps(_ready_header("")).encode())
    frame = _frame(_ready_header("x" * (HEADER_LIMIT - base)))
    assert len(frame) - 4 == HEADER_LIMIT
    message, _ = decode(frame)
    assert isinstance(message, Ready)


def test_header_over_the_limit_is_refused_even_when_well_formed():
    base = len(json.dumps(_ready_header("")).encode())
    with pytest.raises(WireError, match="header length"):
        decode(_frame(_ready_header("x" * (HEADER_LIMIT - base + 1))))


def test_declared_tensor_larger_than_the_frame_is_refused():
    huge = {"dtype": "float32", "shape": [1 << 20, 1 << 10], "device": "cpu", "nbytes": 4 << 30}
    with pytest.raises(WireError, match="ends before"):
        decode(_frame(_good_header(outputs=[huge]), b"\x00" * 64))


# ---- the streaming form the worker and grader use (header frame + one frame per tensor) ----------
def _pair():
    import multiprocessing

    return multiprocessing.Pipe()


def test_send_receive_round_trip():
    from metakernelbench.verifier.wire import receive, send

    a, b = _pair()
    msg = CallResult(nonce="n", seq=1, elapsed_ns=5, launches={"k": 1}, threads=1,
                     outputs=[tensor_meta(t) for t in TENSORS])
    send(a, msg, TENSORS)
    got, tensors = receive(b, 1 << 30)
    assert got == msg
    assert all(torch.equal(x, y) for x, y in zip(tensors, TENSORS, strict=True))
    assert not b.poll(0)  # nothing left on the channel: the next message starts clean


def test_a_channel_closed_inside_a_tensor_is_malformed():
    from metakernelbench.verifier.wire import receive

    a, b = _pair()
    t = torch.zeros(1024)
    msg = CallResult(nonce="n", seq=1, elapsed_ns=5, launches={}, threads=1, outputs=[tensor_meta(t)])
    a.send_bytes(msg.model_dump_json().encode())
    with socket.socket(fileno=os.dup(a.fileno())) as raw:
        raw.sendall(struct.pack("<Q", 4096) + b"\0" * 100)
    a.close()
    with pytest.raises(WireError, match="closed inside a tensor"):
        receive(b, 1 << 30)


def test_a_tensor_larger_than_declared_is_refused_before_it_is_read():
    from metakernelbench.verifier.wire import receive

    a, b = _pair()
    t = torch.zeros(4)
    msg = CallResult(nonce="n", seq=1, elapsed_ns=5, launches={}, threads=1, outputs=[tensor_meta(t)])
    a.send_bytes(msg.model_dump_json().encode())
    a.send_bytes(struct.pack("<Q", 10_000) + b"\0" * 10_000)
    with pytest.raises(WireError, match="does not match its declared size"):
        receive(b, 1 << 30)


def test_declared_tensors_beyond_the_limit_are_too_large():
    from metakernelbench.verifier.wire import TooLarge, receive

    a, b = _pair()
    t = torch.zeros(1024)
    msg = CallResult(nonce="n", seq=1, elapsed_ns=5, launches={}, threads=1, outputs=[tensor_meta(t)])
    a.send_bytes(msg.model_dump_json().encode())
    with pytest.raises(TooLarge):
        receive(b, 100)


def test_a_missing_tensor_frame_is_malformed(monkeypatch):
    from metakernelbench.verifier import wire

    a, b = _pair()
    t = torch.zeros(4)
    msg = CallResult(nonce="n", seq=1, elapsed_ns=5, launches={}, threads=1, outputs=[tensor_meta(t)])
    a.send_bytes(msg.model_dump_json().encode())
    with pytest.raises(WireError, match="never arrived"):
        wire.receive(b, 1 << 30, timeout_s=0.2)


def test_a_header_cut_short_does_not_hold_the_reader():
    """The first bytes of a header frame, then nothing: the reader gives up by its deadline (a blocking
    ``recv_bytes`` would wait for the rest for ever)."""
    from metakernelbench.verifier import wire

    a, b = _pair()
    with socket.socket(fileno=os.dup(a.fileno())) as raw:
        raw.sendall(struct.pack("!i", 100) + b"{")
    raised: list[BaseException] = []

    def read():
        try:
            wire.receive(b, 1 << 30, timeout_s=0.3)
        except BaseException as exc:  # noqa: BLE001 - the test reads it below
            raised.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5.0)
    assert not reader.is_alive(), "the reader still waits for the rest of the header"
    assert len(raised) == 1 and isinstance(raised[0], WireError) and "never arrived" in str(raised[0]), raised


def test_bytes_trickled_one_at_a_time_do_not_move_the_deadline():
    from metakernelbench.verifier import wire

    a, b = _pair()
    frame = json.dumps(_ready_header("cpu")).encode()

    def trickle():
        with socket.socket(fileno=os.dup(a.fileno())) as raw:
            raw.sendall(struct.pack("!i", len(frame)))
            for i in range(len(frame)):
                try:
                    raw.sendall(frame[i:i + 1])
                except OSError:
                    return
                time.sleep(0.05)

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    started = time.perf_counter()
    with pytest.raises(WireError, match="never arrived"):
        wire.receive(b, 1 << 30, timeout_s=0.5)
    assert time.perf_counter() - started < 2.0
    b.close()
    sender.join(10)


def test_a_channel_closed_before_a_message_is_the_end_of_the_worker():
    from metakernelbench.verifier import wire

    a, b = _pair()
    a.close()
    with pytest.raises(EOFError):
        wire.receive(b, 1 << 30)
