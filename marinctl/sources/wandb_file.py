"""Reading W&B's `.wandb` transaction log: LevelDB-log framing, then protobuf `Record`s.

Format (wandb/wandb's `core/pkg/leveldb/record.go`, `crc.go`; `wandb/proto/wandb_internal.proto`
for the records): a 7-byte header `:W&B` + uint16 LE 0xBEE1 + version 0,
then 32 KiB blocks of chunks `crc32 u32 | length u16 | type u8 | data`, types FULL/FIRST/
MIDDLE/LAST; block tails under 7 bytes are zero padding. The CRC is zlib's IEEE crc32 of
the data seeded with the type byte.

Why the shape of this module:
- Live files end mid-record all the time (wandb-core flushes whole blocks), so `scan`
  reports `end`, the offset just past the last COMPLETE record, and never fails on a
  partial tail; the caller resumes from `end` later.
- Corruption (bad CRC, impossible chunk) is skipped to the next block boundary, as
  LevelDB's reader does, and reported once to the caller with its byte offset.
- Speed: a 20k-step x 32-key file holds ~60k records, two thirds of them summaries. We
  peek each record's oneof field number without parsing it, and decode history in bulk
  with "column" message types built at run time whose wire layout matches wandb's
  HistoryRecord, so upb fills flat lists of keys and values in C (repeated fields of a
  singular sub-message merge on parse). Records that do not fit that fast layout
  (typed values, `key` instead of `nested_key`, multi-part keys) go through the real
  `wandb_internal_pb2.Record`.

Importing this module is cheap; protobuf and wandb are imported on first decode (the
`local` install extra: without it, decoding stops with the install line to run).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

BLOCK = 32768
HEADER = b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00"
HEADER_SIZE = len(HEADER)
_CHUNK = struct.Struct("<IHB")
CHUNK_HEADER = _CHUNK.size
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_SEED = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}

# Record.record_type oneof field numbers (wandb_internal.proto).
HISTORY, SUMMARY, OUTPUT, CONFIG, FILES, STATS = 2, 3, 4, 5, 6, 7
TELEMETRY, OUTPUT_RAW, RUN, EXIT, FINAL, HEADER_REC, FOOTER = 11, 13, 17, 18, 20, 21, 22
ENVIRONMENT = 26
_NOT_TYPE = frozenset({1, 16, 19, 200})  # num, control, uuid, _info: not the oneof
KEEP = frozenset({HISTORY, SUMMARY, CONFIG, OUTPUT_RAW, RUN, EXIT, STATS, ENVIRONMENT})


@dataclass
class Scan:
    """What one pass over a byte range found."""

    records: list[tuple[int, int, Any]] = field(default_factory=list)  # (end offset, type, payload)
    end: int = 0                       # absolute offset just past the last complete record
    partial: bool = False              # stopped at an incomplete tail (wait, or truncated)
    partial_at: int | None = None      # where that incomplete record starts
    corrupt_at: int | None = None      # first corrupt chunk's absolute offset
    corrupt_reason: str | None = None
    skip_to: int | None = None         # resync point beyond the data read (corrupt tail)


def has_header(head: bytes) -> bool:
    return head[:HEADER_SIZE] == HEADER


def record_type(payload) -> int:
    """The Record's oneof field number, read from its first tags without parsing it.

    Go writes fields in order: `num=1`, maybe `control=16`/`uuid=19`, then the oneof.
    Returns 0 for anything unreadable.
    """
    i, n = 0, len(payload)
    try:
        while i < n:
            tag, i = _varint(payload, i)
            fnum, wire = tag >> 3, tag & 7
            if fnum not in _NOT_TYPE:
                return fnum
            if wire == 0:
                _, i = _varint(payload, i)
            elif wire == 2:
                ln, i = _varint(payload, i)
                i += ln
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return 0
    except IndexError:
        return 0
    return 0


def _varint(b, i: int) -> tuple[int, int]:
    x = b[i]
    if x < 0x80:
        return x, i + 1
    result, shift = x & 0x7F, 7
    while True:
        i += 1
        x = b[i]
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, i + 1
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def scan(buf, base: int, *, keep: frozenset[int] = KEEP, limit: int | None = None,
         live_tail: bool = False) -> Scan:
    """Frame records out of `buf`, which holds the file's bytes from absolute offset `base`.

    `base` must be a record boundary (HEADER_SIZE for a fresh file, or a previous `end`).
    Stops early, at a record boundary, once `limit` bytes have been consumed. With
    `live_tail` (a run still writing), a bad chunk in the last block of `buf` may be a
    write in flight: it is reported as a partial tail to wait on, not skipped.
    """
    out = Scan(end=base)
    records = out.records
    mv = memoryview(buf)
    n = len(buf)
    unpack = _CHUNK.unpack_from
    crc32 = zlib.crc32
    seed = _SEED
    pos = 0
    parts: list | None = None  # chunks of a FIRST..LAST record in progress
    rec_start = 0
    resync = False             # after corruption: skip MIDDLE/LAST until FULL/FIRST
    stop_at = n + 1 if limit is None else limit
    last_end = 0
    append = records.append
    keep_types = keep

    last_block = (base + n - 1) // BLOCK

    def note(at: int, why: str) -> None:
        if out.corrupt_at is None:
            out.corrupt_at, out.corrupt_reason = base + at, why

    def corrupt(at: int, why: str) -> int:
        if live_tail and (base + at) // BLOCK == last_block:
            out.partial, out.partial_at = True, base + (rec_start if parts is not None else at)
            return -1
        if out.corrupt_at is None:
            out.corrupt_at, out.corrupt_reason = base + at, why
        nxt = ((base + at) // BLOCK + 1) * BLOCK - base
        return nxt

    seed_full = seed[FULL]
    while True:
        # Fast path: a whole FULL chunk with a good checksum (nearly every record).
        if parts is None and pos + CHUNK_HEADER <= n:
            left = BLOCK - (base + pos) % BLOCK
            if left >= CHUNK_HEADER:
                crc, ln, typ = unpack(buf, pos)
                end = pos + CHUNK_HEADER + ln
                if typ == FULL and end <= n and ln <= left - CHUNK_HEADER:
                    payload = mv[pos + CHUNK_HEADER:end]
                    if crc32(payload, seed_full) == crc:
                        pos = last_end = end
                        resync = False
                        rt = 0
                        try:
                            if payload[0] == 8:
                                i = 1
                                while payload[i] & 0x80:
                                    i += 1
                                tag = payload[i + 1]
                                if tag < 0x80 and (tag & 7) == 2:
                                    rt = tag >> 3
                        except IndexError:
                            pass
                        if rt == 0 or rt in _NOT_TYPE:
                            rt = record_type(payload)
                        if rt in keep_types:
                            append((base + pos, rt, payload))
                        if pos >= stop_at:
                            break
                        continue
        if pos + CHUNK_HEADER > n:
            if pos < n and (BLOCK - (base + pos) % BLOCK) >= CHUNK_HEADER:
                out.partial, out.partial_at = True, base + (rec_start if parts is not None else pos)
            elif parts is not None:
                out.partial, out.partial_at = True, base + rec_start
            break
        left = BLOCK - (base + pos) % BLOCK
        if left < CHUNK_HEADER:
            pos += left
            continue
        crc, ln, typ = unpack(buf, pos)
        if typ == 0 and ln == 0 and crc == 0:
            pos += left           # zero padding to the end of the block
            continue
        start = pos + CHUNK_HEADER
        end = start + ln
        if typ < FULL or typ > LAST or ln > left - CHUNK_HEADER:
            pos = corrupt(pos, "impossible chunk header")
            if pos < 0:
                break
            parts, resync = None, True
            if pos > n:
                out.skip_to = base + pos
            continue
        if end > n:
            out.partial, out.partial_at = True, base + (rec_start if parts is not None else pos)
            break
        data = mv[start:end]
        if crc32(data, seed[typ]) != crc:
            pos = corrupt(pos, "bad checksum")
            if pos < 0:
                break
            parts, resync = None, True
            if pos > n:
                out.skip_to = base + pos
            continue
        chunk_at = pos
        pos = end
        if typ == FULL:
            resync = False
            if parts is not None:
                note(chunk_at, "record cut short")  # FIRST without LAST: drop it
                parts = None
            payload = data
        elif typ == FIRST:
            resync = False
            if parts is not None:
                note(chunk_at, "record cut short")
            parts, rec_start = [data], chunk_at
            continue
        else:
            if resync:
                continue
            if parts is None:
                note(chunk_at, "chunk without a first part")
                continue
            parts.append(data)
            if typ == MIDDLE:
                continue
            payload = b"".join(parts)
            parts = None
        last_end = pos
        # inline fast path of record_type(): `num` varint, then a one-byte oneof tag
        rt = 0
        try:
            if payload[0] == 8:
                i = 1
                while payload[i] & 0x80:
                    i += 1
                tag = payload[i + 1]
                if tag < 0x80 and (tag & 7) == 2:
                    rt = tag >> 3
        except IndexError:
            pass
        if rt == 0 or rt in _NOT_TYPE:
            rt = record_type(payload)
        if rt in keep_types:
            append((base + pos, rt, payload))
        if pos >= stop_at:
            break
    out.end = base + last_end
    if out.skip_to is None and parts is None and not out.partial and resync:
        # corrupt data ran to the end of what we have: nothing complete to wait for
        out.end = max(out.end, base + min(pos, n))
    return out


# --- decoding -------------------------------------------------------------------------------


def _require_wandb() -> None:
    """Decoding needs wandb's protobufs (the `local` extra): say so plainly when they are missing."""
    from marinctl import extras

    extras.require("local", "reading .wandb files")


