#!/usr/bin/env python3
"""A transparent unix-socket proxy in front of a CRI socket that counts what
goes over it, HTTP/2 frame by frame (bench/exec, #27 item 4).

    criproxy.py --listen /tmp/x/proxy.sock --upstream /tmp/podprobe-cri/containerd.sock \
        [--out summary.json] [--duration SECONDS] [--label TEXT]

Every connection accepted on --listen is paired with a new connection to
--upstream; bytes are forwarded unchanged both ways, each read forwarded as
one write (so the writes the proxy makes to the runtime follow the reads it
made from the client: a client that writes a call's frames in one go arrives
as one write, one that writes them one at a time as several; a proxy read
can merge writes the client made faster than the proxy read them, never
split them into more, so the counts are a lower bound of the client's
writes). Python 3 standard library only.

It parses the HTTP/2 framing of both directions (the 24-byte client preface,
then 9-byte frame headers), decodes the header blocks (HPACK, with its own
dynamic table per direction) and the gRPC messages (5-byte prefix), and
records:
  - per connection and direction: frames and bytes by type, socket reads
    (client->server: reads from the client = writes to the runtime; server->
    client: reads from the runtime), how many frames each read completed,
    SETTINGS, WINDOW_UPDATE increments, PING payloads, RST_STREAM and GOAWAY
    codes;
  - per gRPC call (stream), folded per method (:path): request and response
    frames and bytes by type, the frame sequence (direction, type, flags),
    the request headers, gRPC message lengths, grpc-status, and for
    ExecSync the decoded request (container_id length, cmd, timeout) and the
    response's exit code and output lengths;
  - the first and last frames of the run in order, with the read they came in.
The summary (JSON) is written on SIGTERM/SIGINT or after --duration, to
--out or stdout. Memory is bounded: partial frames up to 1 MiB are buffered
(larger payloads are counted and skipped), per-stream data up to 64 KiB,
distinct keys of every counter up to 64, traces of 200 frames.
"""
import argparse
import collections
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

