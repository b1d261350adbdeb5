"""Runs of small records in the main graph, read by numpy over the buffer for the wire scan.

A large graph is mostly a run of nodes and a run of struct values; here a window of the buffer is
read with a few numpy operations instead of one Python step per record. The run is the chain of
tag candidates from the first record, each starting where the one before stops, so it is exactly
what protobuf reads; it ends before the first record that is not a candidate, which the scan
reads its usual way. Short runs are left to the scan.

Notes: docs/modules.md.
"""

from __future__ import annotations

import numpy as np

# Windows, in bytes: the last one bounds the temporary arrays (some int64 per candidate start).
# After a run that ends early the next window is twice that run's bytes, but at least _MIN_WINDOW.
_FIRST_WINDOW = 1 << 16
_LAST_WINDOW = 1 << 20
_MIN_WINDOW = 1 << 12
# A numpy pass costs about as much as one or two hundred records read in Python (docs/benchmarks.md):
# records of a kind read the usual way before numpy is tried (again, after a short run), and the
# number of records of a kind (as the parse counts them) from which numpy reads from the first.
_PATIENCE = 64
_LONG_RUN = 200
# Bytes per record of a kind assumed for the first window of a long run (the parse's count times
# this, between the first and the last window): a run of 2,000 values of ~100 bytes in one pass.
_RECORD_BYTES = {"node": 32, "value": 128}