@lru_cache(maxsize=1)
def _pb():
    """wandb's record protobufs, without running `wandb/__init__` (the whole SDK, slow to import and
    heavy, before `watch` on a fresh wandb/ dir can draw). The proto modules import only each other and
    google.protobuf; their classes live in protobuf's default pool, so a later `import wandb` in this
    process gets these very classes back."""
    _require_wandb()
    import importlib
    import sys

    if "wandb" in sys.modules:
        return importlib.import_module("wandb.proto.wandb_internal_pb2")
    import importlib.util
    import types

    spec = importlib.util.find_spec("wandb")
    package = types.ModuleType("wandb")
    package.__path__, package.__spec__ = list(spec.submodule_search_locations or []), spec
    before = set(sys.modules)
    sys.modules["wandb"] = package          # a bare package: its submodules load, its __init__ does not run
    try:
        return importlib.import_module("wandb.proto.wandb_internal_pb2")
    finally:                                # forget the bare package: a real `import wandb` starts clean
        for name in set(sys.modules) - before:
            if name == "wandb" or name.startswith("wandb."):
                del sys.modules[name]


def overlay(package: str, messages: dict[str, list[tuple[str, int, str, bool]]]) -> dict[str, type]:
    """Message classes declared field by field in a pool of their own: views whose wire layout
    overlays wandb's records (same field numbers), so one C parse yields flat repeated columns.
    `messages`: {name: [(field, number, kind, repeated)]}, kind a protobuf scalar type name
    ("bytes", "int64" …) or the name of another message here."""
    _require_wandb()
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    for name, fields in messages.items():
        msg = fdp.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if kind in messages:
                msg.field.add(name=field, number=number, type=F.TYPE_MESSAGE, type_name=f".{package}.{kind}", label=label)
            else:
                msg.field.add(name=field, number=number, type=getattr(F, f"TYPE_{kind.upper()}"), label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}")) for name in messages}