# RFC 7541 Appendix B (Huffman code) and A (static table), generated from
# Go's golang.org/x/net/http2/hpack tables.
HUFFMAN_CODES = (
    0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7,
    0xfffffe8, 0xffffea, 0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec,
    0xfffffed, 0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1, 0xffffff2, 0x3ffffffe, 0xffffff3,
    0xffffff4, 0xffffff5, 0xffffff6, 0xffffff7, 0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb,
    0x14, 0x3f8, 0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa,
    0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18,
    0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d,
    0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20, 0xffb, 0x3fc,
    0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62,
    0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a,
    0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72,
    0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0, 0x1ffc, 0x3ffc, 0x22,
    0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26,
    0x27, 0x6, 0x74, 0x75, 0x28, 0x29, 0x2a, 0x7,
    0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78,
    0x79, 0x7a, 0x7b, 0x7ffe, 0x7fc, 0x3ffd, 0x1ffd, 0xffffffc,
    0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4, 0x3fffd5, 0x7fffd9,
    0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb, 0x7fffdf,
    0xffffec, 0xffffed, 0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3,
    0x7fffe4, 0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef,
    0x3fffda, 0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde,
    0x7fffea, 0x3fffdd, 0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb, 0x7fffec,
    0x1fffe0, 0x1fffe1, 0x3fffe0, 0x1fffe2, 0x7fffed, 0x3fffe1, 0x7fffee, 0x7fffef,
    0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4, 0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1,
    0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7, 0x7ffff2, 0x3fffe8, 0x1ffffec,
    0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde, 0x7ffffdf, 0x3ffffe5, 0xfffff1, 0x1ffffed,
    0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7, 0x7ffffe2, 0xfffff2,
    0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4, 0x7ffffe5,
    0xfffec, 0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3,
    0x3fffea, 0x3fffeb, 0x1ffffee, 0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4,
    0x3ffffeb, 0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9, 0x7ffffea,
    0x7ffffeb, 0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef, 0x7fffff0, 0x3ffffee,
)
HUFFMAN_LENS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
)
STATIC_TABLE = (
    (':authority', ''),
    (':method', 'GET'),
    (':method', 'POST'),
    (':path', '/'),
    (':path', '/index.html'),
    (':scheme', 'http'),
    (':scheme', 'https'),
    (':status', '200'),
    (':status', '204'),
    (':status', '206'),
    (':status', '304'),
    (':status', '400'),
    (':status', '404'),
    (':status', '500'),
    ('accept-charset', ''),
    ('accept-encoding', 'gzip, deflate'),
    ('accept-language', ''),
    ('accept-ranges', ''),
    ('accept', ''),
    ('access-control-allow-origin', ''),
    ('age', ''),
    ('allow', ''),
    ('authorization', ''),
    ('cache-control', ''),
    ('content-disposition', ''),
    ('content-encoding', ''),
    ('content-language', ''),
    ('content-length', ''),
    ('content-location', ''),
    ('content-range', ''),
    ('content-type', ''),
    ('cookie', ''),
    ('date', ''),
    ('etag', ''),
    ('expect', ''),
    ('expires', ''),
    ('from', ''),
    ('host', ''),
    ('if-match', ''),
    ('if-modified-since', ''),
    ('if-none-match', ''),
    ('if-range', ''),
    ('if-unmodified-since', ''),
    ('last-modified', ''),
    ('link', ''),
    ('location', ''),
    ('max-forwards', ''),
    ('proxy-authenticate', ''),
    ('proxy-authorization', ''),
    ('range', ''),
    ('referer', ''),
    ('refresh', ''),
    ('retry-after', ''),
    ('server', ''),
    ('set-cookie', ''),
    ('strict-transport-security', ''),
    ('transfer-encoding', ''),
    ('user-agent', ''),
    ('vary', ''),
    ('via', ''),
    ('www-authenticate', ''),
)

FRAME_TYPES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS",
               5: "PUSH_PROMISE", 6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"}
SETTINGS_NAMES = {1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH", 3: "MAX_CONCURRENT_STREAMS",
                  4: "INITIAL_WINDOW_SIZE", 5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE",
                  8: "ENABLE_CONNECT_PROTOCOL"}
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_KEYS = 64
MAX_FRAME_BUFFER = 1 << 20
MAX_STREAM_DATA = 64 << 10
TRACE_LEN = 200

HUFFMAN = {}
for _sym, (_code, _len) in enumerate(zip(HUFFMAN_CODES, HUFFMAN_LENS)):
    HUFFMAN[(_len, _code)] = _sym


def huffman_decode(data):
    out = bytearray()
    code = 0
    n = 0
    for byte in data:
        for i in range(7, -1, -1):
            code = (code << 1) | ((byte >> i) & 1)
            n += 1
            sym = HUFFMAN.get((n, code))
            if sym is not None:
                out.append(sym)
                code = 0
                n = 0
            elif n > 30:
                raise ValueError("bad huffman code")
    return out.decode("latin-1")  # trailing bits (< 8, all ones) are padding


class Counter(collections.Counter):
    """A collections.Counter that keeps at most MAX_KEYS keys (others go to "(other)")."""

    def add(self, key, n=1):
        if key in self or len(self) < MAX_KEYS:
            self[key] += n
        else:
            self["(other)"] += n


