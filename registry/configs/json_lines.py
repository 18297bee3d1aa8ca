"""Strict reading of a `config.json`, and the line of every JSON path, for `FILE:LINE:` messages.

Why: `json.loads` alone lets bad files through or crashes on them: nesting ~1000 deep raises
RecursionError, a 5000-digit integer raises ValueError (Python's 4300-digit limit), NaN /
Infinity (not JSON, RFC 8259) and 1e400 (inf) are accepted, and a duplicate key silently keeps
the last value. `read_json` refuses each of these with one `JsonProblem` naming the line:

  MAX_BYTES = 16 MiB     a config.json is KBs (a few MB with per-layer tables); larger is refused
                         before reading, naming the size and the cap
  MAX_DEPTH = 100        levels of objects / arrays (a quantization_config needs about 6)
  MAX_NUMBER_CHARS = 100 a number literal longer than this is refused (never parsed)
  NaN, Infinity, -Infinity, numbers that overflow to inf: refused (not JSON)
  duplicate keys: refused, naming the key and both lines (the last one silently winning is a
                         silent drop)

Lines: `JsonLines(text).line(path)` walks the already valid text to the value at `path` (a
tuple of keys and list indexes), indexing only the objects / arrays it passes through (each
once, cached); the values it steps over are skipped by json's own C scanner, keys are read
with json's own string decoder. No third-party parser.
"""
from __future__ import annotations

import bisect
import json
import json.decoder
import json.scanner
import math
import re
from pathlib import Path
from typing import Any, Optional

MAX_BYTES = 16 << 20
MAX_DEPTH = 100
MAX_NUMBER_CHARS = 100
SHOWN_CHARS = 60  # values quoted in messages are cut to this many characters