@lru_cache(maxsize=1)
def _columns():
    """Message classes whose wire layout overlays HistoryRecord with flat repeated columns."""
    items = [("key", 1, "bytes"), ("nested_key", 2, "bytes"), ("none", 3, "int32"), ("boolean", 4, "bool"),
             ("integer", 5, "sint64"), ("number", 6, "double"), ("text", 7, "bytes"), ("json", 8, "bytes"),
             ("value_json", 16, "bytes")]
    m = overlay("marinctl_cols", {
        "ItemCols": [(name, number, kind, True) for name, number, kind in items],
        "StepCols": [("num", 1, "int64", False)],
        "HistCols": [("item", 1, "ItemCols", False), ("step", 2, "StepCols", False)],
        "RecCols": [("history", 2, "HistCols", False)],
        "Batch": [("rec", 1, "RecCols", True)],
    })
    return m["RecCols"], m["Batch"]


def parse_record(payload):
    rec = _pb().Record()
    rec.ParseFromString(bytes(payload))
    return rec


def item_key(item) -> str:
    """A history item's key as W&B names it: a nested dict's path joined with '.' (`train.loss`)."""
    return item.key if item.key else ".".join(item.nested_key)


def item_value(item) -> Any:
    """A history/summary/config item's value: typed oneof (wandb >= 0.31) or value_json."""
    kind = item.WhichOneof("value") if hasattr(item, "WhichOneof") and _has_value_oneof(item) else None
    if kind is None:
        return json_value(item.value_json)
    if kind == "none":
        return None
    if kind == "json":
        return json_value(item.json)
    return getattr(item, kind)


