"""Writing TFRecord files of ``tf.train.Example`` records without TensorFlow.

Small and dependency-free, for tests, benchmarks and examples that need data a readerd
server can read:

- :func:`example` serializes a ``tf.train.Example`` from a dict
  (``int`` / ``float`` / ``bytes`` values or lists of one kind);
- :func:`write_tfrecord` frames records as TFRecord: ``u64le length``,
  ``u32le masked_crc32c(length)``, data, ``u32le masked_crc32c(data)``.

:func:`crc32c` is a table-driven CRC-32C (Castagnoli) in pure Python; it continues from a
previous value (``crc32c(b, crc32c(a)) == crc32c(a + b)``), so records sharing a long
prefix are cheap to checksum (``write_tfrecord(..., prefix=...)``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Union

__all__ = ["crc32c", "masked_crc32c", "frame", "RecordFramer", "example", "common_prefix", "write_tfrecord"]


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``crc`` (the CRC of the bytes before it)."""
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes, crc: int | None = None) -> int:
    """TFRecord's masked CRC of ``data`` (or of an already computed ``crc``)."""
    crc = crc32c(data) if crc is None else crc
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes, crc: int | None = None) -> bytes:
    """One TFRecord frame around ``record`` (``crc``: its CRC-32C when already known)."""
    length = struct.pack("<Q", len(record))
    return b"".join(
        [
            length,
            struct.pack("<I", masked_crc32c(length)),
            record,
            struct.pack("<I", masked_crc32c(record, crc)),
        ]
    )


class RecordFramer:
    """Frames records that all start with ``prefix``, checksumming the prefix once."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self._prefix_crc = crc32c(prefix)

    def frame(self, suffix: bytes) -> bytes:
        return frame(self.prefix + suffix, crc32c(suffix, self._prefix_crc))


# --- tf.train.Example, serialized by hand -------------------------------------------

Value = Union[int, float, bytes, str, bool]
FeatureValue = Union[Value, Sequence[Value]]


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # negative int64 values: two's complement, 10 bytes
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def feature(value: FeatureValue) -> bytes:
    """A serialized ``tf.train.Feature``: a bytes, float or int64 list by the values' type."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if values and all(isinstance(v, (bytes, str)) for v in values):
        items = b"".join(_field(1, v.encode() if isinstance(v, str) else v) for v in values)
        return _field(1, items)  # bytes_list
    if any(isinstance(v, float) for v in values):
        return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))  # float_list, packed
    if not values:
        return _field(3, b"")  # an empty int64_list
    return _field(3, _field(1, b"".join(_varint(int(v)) for v in values)))  # int64_list, packed


def example(features: Mapping[str, FeatureValue]) -> bytes:
    """A serialized ``tf.train.Example`` with ``features`` in their dict order."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, feature(v))) for name, v in features.items())
    return _field(1, entries)


def common_prefix(a: bytes, b: bytes) -> bytes:
    """The longest common prefix of ``a`` and ``b`` (bisection over slice compares)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return a[:low]


def write_tfrecord(path: Union[str, Path], records: Iterable[bytes], prefix: bytes = b"") -> list[int]:
    """Writes ``records`` as a TFRecord file; returns each record's byte offset (its key).
    With ``prefix`` (which every record starts with: see :func:`common_prefix`), the
    prefix is checksummed once, which makes large similar records cheap to write."""
    offsets, position = [], 0
    framer = RecordFramer(prefix)
    with open(path, "wb") as out:
        for record in records:
            if not record.startswith(prefix):
                raise ValueError("a record does not start with the prefix")
            framed = framer.frame(record[len(prefix) :])
            offsets.append(position)
            out.write(framed)
            position += len(framed)
    return offsets