def _varints(w: np.ndarray, at: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, bytes, ok) of the varint at each position ``at`` of ``w``; ok: it has at most
    ``max_bytes`` bytes, all inside ``w``."""
    last = len(w) - 1
    byte = w[np.minimum(at, last)].astype(np.int64)
    more = byte >= 0x80
    if not more.any():  # the common case: one byte each
        return byte, np.ones(len(at), np.int64), at <= last
    value, size = byte & 0x7F, np.ones(len(at), np.int64)
    for k in range(1, max_bytes):
        byte = w[np.minimum(at + k, last)].astype(np.int64)
        value = np.where(more, value | (byte & 0x7F) << (7 * k), value)
        size += more
        more &= byte >= 0x80
    return value, size, ~more & (at + size <= len(w))


def _chain(starts: np.ndarray, stops: np.ndarray, valid: np.ndarray, span: int) -> np.ndarray:
    """Indices of the candidates chained from the one at the window's start (none if there is none
    there): each starts where the one before stops. ``span``: the window's length (every start is
    below it)."""
    m = len(starts)
    if not m or starts[0] != 0 or not valid[0]:
        return np.zeros(0, np.int64)
    if valid.all() and (starts[1:] == stops[:-1]).all():  # no false candidate (struct values, mostly)
        return np.arange(m)
    # The candidate starting at each byte of the window (m: none there, or past the window), one
    # int32 per byte: a lookup per stop instead of a binary search.
    at = np.full(span + 1, m, np.int32)
    at[starts] = np.arange(m, dtype=np.int32)
    following = at[np.minimum(stops, span)]
    successor = np.where(valid[np.minimum(following, m - 1)], following, m)
    # A guess checked link by link: the candidates inside no earlier valid candidate's record (a
    # false one lies inside the record it was read from). Where a link fails, the chain is known
    # up to there; it is complete if that member has no successor, else pointer doubling decides.
    reach = np.maximum.accumulate(np.where(valid, stops, 0))
    guess = np.flatnonzero(np.concatenate(([True], starts[1:] >= reach[:-1])))
    links = successor[guess[:-1]] == guess[1:]
    last = int(np.argmin(links)) if not links.all() else len(links)
    if successor[guess[last]] == m:
        return guess[: last + 1]
    jump = np.append(successor, m)  # m: the end, its own successor
    chain = np.zeros(1, np.int64)
    while chain[-1] != m:  # the first 2**k members, then 2**(k+1): log2(run) rounds
        chain = np.concatenate((chain, jump[chain]))
        jump = jump[jump]
    return chain[: np.searchsorted(chain, m)]


class Runs:
    """The numpy reader of one scan: ``buf`` over its bytes, a window size per field, and the
    current run of nodes (a node with attributes interrupts it: the scan reads that node, then
    resumes here at the next one)."""

    def __init__(
        self, data: bytes, node_tag: int, probe: bytes, value_tag: bytes, field_tags: bytes, counts=None
    ) -> None:
        """``counts``: how many nodes and struct values the parse holds, if known: numpy reads a
        kind from its first record when there are many, never when there are few."""
        self.buf = np.frombuffer(data, np.uint8)
        self.node_tag, self.probe = node_tag, probe
        self.value_tag, self.field_tags = value_tag, field_tags
        self.windows = {"node": _FIRST_WINDOW, "value": _FIRST_WINDOW}
        self.patience = {"node": _PATIENCE, "value": _PATIENCE}
        if counts is not None:
            for kind, count in zip(("node", "value"), counts, strict=True):
                self.patience[kind] = 0 if count >= _LONG_RUN else count
                if count >= _LONG_RUN:
                    self.windows[kind] = min(_LAST_WINDOW, max(_FIRST_WINDOW, count * _RECORD_BYTES[kind]))
        # The current run of nodes: where each starts and stops (numpy arrays, or lists when many
        # of its nodes are read one by one).
        self.starts: np.ndarray | list[int] = []
        self.stops: np.ndarray | list[int] = []
        self.flagged: list[int] = []  # indices of the run's nodes whose bodies hold a probe byte
        self.cursor = self.flag = 0  # the next node of the run, the next flagged one

    def _window(self, kind: str, pos: int, end: int) -> np.ndarray:
        return self.buf[pos : min(end, pos + self.windows[kind])]

    def _fit(self, kind: str, used: int, records: int) -> None:
        """Double the window after a run that filled most of it; after a run that ended early,
        shrink it to twice that run's bytes, and after a short run, wait. A pass then never reads
        more than a few times the bytes the one before it stepped over, so short runs between
        other fields cannot make every pass read a full window (docs/security.md, "Findings behind
        code rules")."""
        window = self.windows[kind]
        if 2 * used > window:
            self.windows[kind] = min(_LAST_WINDOW, 2 * window)
        else:
            self.windows[kind] = max(_MIN_WINDOW, 2 * used)
            if records < _PATIENCE:
                self.patience[kind] = _PATIENCE

    def bare_nodes(self, pos: int, end: int) -> tuple[int, int]:
        """(position after, how many) of the node records from ``pos`` (where a node's tag is) in
        whose bodies no byte of the probe is (one that can start an attribute field): 0 when the
        node at ``pos`` has one, or is not in a run (the scan then reads it the usual way)."""
        i = self.cursor
        if not (i < len(self.starts) and self.starts[i] == pos):
            if self.patience["node"]:  # see _PATIENCE
                self.patience["node"] -= 1
                return pos, 0
            self._node_run(pos, end)
            i = 0
            if not len(self.starts):
                return pos, 0
        while self.flag < len(self.flagged) and self.flagged[self.flag] < i:
            self.flag += 1
        j = self.flagged[self.flag] if self.flag < len(self.flagged) else len(self.starts)
        if j == i:  # flagged: read by the scan, which comes back at the next node
            self.cursor = i + 1
            return pos, 0
        self.cursor = j
        return int(self.stops[j - 1]), j - i

    def _node_run(self, pos: int, end: int) -> None:
        w = self._window("node", pos, end)
        starts = np.flatnonzero(w == self.node_tag)
        length, size, ok = _varints(w, starts + 1, 2)
        bodies = starts + 1 + size
        stops = bodies + length
        members = _chain(starts, stops, ok & (stops <= len(w)), len(w))
        starts, bodies, stops = starts[members], bodies[members], stops[members]
        hit = np.zeros(len(w), bool)
        for byte in self.probe:
            hit |= w == byte
        hits = np.flatnonzero(hit)
        first = hits[np.minimum(np.searchsorted(hits, bodies), len(hits) - 1)] if len(hits) else stops
        self.flagged = np.flatnonzero((first >= bodies) & (first < stops)).tolist()
        self.starts, self.stops = starts + pos, stops + pos
        if len(self.flagged) > _PATIENCE:  # read node by node: Python ints are cheaper to index
            self.starts, self.stops = self.starts.tolist(), self.stops.tolist()
        self.cursor = self.flag = 0
        self._fit("node", int(stops[-1]) if len(stops) else 0, len(stops))

    def plain_values(self, pos: int, end: int) -> tuple[int, list[int], list[int], list[bytes]] | None:
        """The struct value records from ``pos`` on, as far as one window goes, whose bytes are
        exactly ``type``, ``raw_data`` and ``name``, once each, in this order (one-byte tags; a
        type and a name length of one or two bytes, a payload length of up to three):
        (position after them, their types, payload sizes and names), or None if there is none."""
        if self.patience["value"]:  # see _PATIENCE
            self.patience["value"] -= 1
            return None
        w = self._window("value", pos, end)
        if len(w) < 9:  # the shortest such record
            return None
        tag, (type_tag, raw_data_tag, name_tag) = self.value_tag, self.field_tags
        starts = np.flatnonzero((w[:-1] == tag[0]) & (w[1:] == tag[1]))
        last = len(w) - 1
        length, size, ok = _varints(w, starts + 2, 2)
        bodies = starts + 2 + size
        stops = bodies + length
        ok &= (stops <= len(w)) & (w[np.minimum(bodies, last)] == type_tag)
        types, size, type_ok = _varints(w, bodies + 1, 2)
        at = bodies + 1 + size
        ok &= type_ok & (w[np.minimum(at, last)] == raw_data_tag)
        payloads, size, payload_ok = _varints(w, at + 1, 3)
        at = at + 1 + size + payloads
        ok &= payload_ok & (at < stops) & (w[np.minimum(at, last)] == name_tag)
        name_lengths, size, name_ok = _varints(w, at + 1, 2)
        names = at + 1 + size
        ok &= name_ok & (names + name_lengths == stops)  # nothing else in the record
        members = _chain(starts, stops, ok, len(w))
        self._fit("value", int(stops[members[-1]]) if len(members) else 0, len(members))
        if not len(members):
            return None
        names, name_lengths = names[members], name_lengths[members]
        split = _joined(w, names, name_lengths).split(b"\0")
        if len(split) != len(members):  # a name holds a NUL byte
            split = [w[a : a + n].tobytes() for a, n in zip(names.tolist(), name_lengths.tolist(), strict=True)]
        return int(stops[members[-1]]) + pos, types[members].tolist(), payloads[members].tolist(), split


def _joined(w: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte strings ``w[start:start + length]`` joined by NUL bytes, gathered in one copy."""
    n = len(lengths)
    if not n:
        return b""
    # Output byte j of string k (at offset o_k: the strings and separators before it) is source
    # byte j + (start_k - o_k). That shift changes at each o_k: a cumulative sum of its steps.
    offsets = np.cumsum(lengths + 1) - (lengths + 1)
    total = int(offsets[-1] + lengths[-1])
    steps = np.zeros(total + 1, np.int64)  # + 1: an empty last string starts at ``total``
    steps[offsets] = np.diff(starts - offsets, prepend=0)
    source = np.arange(total) + np.cumsum(steps[:total])
    out = w[np.minimum(source, len(w) - 1)]  # a separator's source is the byte after a string
    out[offsets[1:] - 1] = 0
    return out.tobytes()
