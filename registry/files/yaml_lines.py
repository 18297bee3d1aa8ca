"""Safe YAML reading that keeps the line of every key, for `file:line` messages.

PyYAML's SafeLoader is used only to scan, parse and compose nodes; the values are built here
from the nodes, so that: every mapping key and list item records its line; a duplicate key is
an error (PyYAML would keep the last one silently); explicit tags (`!!python/...`, `!foo`),
anchors and aliases are refused before anything is built from them (no objects, no
billion-laughs); nesting deeper than MAX_DEPTH or more than MAX_NODES values (a 100k-key
flood would otherwise take seconds and print 100k findings) stop at once; YAML 1.1 words
such as `yes`, `no`, `on`, `off` stay strings (only `true` / `false` are booleans), so
`static: yes` is reported rather than guessed. Lines are counted as editors count them (\n, \r\n, \r), not as
YAML does (it also breaks lines at U+0085, U+2028, U+2029), so `file:line` never points past
the end of the file.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.events import AliasEvent, StreamEndEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_DEPTH = 20  # mapping / list levels; a scheme file needs 3
MAX_NODES = 1000  # keys, values and list items; a scheme file has about 25
DocPath = tuple  # a path into the document: keys (str) and list indexes (int)

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_YAML_TAG_PREFIX = "tag:yaml.org,2002:"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class YamlProblem(Exception):
    """A problem that stops reading the file: not YAML, a tag, an anchor, too deep..."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass
class Parsed:
    """The document as plain values, the line of each path, and non-fatal problems."""

    data: Any
    lines: dict[DocPath, int]
    problems: list[tuple[int, str, str]] = field(default_factory=list)  # (line, field, message)


def dotted(path: DocPath) -> str:
    """`('weight', 'scale', 'block')` -> `weight.scale.block`; odd keys are quoted."""
    parts = []
    for p in path:
        if isinstance(p, int):
            parts.append(str(p))
        elif _PLAIN_KEY.fullmatch(p):
            parts.append(p)
        else:
            parts.append(ascii(p))
    return ".".join(parts)


def line_of(lines: dict[DocPath, int], path: DocPath) -> int:
    """The line of `path`, or of its nearest parent present in the file, or 1."""
    path = tuple(path)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get((), 1)


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_YAML_TAG_PREFIX):] if tag.startswith(_YAML_TAG_PREFIX) else tag


class _StrictComposer(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors, explicit tags and deep nesting while composing."""

    def __init__(self, text: str):
        super().__init__(text)
        self._breaks = [m.end() for m in _LINE_BREAK.finditer(text)]
        self._depth = 0
        self._nodes = 0

    def line_of_mark(self, mark) -> int:
        """The 1-based line of a PyYAML mark, counting only \n, \r\n and \r as breaks."""
        return bisect.bisect_right(self._breaks, mark.index) + 1 if mark is not None else 1

    def compose_node(self, parent, index):  # noqa: D102 (PyYAML hook)
        event = self.peek_event()
        line = self.line_of_mark(event.start_mark)
        if isinstance(event, AliasEvent):
            raise YamlProblem(line, f"YAML alias '*{event.anchor}' is not allowed in scheme "
                                    "files; write the value out")
        if event.anchor is not None:
            raise YamlProblem(line, f"YAML anchor '&{event.anchor}' is not allowed in scheme "
                                    "files; remove it and write values out")
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise YamlProblem(line, f"explicit YAML tag {_show_tag(tag)!r} is not allowed in "
                                    "scheme files; write plain values")
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlProblem(line, f"more than {MAX_NODES} keys, values and list items; a "
                                    "scheme file has about 25")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlProblem(line, f"nested deeper than {MAX_DEPTH} levels; a scheme file "
                                        "needs 3")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _mark_line(loader: _StrictComposer, err: yaml.MarkedYAMLError) -> int:
    return loader.line_of_mark(err.problem_mark or err.context_mark)


def _yaml_error_text(err: yaml.MarkedYAMLError) -> str:
    parts = [p for p in (err.context, err.problem) if p]
    return "; ".join(parts) or "syntax error"


def parse_yaml(text: str) -> Parsed:
    """Parse one YAML document into plain values with lines; YamlProblem if it can't be read."""
    loader = None
    try:
        loader = _StrictComposer(text)  # its reader checks the characters at once
        loader.get_event()  # StreamStartEvent
        if loader.check_event(StreamEndEvent):
            raise YamlProblem(1, "empty file; a scheme file holds one mapping with the keys "
                                 "name, summary, aliases, weight, activation")
        node = loader.compose_document()
        if not loader.check_event(StreamEndEvent):
            line = loader.line_of_mark(loader.peek_event().start_mark)
            raise YamlProblem(line, "a second YAML document ('---'); put one scheme in each file")
        parsed = Parsed(data=None, lines={(): loader.line_of_mark(node.start_mark)})
        parsed.data = _build(loader, node, (), parsed)
        return parsed
    except yaml.MarkedYAMLError as e:
        raise YamlProblem(_mark_line(loader, e) if loader else 1,
                          f"not valid YAML: {_yaml_error_text(e)}") from None
    except yaml.reader.ReaderError as e:
        line = len(_LINE_BREAK.findall(text, 0, max(e.position, 0))) + 1
        char = e.character if isinstance(e.character, int) else ord(e.character[:1] or "?")
        raise YamlProblem(line, f"character U+{char:04X} is not allowed in YAML text; "
                                "remove it") from None
    except yaml.YAMLError as e:  # any other PyYAML error: still one clean message
        raise YamlProblem(1, f"not valid YAML: {e}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _build(loader: _StrictComposer, node: Any, path: DocPath, parsed: Parsed) -> Any:
    if isinstance(node, ScalarNode):
        return _scalar(loader, node, path, parsed)
    if isinstance(node, SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            parsed.lines[path + (i,)] = loader.line_of_mark(item.start_mark)
            items.append(_build(loader, item, path + (i,), parsed))
        return items
    if isinstance(node, MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            kline = loader.line_of_mark(key_node.start_mark)
            if not isinstance(key_node, ScalarNode):
                parsed.problems.append((kline, dotted(path), "a key must be a plain word, not a "
                                        "list or mapping"))
                continue
            key = key_node.value
            if key in out:
                first = parsed.lines[path + (key,)]
                parsed.problems.append((kline, dotted(path + (key,)),
                                        f"duplicate key {key!r} (first at line {first}); YAML "
                                        "would silently keep the last one: remove one"))
                continue
            parsed.lines[path + (key,)] = kline
            out[key] = _build(loader, value_node, path + (key,), parsed)
        return out
    raise YamlProblem(loader.line_of_mark(node.start_mark),
                      "unexpected YAML node")  # pragma: no cover


def _scalar(loader: _StrictComposer, node: ScalarNode, path: DocPath, parsed: Parsed) -> Any:
    tag = node.tag[len(_YAML_TAG_PREFIX):] if node.tag.startswith(_YAML_TAG_PREFIX) else ""
    text = node.value
    if tag == "null":
        return None
    if tag == "bool":
        return {"true": True, "false": False}.get(text.lower(), text)
    if tag in ("int", "float"):
        try:
            return loader.construct_yaml_int(node) if tag == "int" \
                else loader.construct_yaml_float(node)
        except (ValueError, OverflowError):
            parsed.problems.append((loader.line_of_mark(node.start_mark), dotted(path),
                                    f"number {text[:20]!r}... is too long to read"))
            return text
    return text
