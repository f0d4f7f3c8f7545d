"""Responses read back from the S3 store (app/payload_s3.py): each segment from the pack that holds it, else its row
of the response spool (not packed yet), else its small object (a store without a spool, or written before it);
the packs of a batch found by a listing and their indexes, kept per process."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import psycopg

from app.payload_port import SEGMENT_NAME, Found, Placed, Wanted, by_segment, slice_span, spans
from app.payload_s3_client import Bucket
from app.payload_s3_frames import Frames
from app.payload_s3_packs import PACK_PREFIX, PackMap, read_index

log = logging.getLogger(__name__)

PACK_MAPS = 64  # batches whose pack maps a process keeps
READ_PARALLEL = 16  # ranged GETs a results read has in flight at once


class ResponseReader:
    """The results reads of a store (safe from many threads; its pool of readers made again in a forked child)."""

    def __init__(self, store: Bucket) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._pack_maps: OrderedDict[UUID, PackMap] = OrderedDict()
        self._readers: ThreadPoolExecutor | None = None
        self._readers_pid = 0

    def forget(self, batch_id: UUID) -> None:
        with self._lock:
            self._pack_maps.pop(batch_id, None)

    def close(self) -> None:
        with self._lock:
            if self._readers is not None and self._readers_pid == os.getpid():
                self._readers.shutdown(wait=False)
                self._readers = None

    def read(self, batch_id: UUID, items: Sequence[Wanted]) -> Found:
        """The responses of ITEMS: a segment's from the pack it is in (one ranged GET per span of an object,
        app/payload_port.spans, up to READ_PARALLEL of them at once), else from its spool row, else from its small
        object. Those found nowhere are read again from the packs found by a fresh look (packed meanwhile)."""
        found: Found = [None] * len(items)
        grouped, _ = by_segment(items)
        grouped = {segment: ranges for segment, ranges in grouped.items() if SEGMENT_NAME.fullmatch(segment)}
        packs = self._pack_map(batch_id)
        grouped = self._read_spooled(batch_id, grouped, packs, found)
        failed = self._read_into(batch_id, grouped, packs, found)
        if failed:
            packs = self._pack_map(batch_id, fresh=True)
            self._read_into(batch_id, {s: grouped[s] for s in failed if s in packs.where}, packs, found)
        return found

    def _read_spooled(self, batch_id: UUID, grouped: dict[str, list[tuple[int, int, int]]], packs: PackMap,
                      found: Found) -> dict[str, list[tuple[int, int, int]]]:
        """Read those of GROUPED not known packed from the spool into FOUND; the rest of GROUPED."""
        unpacked = [segment for segment in grouped if segment not in packs.where]
        if self.store.spool is None or not unpacked:
            return grouped
        try:
            spooled = self.store.spool.read(batch_id, unpacked)
        except psycopg.Error as exc:  # looked for in the bucket instead: what cannot be found there is not found
            log.warning("cannot read the response spool: %s", exc)
            return grouped
        for segment, data in spooled.items():
            slice_span(data, 0, grouped[segment], found)
        return {segment: ranges for segment, ranges in grouped.items() if segment not in spooled}

    def _read_into(self, batch_id: UUID, grouped: dict[str, list[tuple[int, int, int]]], packs: PackMap,
                   found: Found) -> set[str]:
        """Read GROUPED (small object → its ranges) into FOUND, through PACKS; the small objects not read. Each
        small object's spans are placed at its base in its pack, and neighbouring ones read as one."""
        per_object: dict[str, list[Placed]] = {}
        for segment, ranges in grouped.items():
            name, base = packs.where.get(segment, (segment, 0))
            per_object.setdefault(name, []).extend((base + start, end - start, segment, base, span)
                                                   for start, end, span in spans(ranges))
        reads = [(self.store.key(batch_id, name), start, end, placed, packs.frames.get(name))
                 for name, parts in per_object.items() for start, end, placed in spans(sorted(parts))]
        failed: set[str] = set()
        for (_, start, _, placed, _), data in zip(reads, self._reader().map(self._get_span, reads), strict=True):
            for _, _, segment, base, span in placed:
                if data is None:
                    failed.add(segment)
                else:
                    slice_span(data, start - base, span, found)  # a range's offset is in its small object
        return failed

    def _pack_map(self, batch_id: UUID, *, fresh: bool = False) -> PackMap:
        """Where the batch's packed small objects are: from memory, or (the first time, or FRESH) a listing of its
        packs, oldest first, and the indexes of those not read yet (a pack replaced since drops out)."""
        with self._lock:
            known = self._pack_maps.get(batch_id)
            if known is not None and not fresh:
                self._pack_maps.move_to_end(batch_id)
                return known
        known = known or PackMap()
        try:
            listed = sorted(self.store.list_keys(self.store.key(batch_id, PACK_PREFIX)), key=lambda entry: entry[1])
        except self.store.failures:
            return known
        names = [key.rsplit("/", 1)[1] for key, _ in listed]
        new = [name for name in names if name not in known.indexes]
        read = dict(zip(new, self._reader().map(lambda name: read_index(self.store, self.store.key(batch_id, name)),
                                                new), strict=True))
        found = PackMap.of([(name, index) for name in names
                            if (index := known.indexes.get(name) or read.get(name)) is not None])
        with self._lock:
            self._pack_maps[batch_id] = found
            while len(self._pack_maps) > PACK_MAPS:
                self._pack_maps.popitem(last=False)
        return found

    def _get_span(self, read: tuple[str, int, int, Any, Frames | None]) -> bytes | None:
        """Bytes START:END of an object (of a compressed pack's uncompressed bytes: the frames holding them); None
        when they cannot be read."""
        key, start, end, _, frames = read
        if end == start:
            return b""
        try:
            if frames is None:
                return self.store.get(key, start, end - start)
            return frames.read(lambda offset, length: self.store.get(key, offset, length), start, end - start)
        except self.store.failures:
            return None

    def _reader(self) -> ThreadPoolExecutor:
        """This process's pool of result readers (made again in a forked child)."""
        with self._lock:
            if self._readers is None or self._readers_pid != os.getpid():
                self._readers, self._readers_pid = ThreadPoolExecutor(READ_PARALLEL, "relay-s3-read"), os.getpid()
            return self._readers