def _has_value_oneof(item) -> bool:
    return any(o.name == "value" for o in item.DESCRIPTOR.oneofs)


def json_value(text: str) -> Any:
    """An item's `value_json` as W&B means it: the JSON value, or the text itself when it is not JSON."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SHORT = [_varint_bytes(n) for n in range(16384)]
# Record{history{item{nested_key:"\0", value_json:"0"}}}: marks record boundaries in a merged parse
_SENTINEL_KEY = "\x00"
_SENTINEL = b"\x12\x09\x0a\x07\x12\x01\x00\x82\x01\x01\x30"


def _decode_with_sentinels(payloads: list, RecCols):
    """One C parse of every record, with a sentinel item between records to split rows.

    Each record's step is its `_step` item (wandb-core writes one per history record);
    returns None when the layout is not the plain 0.31 one, so the caller falls back.
    """
    import numpy as np
    import pyarrow.compute as pc

    merged = RecCols()
    merged.ParseFromString(_SENTINEL.join(payloads) + _SENTINEL)
    it = merged.history.item
    if len(it.nested_key) != len(it.value_json) or len(it.key) or len(it.number) or len(it.integer) \
            or len(it.text) or len(it.boolean) or len(it.json) or len(it.none):
        return None
    keys = _strings(it.nested_key[:])
    values, bad = _floats(it.value_json[:])
    ends = np.flatnonzero(pc.equal(keys, _SENTINEL_KEY).to_numpy(zero_copy_only=False))
    step_at = np.flatnonzero(pc.equal(keys, "_step").to_numpy(zero_copy_only=False))
    n = len(payloads)
    if len(ends) != n or len(step_at) != n or (bad is not None and bad[step_at].any()):
        return None
    seg = np.searchsorted(ends, step_at)
    if not np.array_equal(seg, np.arange(n)):
        return None   # a record without its own `_step`
    row_steps = values[step_at].astype(np.int64)
    counts = np.diff(np.concatenate(([-1], ends)))
    step_arr = np.repeat(row_steps, counts)
    sentinel = np.zeros(len(values), bool)
    sentinel[ends] = True
    bad = sentinel if bad is None else (bad | sentinel)
    return _finish(step_arr, keys, values, row_steps.tolist(), bad)


@dataclass
class HistoryColumns:
    """Long history rows: parallel arrays, `_step` removed, non-numeric values dropped."""

    steps: Any    # numpy int64
    keys: Any     # pyarrow string array
    values: Any   # numpy float64
    row_steps: list[int]            # one per history record, in file order
    last_values: dict[str, float]   # latest value per key (for the summary)

    @property
    def num_rows(self) -> int:
        return len(self.values)


def decode_history(payloads: list) -> HistoryColumns:
    """Decode history Record payloads into long columns, in bulk where the layout allows."""
    import numpy as np
    import pyarrow as pa

    if not payloads:
        return HistoryColumns(np.empty(0, np.int64), pa.array([], pa.string()), np.empty(0, np.float64), [], {})
    RecCols, Batch = _columns()
    fast = _decode_with_sentinels(payloads, RecCols)
    if fast is not None:
        return fast
    pieces = []
    for p in payloads:
        ln = len(p)
        pieces.append(b"\x0a" + (_SHORT[ln] if ln < 16384 else _varint_bytes(ln)))
        pieces.append(p)
    batch = Batch()
    batch.ParseFromString(b"".join(pieces))
    counts = [len(r.history.item.value_json) for r in batch.rec]
    steps = [r.history.step.num for r in batch.rec]
    merged = RecCols()
    merged.ParseFromString(b"".join(payloads))
    it = merged.history.item
    if len(it.nested_key) == len(it.value_json) and not (
            len(it.key) or len(it.number) or len(it.integer) or len(it.text) or len(it.boolean)
            or len(it.json) or len(it.none)):
        step_arr = np.repeat(np.asarray(steps, np.int64), counts)
        values, bad = _floats(it.value_json[:])
        keys = _strings(it.nested_key[:])
        return _finish(step_arr, keys, values, steps, bad)
    return _decode_slow(payloads)


def _strings(raw: list[bytes]):
    """UTF-8 bytes to an Arrow string array (validated in C); invalid bytes are replaced."""
    import pyarrow as pa

    try:
        return pa.array(raw, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([b.decode("utf-8", "replace") for b in raw], pa.string())


def _floats(vals_b: list[bytes]):
    """value_json texts to float64 via Arrow's parser; on non-numbers, a per-value slow path.

    Returns (values, mask of entries that are not numbers, or None when all are).
    """
    import numpy as np
    import pyarrow as pa

    try:
        arr = pa.array(vals_b, pa.string()).cast(pa.float64())
        return arr.to_numpy(zero_copy_only=False), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    from marinctl.sources.wandb_rows import as_float

    out = np.empty(len(vals_b), np.float64)
    bad = np.zeros(len(vals_b), bool)
    for i, v in enumerate(vals_b):
        f = as_float(json_value(v.decode("utf-8", "replace")))
        if f is None:
            bad[i] = True
            out[i] = np.nan
        else:
            out[i] = f
    return out, bad


def _finish(step_arr, keys, values, row_steps, bad=None):
    """Drop `_step` and non-numeric entries; note each key's latest value (for the summary)."""
    import numpy as np
    import pyarrow as pa

    enc = keys.dictionary_encode()
    names = enc.dictionary.to_pylist()
    idx = enc.indices.to_numpy(zero_copy_only=False)
    keep = np.ones(len(idx), bool) if bad is None else ~bad
    if "_step" in names:
        keep &= idx != names.index("_step")
    if not keep.all():
        idx, step_arr, values = idx[keep], step_arr[keep], values[keep]
    at = np.full(len(names), -1, np.int64)
    at[idx] = np.arange(len(idx))  # repeated indices: the last assignment wins
    last = {names[u]: float(values[r]) for u, r in enumerate(at.tolist()) if r >= 0}
    keys = enc.dictionary.take(pa.array(idx, pa.int32()))
    return HistoryColumns(np.asarray(step_arr, np.int64), keys, np.asarray(values, np.float64), list(row_steps), last)


