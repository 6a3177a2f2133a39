"""Pieces that need no server: error mapping, the TFRecord writer, the torch guard."""

from __future__ import annotations

import importlib.util
import struct

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from readerd.errors import ReaderdError, from_arrow
from readerd.tfrecord import common_prefix, crc32c, example, frame, masked_crc32c


def test_error_codes_and_messages_come_from_the_grpc_status() -> None:
    cases = [
        (
            flight.FlightInternalError(
                "gRPC returned data loss error, with message: a.tfrecord: corrupted record at 339. gRPC client "
                "debug context: DATA_LOSS:a.tfrecord: corrupted record at 339. Client context: OK"
            ),
            "DATA_LOSS",
            "a.tfrecord: corrupted record at 339",
        ),
        (
            pa.ArrowInvalid("Flight returned invalid argument error, with message: invalid spec: x"),
            "INVALID_ARGUMENT",
            "invalid spec: x",
        ),
        (flight.FlightUnavailableError("Socket closed"), "UNAVAILABLE", "Socket closed"),
        (RuntimeError("what?"), "UNKNOWN", "what?"),
    ]
    for exc, code, message in cases:
        err = from_arrow(exc)
        assert (err.code, err.message) == (code, message)
        assert str(err) == f"{code}: {message}"
    err = ReaderdError("NOT_FOUND", "gone")
    assert from_arrow(err) is err


def test_crc32c_and_framing_match_tfrecord() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    assert masked_crc32c(b"") == 0xA282EAD8
    framed = frame(b"abc")
    assert framed[:8] == struct.pack("<Q", 3) and framed[12:15] == b"abc" and len(framed) == 19
    assert common_prefix(b"abcdef", b"abcxyz") == b"abc" and common_prefix(b"", b"a") == b""


def test_examples_pack_values_as_tensorflow_does() -> None:
    record = example({"x": [0.1], "n": [1, -1], "s": b"hi"})
    assert struct.pack("<f", 0.1) in record
    assert b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" in record  # -1 as a 10-byte varint
    assert b"\x02hi" in record


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_the_torch_wrapper_says_it_needs_torch() -> None:
    with pytest.raises(ImportError, match="needs PyTorch"):
        import readerd.torch  # noqa: F401