JsonPath = tuple  # keys (str) and list indexes (int)
_WS = re.compile(r"[ \t\n\r]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


class JsonProblem(Exception):
    """A problem that stops reading the file; `line` is None when no line applies (no file)."""

    def __init__(self, line: Optional[int], message: str):
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line
        self.message = message


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters with '...' (messages never echo a megabyte value)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def one_line(text: str) -> str:
    """A name the file chose (a pattern, a key), cut, and as JSON when it holds control
    characters, so a message stays one line."""
    return shorten(text) if text.isprintable() else shorten(json.dumps(text))


def show_path(path: JsonPath) -> str:
    """`('quantization_config', 'exclude', 3)` -> `quantization_config.exclude[3]`."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.fullmatch(p):
            out += f".{p}" if out else p
        else:
            out += f"[{shorten(json.dumps(p))}]"
    return out or "(top level)"


class _Refused:
    """What the parse hooks return for a literal that is refused (found by the walk after)."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str):
        self.text, self.why = text, why


def _skipper():
    def nothing(_):
        return None

    dec = json.JSONDecoder(parse_int=nothing, parse_float=nothing, parse_constant=nothing,
                           object_pairs_hook=nothing)
    return json.scanner.make_scanner(dec)


_SKIP = _skipper()


class JsonLines:
    """The line of each JSON path of a valid JSON text (1-based)."""

    def __init__(self, text: str):
        self.text = text
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        self._index: dict[int, Any] = {}  # container offset -> {key: [offsets]} or [offsets]
        self._root = _WS.match(text, 0).end()

    def line_at(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1

    def _children(self, at: int) -> Any:
        got = self._index.get(at)
        if got is not None:
            return got
        text, opener = self.text, self.text[at]
        i = _WS.match(text, at + 1).end()
        if opener == "{":
            keys: dict[str, list[int]] = {}
            while text[i] == '"':
                key, i = json.decoder.scanstring(text, i + 1)
                i = _WS.match(text, _WS.match(text, i).end() + 1).end()  # past ':'
                keys.setdefault(key, []).append(i)
                i = _WS.match(text, _SKIP(text, i)[1]).end()
                if text[i] == ",":
                    i = _WS.match(text, i + 1).end()
            got = keys
        else:
            items: list[int] = []
            while text[i] != "]":
                items.append(i)
                i = _WS.match(text, _SKIP(text, i)[1]).end()
                if text[i] == ",":
                    i = _WS.match(text, i + 1).end()
            got = items
        self._index[at] = got
        return got

    def _offsets(self, path: JsonPath) -> list[int]:
        """Offsets of the values along `path` (as far as it exists in the text)."""
        at, out = self._root, [self._root]
        for p in path:
            if at >= len(self.text) or self.text[at] not in "{[":
                break
            kids = self._children(at)
            if isinstance(kids, dict):
                if not isinstance(p, str) or p not in kids:
                    break
                at = kids[p][-1]  # the value json.loads kept
            else:
                if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < len(kids):
                    break
                at = kids[p]
            out.append(at)
        return out

    def line(self, path: JsonPath) -> int:
        """The line of the value at `path`, or of its nearest parent present in the text."""
        return self.line_at(self._offsets(tuple(path))[-1])

    def key_lines(self, path: JsonPath, key: str) -> list[int]:
        """The lines of every occurrence of `key` in the object at `path` (duplicates)."""
        offsets = self._offsets(tuple(path))
        if len(offsets) != len(path) + 1 or self.text[offsets[-1]] != "{":
            return []
        return [self.line_at(o) for o in self._children(offsets[-1]).get(key, [])]


def _deep_line(text: str) -> int:
    """The line where nesting first goes deeper than MAX_DEPTH (strings skipped)."""
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return text.count("\n", 0, m.start()) + 1
        elif c in "]}":
            depth -= 1
    return 1


def read_json_file(path: Path) -> tuple[Any, JsonLines]:
    """The JSON value of the file and its lines; JsonProblem (one line) when it is not strict
    JSON within the limits of the module docstring."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise JsonProblem(1, f"file is {size} bytes; config.json is read up to "
                                 f"{MAX_BYTES} bytes (16 MiB)")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise JsonProblem(None, "no such file (give a config.json or its model directory)"
                          ) from None
    except OSError as e:
        raise JsonProblem(None, f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:
        raise JsonProblem(1, f"file is over {MAX_BYTES} bytes (16 MiB); config.json is read up "
                             "to that size")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise JsonProblem(raw.count(b"\n", 0, e.start) + 1,
                          f"not UTF-8 text (byte 0x{raw[e.start]:02x}); save it as UTF-8"
                          ) from None
    return read_json_text(text)


def read_json_text(text: str) -> tuple[Any, JsonLines]:
    """`read_json_file` for a text already in memory."""
    state: dict[str, Any] = {"refused": 0, "dups": []}

    def pairs_hook(pairs: list) -> dict:
        d = dict(pairs)
        if len(d) != len(pairs):
            seen: set = set()
            dup = next(k for k, _ in pairs if k in seen or seen.add(k))
            state["dups"].append((d, dup))
        return d

    def refuse(text_: str, why: str) -> _Refused:
        state["refused"] += 1
        return _Refused(text_, why)

    def number(s: str, kind: type) -> Any:
        if len(s) > MAX_NUMBER_CHARS:
            return refuse(s, f"is a number of {len(s)} characters; at most "
                             f"{MAX_NUMBER_CHARS} are read")
        value = kind(s)
        if kind is float and not math.isfinite(value):
            return refuse(s, "overflows to infinity; write a finite number")
        return value

    try:
        data = json.loads(text, object_pairs_hook=pairs_hook,
                          parse_int=lambda s: number(s, int),
                          parse_float=lambda s: number(s, float),
                          parse_constant=lambda s: refuse(s, "is not JSON (RFC 8259); write a "
                                                             "number or null"))
    except RecursionError:
        raise JsonProblem(_deep_line(text), f"nested deeper than {MAX_DEPTH} levels; a "
                                            "config.json needs about 6") from None
    except json.JSONDecodeError as e:
        raise JsonProblem(e.lineno, f"not JSON: {e.msg} (column {e.colno})") from None
    lines = JsonLines(text)
    _check_walk(data, lines, state)
    return data, lines


def _check_walk(data: Any, lines: JsonLines, state: dict) -> None:
    """Depth, refused literals and duplicate keys, each located; the first in the file wins."""
    if type(data) is _Refused:
        raise JsonProblem(1, f"{shorten(data.text, 24)} {data.why}")
    dup_ids = {id(d): k for d, k in state["dups"]}
    want_refused = state["refused"] > 0
    found: list[tuple[int, str]] = []  # (line, message)
    stack: list[tuple[Any, tuple]] = [(data, ())]
    while stack and len(found) < 20:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            found.append((lines.line(path), f"{show_path(path[:8])}...: nested deeper than "
                                            f"{MAX_DEPTH} levels; a config.json needs about 6"))
            break
        if isinstance(value, dict):
            key = dup_ids.get(id(value))
            if key is not None:
                at = lines.key_lines(path, key)
                first = f" (first at line {at[0]})" if len(at) > 1 else ""
                found.append((at[1] if len(at) > 1 else lines.line(path),
                              f"{show_path(path + (key,))}: duplicate key "
                              f"{shorten(json.dumps(key))}{first}; JSON readers silently keep "
                              "the last one: remove one"))
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            continue
        for k, v in items:
            if type(v) is dict or type(v) is list:
                stack.append((v, path + (k,)))
            elif want_refused and type(v) is _Refused:
                found.append((lines.line(path + (k,)),
                              f"{show_path(path + (k,))}: {shorten(v.text, 24)} {v.why}"))
    if found:
        line, message = min(found)
        more = len(found) - 1
        raise JsonProblem(line, message + (f" (and {more} more such problem(s))" if more else ""))


__all__ = ["JsonLines", "JsonProblem", "MAX_BYTES", "MAX_DEPTH", "MAX_NUMBER_CHARS",
           "one_line", "read_json_file", "read_json_text", "shorten", "show_path"]