def _decode_slow(payloads: list) -> HistoryColumns:
    """Full protobuf decode, one record at a time: any layout, typed values included."""
    import numpy as np
    import pyarrow as pa

    from marinctl.sources.wandb_rows import as_float

    steps, keys, values, row_steps = [], [], [], []
    for p in payloads:
        h = parse_record(p).history
        row = {item_key(it): item_value(it) for it in h.item}
        step = row.get("_step")
        step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else h.step.num
        row_steps.append(step)
        for k, v in row.items():
            if k == "_step":
                continue
            f = as_float(v)
            if f is None:
                continue
            steps.append(step)
            keys.append(k)
            values.append(f)
    return _finish(np.asarray(steps, np.int64), pa.array(keys, pa.string()),
                   np.asarray(values, np.float64), row_steps)


def decode_items(items) -> list[tuple[list[str], Any]]:
    """Summary/config update items as (path, value); a single-part path for flat keys."""
    out = []
    for it in items:
        path = [it.key] if it.key else list(it.nested_key)
        out.append((path, json_value(it.value_json)))
    return out


def apply_items(target: dict, updates, removes=()) -> None:
    """Apply summary/config updates and removals to a nested dict (W&B semantics)."""
    for path, value in updates:
        if len(path) == 1:
            target[path[0]] = value
            continue
        node = target
        for part in path[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                node[part] = nxt
            node = nxt
        node[path[-1]] = value
    for path in removes:
        node = target
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(path[-1], None)