class Hpack:
    """An HPACK decoder (RFC 7541) with its dynamic table."""

    def __init__(self):
        self.table = collections.deque()
        self.size = 0
        self.max_size = 4096

    def _evict(self):
        while self.size > self.max_size and self.table:
            name, value = self.table.pop()
            self.size -= 32 + len(name) + len(value)

    def _get(self, index):
        if index <= 0:
            raise ValueError("index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        return self.table[index - len(STATIC_TABLE) - 1]

    @staticmethod
    def _int(data, pos, prefix):
        mask = (1 << prefix) - 1
        value = data[pos] & mask
        pos += 1
        if value < mask:
            return value, pos
        shift = 0
        while True:
            b = data[pos]
            pos += 1
            value += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value, pos

    def _str(self, data, pos):
        huff = data[pos] & 0x80
        length, pos = self._int(data, pos, 7)
        raw = bytes(data[pos:pos + length])
        pos += length
        return (huffman_decode(raw) if huff else raw.decode("latin-1")), pos

    def decode(self, data):
        headers = []
        pos = 0
        while pos < len(data):
            b = data[pos]
            if b & 0x80:  # indexed
                index, pos = self._int(data, pos, 7)
                headers.append(self._get(index))
            elif b & 0x40:  # literal, incremental indexing
                index, pos = self._int(data, pos, 6)
                name = self._get(index)[0] if index else None
                if name is None:
                    name, pos = self._str(data, pos)
                value, pos = self._str(data, pos)
                headers.append((name, value))
                self.table.appendleft((name, value))
                self.size += 32 + len(name) + len(value)
                self._evict()
            elif b & 0x20:  # dynamic table size update
                self.max_size, pos = self._int(data, pos, 5)
                self._evict()
            else:  # literal without indexing / never indexed
                index, pos = self._int(data, pos, 4)
                name = self._get(index)[0] if index else None
                if name is None:
                    name, pos = self._str(data, pos)
                value, pos = self._str(data, pos)
                headers.append((name, value))
        return headers


def varint(data, pos):
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def protobuf_fields(data):
    """[(field, wire type, value)] of one message; LEN values as bytes."""
    fields = []
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 2:
            n, pos = varint(data, pos)
            value = bytes(data[pos:pos + n])
            pos += n
        elif wire == 1:
            value = bytes(data[pos:pos + 8])
            pos += 8
        elif wire == 5:
            value = bytes(data[pos:pos + 4])
            pos += 4
        else:
            raise ValueError("wire type %d" % wire)
        fields.append((field, wire, value))
    return fields


def grpc_messages(data):
    """The gRPC messages (compressed flag, bytes) in a stream's DATA payloads."""
    messages = []
    pos = 0
    while pos + 5 <= len(data):
        flag, length = struct.unpack(">BI", data[pos:pos + 5])
        messages.append((flag, length, bytes(data[pos + 5:pos + 5 + length])))
        pos += 5 + length
    return messages


def frame_name(ftype, flags):
    name = FRAME_TYPES.get(ftype, "UNKNOWN_%d" % ftype)
    marks = []
    if ftype in (0, 1) and flags & 0x1:
        marks.append("ES")
    if ftype in (1, 9) and flags & 0x4:
        marks.append("EH")
    if ftype in (4, 6) and flags & 0x1:
        marks.append("ACK")
    return name + ("[" + ",".join(marks) + "]" if marks else "")


class Stream:
    def __init__(self, sid, t):
        self.sid = sid
        self.t0 = t
        self.path = None
        self.req_headers = None
        self.resp_headers = []
        self.frames = {"c2s": Counter(), "s2c": Counter()}
        self.bytes = {"c2s": 0, "s2c": 0}
        self.data = {"c2s": bytearray(), "s2c": bytearray()}
        self.sequence = []
        self.ended = {"c2s": False, "s2c": False}
        self.reset = None


class MethodStats:
    def __init__(self):
        self.calls = 0
        self.frames = {"c2s": Counter(), "s2c": Counter()}
        self.bytes = {"c2s": 0, "s2c": 0}
        self.sequences = Counter()
        self.req_msg_len = Counter()
        self.resp_msg_len = Counter()
        self.grpc_status = Counter()
        self.exec_timeout = Counter()
        self.exec_cmd = Counter()
        self.exec_exit_code = Counter()
        self.request_headers = Counter()
        self.response_headers = Counter()
        self.resets = Counter()
        self.frames_after_close = {"c2s": Counter(), "s2c": Counter()}
        self.durations_ms = []

    def summary(self):
        n = max(self.calls, 1)
        d = sorted(self.durations_ms)
        pick = (lambda p: d[min(len(d) - 1, int(p * len(d)))] if d else None)
        return {
            "calls": self.calls,
            "request_frames_per_call": {k: v / n for k, v in sorted(self.frames["c2s"].items())},
            "response_frames_per_call": {k: v / n for k, v in sorted(self.frames["s2c"].items())},
            "request_bytes_per_call": self.bytes["c2s"] / n,
            "response_bytes_per_call": self.bytes["s2c"] / n,
            "frame_sequences": dict(self.sequences.most_common(8)),
            "grpc_request_message_len": dict(self.req_msg_len),
            "grpc_response_message_len": dict(self.resp_msg_len.most_common(8)),
            "grpc_status": dict(self.grpc_status),
            "exec_timeout_s": dict(self.exec_timeout),
            "exec_cmd": dict(self.exec_cmd),
            "exec_exit_code": dict(self.exec_exit_code),
            "request_headers": dict(self.request_headers.most_common(32)),
            "response_headers": dict(self.response_headers.most_common(16)),
            "resets": dict(self.resets),
            "frames_after_close": {k: dict(v) for k, v in self.frames_after_close.items() if v},
            "proxy_seen_ms": {"p50": pick(0.5), "p99": pick(0.99)},
        }


class Stats:
    """Everything recorded; one lock for all (a few hundred frames a second)."""

    def __init__(self, label):
        self.label = label
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.connections = []
        self.methods = collections.defaultdict(MethodStats)
        self.trace_head = []
        self.trace_tail = collections.deque(maxlen=TRACE_LEN)

    def method(self, path):
        if path not in self.methods and len(self.methods) >= MAX_KEYS:
            path = "(other)"
        return self.methods[path]

    def trace(self, entry):
        if len(self.trace_head) < TRACE_LEN:
            self.trace_head.append(entry)
        else:
            self.trace_tail.append(entry)


class Direction:
    def __init__(self, name):
        self.name = name
        self.reads = 0
        self.bytes = 0
        self.frames = Counter()
        self.frame_bytes = Counter()
        self.frames_per_read = Counter()
        self.bytes_per_read = Counter()
        self.settings = []
        self.window_update_conn = [0, 0]  # count, increment sum
        self.window_update_stream = [0, 0]
        self.pings = Counter()
        self.rst_codes = Counter()
        self.goaway = []
        self.errors = Counter()
        # parser state
        self.buf = bytearray()
        self.preface = name == "c2s"
        self.skip = 0
        self.hpack = Hpack()
        self.header_block = None  # (sid, flags, bytearray) while CONTINUATIONs follow

    def summary(self):
        return {
            "reads": self.reads, "bytes": self.bytes,
            "frames": dict(self.frames), "frame_bytes": dict(self.frame_bytes),
            "frames_completed_per_read": dict(sorted(self.frames_per_read.items())),
            "bytes_per_read": dict(self.bytes_per_read.most_common(12)),
            "settings": self.settings[:8],
            "window_update_connection": {"count": self.window_update_conn[0], "increment_sum": self.window_update_conn[1]},
            "window_update_stream": {"count": self.window_update_stream[0], "increment_sum": self.window_update_stream[1]},
            "pings": dict(self.pings), "rst_stream_codes": dict(self.rst_codes),
            "goaway": self.goaway[:4], "parse_errors": dict(self.errors),
        }


class Connection:
    def __init__(self, stats, cid):
        self.stats = stats
        self.cid = cid
        self.t0 = time.monotonic()
        self.dirs = {"c2s": Direction("c2s"), "s2c": Direction("s2c")}
        self.streams = {}
        self.closed = collections.OrderedDict()  # recently closed stream id -> path
        self.calls = 0

    def summary(self):
        return {"id": self.cid, "opened_s": round(self.t0 - self.stats.t0, 3), "calls": self.calls,
                "open_streams": len(self.streams),
                "c2s": self.dirs["c2s"].summary(), "s2c": self.dirs["s2c"].summary()}

    # Called with stats.lock held.
    def feed(self, dname, data):
        d = self.dirs[dname]
        d.reads += 1
        d.bytes += len(data)
        d.bytes_per_read.add(len(data))
        read_no = d.reads
        completed = 0
        pos = 0
        if d.skip:
            n = min(d.skip, len(data))
            d.skip -= n
            pos = n
        d.buf += data[pos:]
        if d.preface:
            if len(d.buf) < len(PREFACE):
                d.frames_per_read.add(0)
                return
            if bytes(d.buf[:len(PREFACE)]) != PREFACE:
                d.errors.add("no client preface")
            del d.buf[:len(PREFACE)]
            d.preface = False
        while len(d.buf) >= 9:
            length = int.from_bytes(d.buf[0:3], "big")
            ftype, flags = d.buf[3], d.buf[4]
            sid = int.from_bytes(d.buf[5:9], "big") & 0x7FFFFFFF
            if length > MAX_FRAME_BUFFER:
                # Count it, skip its payload.
                have = len(d.buf) - 9
                d.skip = length - have
                del d.buf[:]
                self.frame(d, ftype, flags, sid, length, None, read_no)
                completed += 1
                break
            if len(d.buf) < 9 + length:
                break
            payload = bytes(d.buf[9:9 + length])
            del d.buf[:9 + length]
            try:
                self.frame(d, ftype, flags, sid, length, payload, read_no)
            except Exception as e:  # a parse error must not stop the forwarding
                d.errors.add("%s: %s" % (type(e).__name__, e))
            completed += 1
        d.frames_per_read.add(completed)

    def frame(self, d, ftype, flags, sid, length, payload, read_no):
        st = self.stats
        name = FRAME_TYPES.get(ftype, "UNKNOWN_%d" % ftype)
        fname = frame_name(ftype, flags)
        d.frames.add(name)
        d.frame_bytes.add(name, 9 + length)
        t_ms = round((time.monotonic() - st.t0) * 1e3, 3)
        st.trace({"t_ms": t_ms, "conn": self.cid, "dir": d.name, "read": read_no,
                  "frame": fname, "stream": sid, "len": length})
        if payload is None:
            return
        if sid == 0:
            if ftype == 4 and not flags & 1:
                d.settings.append({SETTINGS_NAMES.get(k, str(k)): v
                                   for k, v in (struct.unpack(">HI", payload[i:i + 6])
                                                for i in range(0, len(payload) - 5, 6))})
                for k, v in (struct.unpack(">HI", payload[i:i + 6]) for i in range(0, len(payload) - 5, 6)):
                    if k == 1:
                        # The peer's decoder table size bounds our side's encoder;
                        # the encoder announces the size it uses in-band.
                        pass
            elif ftype == 6:
                d.pings.add(("ACK " if flags & 1 else "") + payload.hex())
            elif ftype == 8:
                d.window_update_conn[0] += 1
                d.window_update_conn[1] += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            elif ftype == 7:
                last, code = struct.unpack(">II", payload[:8])
                d.goaway.append({"last_stream": last & 0x7FFFFFFF, "code": code,
                                 "debug": payload[8:72].decode("latin-1")})
            return
        # Stream frames.
        if ftype == 8:
            d.window_update_stream[0] += 1
            d.window_update_stream[1] += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        if ftype == 3:
            d.rst_codes.add(int.from_bytes(payload[:4], "big"))
        s = self.streams.get(sid)
        if s is None:
            if sid in self.closed:
                st.method(self.closed[sid]).frames_after_close[d.name].add(fname)
                return
            if not (d.name == "c2s" and ftype == 1):
                d.errors.add("frame %s on unknown stream" % fname)
                if ftype == 1 and flags & 0x4:
                    d.hpack.decode(payload)  # keep the HPACK table in step
                return
            s = self.streams[sid] = Stream(sid, time.monotonic())
        s.frames[d.name].add(name)
        s.bytes[d.name] += 9 + length
        s.sequence.append("%s:%s" % ("C" if d.name == "c2s" else "S", fname))
        if ftype in (0, 1) and flags & 0x8:  # padded
            pad = payload[0]
            payload = payload[1:len(payload) - pad]
        if ftype == 1:
            if flags & 0x20:  # priority
                payload = payload[5:]
            if flags & 0x4:
                self.headers(d, s, payload)
            else:
                d.header_block = (sid, bytearray(payload))
        elif ftype == 9:
            if d.header_block and d.header_block[0] == sid:
                d.header_block[1].extend(payload)
                if flags & 0x4:
                    block = d.header_block[1]
                    d.header_block = None
                    self.headers(d, s, block)
        elif ftype == 0:
            if len(s.data[d.name]) + len(payload) <= MAX_STREAM_DATA:
                s.data[d.name] += payload
        elif ftype == 3:
            s.reset = (d.name, int.from_bytes(payload[:4], "big"))
            self.close(s)
            return
        if ftype in (0, 1) and flags & 0x1:
            s.ended[d.name] = True
            if s.ended["c2s"] and s.ended["s2c"]:
                self.close(s)

    def headers(self, d, s, block):
        headers = d.hpack.decode(block)
        if d.name == "c2s":
            s.req_headers = headers
            for k, v in headers:
                if k == ":path":
                    s.path = v
        else:
            s.resp_headers.append(headers)

    def close(self, s):
        st = self.stats
        del self.streams[s.sid]
        path = s.path or "(unknown)"
        self.closed[s.sid] = path
        while len(self.closed) > 64:
            self.closed.popitem(last=False)
        m = st.method(path)
        m.calls += 1
        self.calls += 1
        m.durations_ms.append(round((time.monotonic() - s.t0) * 1e3, 3))
        if len(m.durations_ms) > 100000:
            del m.durations_ms[::2]
        for dn in ("c2s", "s2c"):
            for k, v in s.frames[dn].items():
                m.frames[dn].add(k, v)
            m.bytes[dn] += s.bytes[dn]
        m.sequences.add(" ".join(s.sequence))
        if s.reset:
            m.resets.add("%s code %d" % s.reset)
        for k, v in s.req_headers or []:
            # Values that change per call are shown by name only.
            shown = v if k not in ("grpc-timeout",) else "<%d chars, unit %s>" % (len(v), v[-1:])
            m.request_headers.add("%s: %s" % (k, shown))
        for block in s.resp_headers:
            for k, v in block:
                if k == "grpc-status":
                    m.grpc_status.add(v)
                shown = v if k not in ("grpc-message",) else v[:60]
                m.response_headers.add("%s: %s" % (k, shown))
        for flag, length, msg in grpc_messages(s.data["c2s"]):
            m.req_msg_len.add(length)
            if path.endswith("/ExecSync"):
                cmd, timeout, cid = [], None, ""
                for field, wire, value in protobuf_fields(msg):
                    if field == 1 and wire == 2:
                        cid = value.decode("latin-1")
                    elif field == 2 and wire == 2:
                        cmd.append(value.decode("latin-1"))
                    elif field == 3 and wire == 0:
                        timeout = value
                m.exec_timeout.add(str(timeout if timeout is not None else "0 (field absent)"))
                m.exec_cmd.add(" ".join(cmd) + " (container_id: %d chars)" % len(cid))
        for flag, length, msg in grpc_messages(s.data["s2c"]):
            m.resp_msg_len.add(length)
            if path.endswith("/ExecSync"):
                code, out, err = 0, 0, 0
                for field, wire, value in protobuf_fields(msg):
                    if field == 1 and wire == 2:
                        out = len(value)
                    elif field == 2 and wire == 2:
                        err = len(value)
                    elif field == 3 and wire == 0:
                        code = value
                m.exec_exit_code.add("%d (stdout %d B, stderr %d B)" % (code, out, err))


def pump(stats, conn, dname, src, dst, done):
    try:
        while True:
            data = src.recv(262144)
            if not data:
                break
            # Parsed before it is forwarded: the reply to a request must not
            # be parsed before the request itself.
            with stats.lock:
                conn.feed(dname, data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        done.release()


def serve_one(stats, client, upstream_path, cid):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(upstream_path)
    except OSError as e:
        print("criproxy: upstream %s: %s" % (upstream_path, e), file=sys.stderr)
        client.close()
        return
    conn = Connection(stats, cid)
    with stats.lock:
        stats.connections.append(conn)
    done = threading.Semaphore(0)
    for dname, src, dst in (("c2s", client, upstream), ("s2c", upstream, client)):
        threading.Thread(target=pump, args=(stats, conn, dname, src, dst, done), daemon=True).start()
    done.acquire()
    done.acquire()
    client.close()
    upstream.close()


def summary(stats):
    with stats.lock:
        wall = time.monotonic() - stats.t0
        methods = {p: m.summary() for p, m in sorted(stats.methods.items())}
        conns = [c.summary() for c in stats.connections]
        exec_calls = sum(m.calls for p, m in stats.methods.items() if p.endswith("/ExecSync"))
        tot = {"c2s": Counter(), "s2c": Counter()}
        reads = {"c2s": 0, "s2c": 0}
        nbytes = {"c2s": 0, "s2c": 0}
        for c in stats.connections:
            for dn in ("c2s", "s2c"):
                for k, v in c.dirs[dn].frames.items():
                    tot[dn].add(k, v)
                reads[dn] += c.dirs[dn].reads
                nbytes[dn] += c.dirs[dn].bytes
        n = max(exec_calls, 1)
        per_exec = {
            "exec_sync_calls": exec_calls,
            "other_calls": {p: m.calls for p, m in stats.methods.items() if not p.endswith("/ExecSync")},
            "frames_c2s": {k: round(v / n, 3) for k, v in sorted(tot["c2s"].items())},
            "frames_s2c": {k: round(v / n, 3) for k, v in sorted(tot["s2c"].items())},
            "bytes_c2s": round(nbytes["c2s"] / n, 1), "bytes_s2c": round(nbytes["s2c"] / n, 1),
            # The runtime's side: writes the proxy made to it (one per read
            # from the client) and reads the proxy made from it.
            "writes_to_runtime": round(reads["c2s"] / n, 3),
            "reads_from_runtime": round(reads["s2c"] / n, 3),
        }
        return {"label": stats.label, "started_unix": stats.wall0, "wall_s": round(wall, 3),
                "per_exec_sync_call": per_exec, "methods": methods, "connections": conns,
                "trace_head": stats.trace_head, "trace_tail": list(stats.trace_tail)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--out")
    ap.add_argument("--duration", type=float)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    upstream = args.upstream.removeprefix("unix://")
    stats = Stats(args.label)
    try:
        os.unlink(args.listen)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.listen)
    listener.listen(64)
    stop = threading.Event()

    def accept():
        cid = 0
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            cid += 1
            threading.Thread(target=serve_one, args=(stats, client, upstream, cid), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("criproxy: %s -> %s" % (args.listen, upstream), file=sys.stderr, flush=True)
    stop.wait(args.duration)
    stop.set()
    text = json.dumps(summary(stats), indent=1)
    if args.out:
        with open(args.out + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(args.out + ".tmp", args.out)
    else:
        print(text)
    listener.close()
    try:
        os.unlink(args.listen)
    except OSError:
        pass


if __name__ == "__main__":
    main()
