"""Compressed frames: how the S3 store keeps a request file in fewer bytes (its upload is most of an S3 submit) and
still reads any range of it with one ranged GET.

The raw bytes are cut into frames of FRAME bytes (the last shorter), each compressed on its own (Zstandard, level
1, each frame with its checksum: request bodies are JSON, 3-4 times smaller compressed, for about 0.3 s of CPU per
100 MB, a third of zlib's fastest level for a better ratio), so a range of raw bytes is read by fetching the
compressed frames that hold it (adjacent: one GET) and inflating only those. A frame
table (the frames' compressed offsets, F + 1 little-endian uint64) says where each frame starts; FRAME is one block
of app/payload_s3_blocks.py, so a block read is one frame.

A compressed request file (`requests.bin`, magic `RLYREQZ1`) is its frames, their table, the items' offsets (the
raw file's index, n + 1 uint64 of raw offsets, compressed as one frame), then a 40-byte trailer: uint64 n,
uint64 FRAME, uint64 F, uint64 the compressed index's length, and the magic. A request file in the folder store's
format (magic `RLYREQ01`, app/payload_files.py: the layout written before) is read as it is; the magic at the end
tells the two apart.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zstandard

from app.payload_files import (
    MAGIC,
    IncompleteFile,
    offsets_bytes,
    parse_offsets,
    parse_trailer,
    request_bodies,
)
from app.payload_s3_blocks import BLOCK

if TYPE_CHECKING:
    from app.payload_files import Body

FRAME = BLOCK  # raw bytes per frame
LEVEL = 1  # Zstandard's level 1: most of the gain on JSON for a fraction of the CPU of the default (3)
FRAMED_MAGIC = b"RLYREQZ1"
_TRAILER = struct.Struct("<QQQQ8s")  # items, FRAME, frames, the compressed index's length, the magic
TAIL = _TRAILER.size  # bytes of a request file's end that hold either layout's trailer

# A ranged read: (offset, length) → the bytes.
Get = Callable[[int, int], bytes]


@dataclass(frozen=True)
class Frames:
    """Where the frames of RAW_SIZE raw bytes lie in an object: TABLE, their F + 1 compressed offsets, each frame
    FRAME raw bytes (the last fewer)."""

    table: array[int]
    frame: int
    raw_size: int

    def read(self, get: Get, start: int, length: int) -> bytes:
        """LENGTH raw bytes from START: the frames holding them, fetched in one GET and inflated."""
        if length <= 0:
            return b""
        first, last = start // self.frame, (start + length - 1) // self.frame
        if start < 0 or last + 1 >= len(self.table):
            raise IncompleteFile(f"raw bytes {start}:{start + length} are past the frames' end ({self.raw_size})")
        base = self.table[first]
        data = get(base, self.table[last + 1] - base)
        raw = b"".join(self._inflate(number, data[self.table[number] - base:self.table[number + 1] - base])
                       for number in range(first, last + 1))
        at = start - first * self.frame
        return raw[at:at + length]

    def _inflate(self, number: int, data: bytes) -> bytes:
        expected = min(self.frame, self.raw_size - number * self.frame)
        try:
            raw = zstandard.decompress(data)
        except zstandard.ZstdError as exc:
            raise IncompleteFile(f"frame {number} is damaged: {exc}") from exc
        if len(raw) != expected:
            raise IncompleteFile(f"frame {number} holds {len(raw)} bytes where {expected} were expected")
        return raw


class FrameWriter:
    """Raw bytes written in, compressed frames and their table out (OUT takes a list of buffers, in order)."""

    def __init__(self, out: Callable[[Sequence[bytes]], None], frame: int = FRAME) -> None:
        self.out, self.frame = out, frame
        self.table = array("Q", [0])
        self.raw_size = 0
        self._raw = bytearray()
        self._compressor = compressor()

    def write(self, buffers: Iterable[Body]) -> None:
        for buffer in buffers:
            self._raw += buffer
        if len(self._raw) < self.frame:
            return
        view, at, packed = memoryview(self._raw), 0, []
        while len(self._raw) - at >= self.frame:
            packed.append(self._compress(view[at:at + self.frame]))
            at += self.frame
        view.release()
        del self._raw[:at]
        self.out(packed)

    def close(self) -> Frames:
        """Compress what is left (a last, shorter frame) and say where the frames are."""
        if self._raw:
            self.out([self._compress(self._raw)])
            self._raw = bytearray()
        return Frames(self.table, self.frame, self.raw_size)

    def _compress(self, raw: bytes | bytearray | memoryview) -> bytes:
        packed = self._compressor.compress(raw)
        self.table.append(self.table[-1] + len(packed))
        self.raw_size += len(raw)
        return packed


def compressor() -> zstandard.ZstdCompressor:
    """A compressor of frames (one per writer: a compressor is used by one thread at a time)."""
    return zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)


def write_framed_requests(bodies: Iterable[Body], out: Callable[[Sequence[bytes]], None],
                          abandoned: Callable[[], bool] | None = None) -> None:
    """The compressed request file of BODIES, handed to OUT piece by piece (ABANDONED as request_bodies asks it)."""
    offsets = array("Q", [0])
    writer = FrameWriter(out)
    for buffers, _ in request_bodies(bodies, offsets, abandoned):
        writer.write(buffers)
    frames = writer.close()
    index = compressor().compress(offsets_bytes(offsets))
    out([offsets_bytes(frames.table), index,
         _TRAILER.pack(len(offsets) - 1, frames.frame, len(frames.table) - 1, len(index), FRAMED_MAGIC)])


@dataclass(frozen=True)
class RequestLayout:
    """A request file in the bucket, as a reader needs it: the items' raw OFFSETS (n + 1), and its FRAMES when it
    is compressed (None: the raw layout, read as it is)."""

    offsets: array[int]
    frames: Frames | None

    def read(self, get: Get, start: int, length: int) -> bytes:
        """LENGTH raw bytes of the bodies from START (GET reads the object's bytes by range)."""
        return get(start, length) if self.frames is None else self.frames.read(get, start, length)


def load_layout(tail: bytes, size: int, get: Get) -> RequestLayout:
    """The layout of a request file of SIZE bytes that ends with TAIL (its last TAIL bytes or all of it, GET
    reading the rest by range); IncompleteFile when it is neither layout."""
    if tail.endswith(MAGIC):
        found = parse_trailer(tail[-len(MAGIC) - 8:], size)
        return RequestLayout(parse_offsets(get(found.index_at, 8 * (found.count + 1))), None)
    if not tail.endswith(FRAMED_MAGIC) or len(tail) < TAIL:
        raise IncompleteFile("the request file is incomplete")
    count, frame, frames, index_length, _ = _TRAILER.unpack(tail[-TAIL:])
    table_at = size - TAIL - index_length - 8 * (frames + 1)
    if table_at < 0 or frame <= 0:
        raise IncompleteFile("the request file's trailer is damaged")
    data = get(table_at, size - TAIL - table_at)
    table = parse_offsets(data[:8 * (frames + 1)])
    try:
        offsets = parse_offsets(zstandard.decompress(data[8 * (frames + 1):]))
    except zstandard.ZstdError as exc:
        raise IncompleteFile(f"the request file's index is damaged: {exc}") from exc
    if len(offsets) != count + 1 or table[-1] != table_at:
        raise IncompleteFile("the request file's index does not match its trailer")
    return RequestLayout(offsets, Frames(table, frame, offsets[-1]))
