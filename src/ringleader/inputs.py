"""Strict, bounded reading of the files a user hands ringleader (cluster YAML, calibration and
bench result JSON, trace CSV): a document is parsed into plain values with every size bounded,
then checked against its pydantic schema, and any refusal is one line naming the file, the line
where one is known, and the key.

Bounds hold before anything is built from the text: YAML aliases are refused (an alias makes a
450-byte file stand for gigabytes of nested lists), nesting is at most ``MAX_DEPTH`` deep,
integers have at most ``MAX_INT_DIGITS`` digits (Python refuses over 4,300 with a ValueError, and
a 400-digit one overflows float arithmetic), floats are finite, and a key given twice is refused
instead of the last one silently winning.

pydantic is imported only by the loaders: commands that read no input file do not pay for it.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import reprlib
import stat
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ringleader.errors import TopologyError, UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

# A file a user gives (a cluster, matrix, calibration, trace or topology file) is read up to
# MAX_FILE_BYTES before anything is built from it.
MAX_FILE_BYTES = 16 << 20
MAX_DEPTH = 32
MAX_INT_DIGITS = 18  # below 2**63: every count, size and rate the files hold fits, with room
Path = tuple[str | int, ...]  # where a value sits in a document: keys and list indexes


class InputError(UsageError):
    """A refused input file: the message names the file (and line) and what is wrong."""


def decode_text(data: bytes, origin: str, fix: str = "give the text the tool printed, saved as UTF-8") -> str:
    """``data`` as text; binary data or bytes that are not UTF-8 fail in one line naming
    ``origin`` and the line."""
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise TopologyError(f"{origin} line {line}: binary data (a NUL byte), not text", fix)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TopologyError(
            f"{origin} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", fix
        ) from None


def read_bounded(path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES, fix: str | None = None) -> str:
    """A regular file's text, refused in one line when it is anything else (a FIFO would block
    until some writer came, a device never ends), bigger than ``limit`` (checked while reading:
    the file may grow) or not UTF-8 (``fix`` says what to give instead)."""
    try:
        # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer, to be refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc.strerror}", "check the path") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a device or socket"
            raise UsageError(f"{what} {str(path)!r} is {kind}, not a regular file",
                             "save the content to a file and give its path")  # fmt: skip
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            fd = -1  # the file object closes it
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc.strerror}", "check the path") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise UsageError(f"{what} {str(path)!r} is too big (over {limit >> 20} MiB)", "give the real file")
    if fix is None:
        fix = "give the text the tool printed" if what == "file" else "give a YAML text file"
        fix += ", saved as UTF-8"
    return decode_text(data, f"{what} {str(path)!r}", fix)


def _short(value: Any) -> str:
    """A value quoted in an error: its repr cut short (a refused value may be megabytes)."""
    brief = reprlib.Repr()
    brief.maxstring = brief.maxother = 40
    brief.maxlist = brief.maxdict = 4
    brief.maxlevel = 2
    return brief.repr(value)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    # Two letters swapped (vgg61 for vgg16) score no better than one changed (vgg19): the
    # choice with the very letters typed wins a tie.
    swapped = [c for c in close if sorted(c) == sorted(word)]
    return f" (did you mean {(swapped or close)[0]!r}?)" if close else ""


def format_path(path: Path) -> str:
    """``nodes[0].labels.team``: how the messages name a place in a document."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the top level"


def _within(path: Path) -> str:
    return f"in {format_path(path)}" if path else "at the top level"


# -- YAML ---------------------------------------------------------------------------------------


class YamlTimestamp:
    """A plain scalar YAML 1.1 reads as a date (``2001-12-14``): kept as its text, never a
    date, so that a schema expecting a string refuses it instead of stringifying a date."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"{self.text} (a date to YAML)"


_YAML_SCALARS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp",
}  # fmt: skip


def line_at(lines: Mapping[Path, int], path: Path) -> int | None:
    """The line of the value at ``path``, else of the nearest value above it (``load_yaml``'s
    lines: a missing key has none of its own)."""
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path)


def load_yaml(text: str, origin: str) -> tuple[Any, dict[Path, int]]:
    """The YAML document in ``text`` as plain dicts, lists, str, int, float, bool and None, and
    the line (1-based) of every value by its path. Aliases, tags other than the plain scalar
    ones, keys that are not strings, a key given twice and nesting deeper than ``MAX_DEPTH`` are
    refused in one line naming ``origin`` and the line."""
    import yaml

    class Composer(yaml.SafeLoader):
        """Composes the node tree, refusing aliases as they come and bounding the depth (the
        composer recurses once per level: a bound here also keeps it from the recursion limit)."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise InputError(f"{origin} line {mark.line + 1}: YAML aliases (*name) are not allowed",
                                 "write each value out in full")  # fmt: skip
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputError(f"{origin} line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels",
                                 "flatten the document")  # fmt: skip
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = None
    try:
        loader = Composer(text)  # the reader refuses unprintable characters here already
        root = loader.get_single_node()
    except yaml.reader.ReaderError as exc:  # a control character: named by its line
        line = text.count("\n", 0, exc.position) + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise InputError(f"{origin} line {line}: character {char!r} is not allowed in YAML",
                         "remove it (copy the text again, without terminal control codes)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise InputError(f"{origin}{where}: not valid YAML ({problem})", "fix the YAML syntax") from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[Path, int] = {}
    value = None if root is None else _plain(root, (), lines, origin, yaml.SafeLoader.__new__(yaml.SafeLoader))
    return value, lines


def _plain(node: Any, path: Path, lines: dict[Path, int], origin: str, scalars: Any) -> Any:
    """A composed YAML node as plain values (its depth is bounded by the composer); ``scalars``
    builds int, float, bool and null values as YAML's safe loader does."""
    import yaml

    line = node.start_mark.line + 1
    lines[path] = line
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise InputError(f"{origin} line {key_line}: YAML merge keys (<<) are not allowed",
                                 "write each key out in full")  # fmt: skip
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                shown = _short(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "a list or mapping"
                raise InputError(f"{origin} line {key_line}: key {shown} {_within(path)} is not a plain "
                                 "string", "write the key as a plain or quoted string")  # fmt: skip
            key = key_node.value
            if key in first_line:
                raise InputError(
                    f"{origin} line {key_line}: key {key!r} given twice {_within(path)} (first on line "
                    f"{first_line[key]})", "give each key once")  # fmt: skip
            first_line[key] = key_line
            out[key] = _plain(value_node, (*path, key), lines, origin, scalars)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*path, i), lines, origin, scalars) for i, item in enumerate(node.value)]
    if node.tag not in _YAML_SCALARS:
        raise InputError(f"{origin} line {line}: YAML tag {node.tag!r} at {format_path(path)} is not allowed",
                         "drop the tag: write a plain string, number, true/false or null")  # fmt: skip
    text = node.value
    if node.tag == "tag:yaml.org,2002:timestamp":
        return YamlTimestamp(text)
    if node.tag == "tag:yaml.org,2002:int" and sum(c.isdigit() for c in text) > MAX_INT_DIGITS:
        raise InputError(f"{origin} line {line}: {format_path(path)}: integer of more than {MAX_INT_DIGITS} digits",
                         "give a smaller number")  # fmt: skip
    return yaml.SafeLoader.yaml_constructors[node.tag](scalars, node)


# -- JSON ---------------------------------------------------------------------------------------


class _Refused(Exception):
    """Raised from inside json.loads' hooks; turned into an InputError with the file's name."""

    def __init__(self, problem: str, needle: str, last: bool = False) -> None:
        super().__init__(problem)
        # ``needle``: the text that gave the problem, to find its line by (the last occurrence
        # for a repeated key: json.loads reports no position from its hooks)
        self.problem, self.needle, self.last = problem, needle, last


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"integer of more than {MAX_INT_DIGITS} digits", text[:40])
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {_short(text)} is out of range", text[:40])
    return value


def _json_constant(text: str) -> float:
    raise _Refused(f"{text} is not a JSON number", text)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {_short(key)} given twice in one object", json.dumps(key), last=True)
        out[key] = value
    return out


def load_json(text: str, origin: str, fix: str) -> Any:
    """The JSON document in ``text``; a syntax error, NaN or Infinity, an integer of more than
    ``MAX_INT_DIGITS`` digits, a key given twice or nesting deeper than ``MAX_DEPTH`` is one
    line naming ``origin`` (and the line, found by the offending text where the parser gives none)."""
    try:
        doc = json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant,
                         object_pairs_hook=_json_object)  # fmt: skip
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin} is not JSON (line {exc.lineno}: {exc.msg})", fix) from None
    except _Refused as exc:
        raise InputError(f"{origin}{_line_of(text, exc.needle, exc.last)}: {exc.problem}", fix) from None
    except RecursionError:  # the C decoder stops at the interpreter's recursion limit
        raise InputError(f"{origin}: nested deeper than {MAX_DEPTH} levels", fix) from None
    if _depth(doc) > MAX_DEPTH:
        raise InputError(f"{origin}: nested deeper than {MAX_DEPTH} levels", fix)
    return doc


def _line_of(text: str, needle: str, last: bool) -> str:
    at = text.rfind(needle) if last else text.find(needle)
    return f" line {text.count(chr(10), 0, at) + 1}" if at >= 0 else ""


def _depth(doc: Any) -> int:
    """How deep lists and objects nest in ``doc`` (walked with a stack: no recursion)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        value, level = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest


# -- schemas ------------------------------------------------------------------------------------


def validate(
    schema: type[BaseModel], doc: Any, origin: str, fix: str, line_of: Any = None, strict: bool = True
) -> Any:
    """``doc`` checked against ``schema`` (a pydantic model): the model, or an InputError on the
    first problem. ``line_of(path)`` gives the line of a place in the document, when known."""
    from pydantic import ValidationError

    try:
        return schema.model_validate(doc, strict=strict)
    except ValidationError as exc:
        raise schema_error(schema, exc, origin, fix, line_of) from None


def schema_error(schema: type[BaseModel], exc: ValidationError, origin: str, fix: str, line_of: Any) -> InputError:
    """The first problem pydantic found, in one line: where, the key, what was expected, what was given."""
    error = exc.errors(include_url=False)[0]
    path: Path = tuple(error["loc"])
    line = line_of(path) if line_of is not None else None
    where = f"{origin} line {line}" if line else origin
    kind, given = error["type"], error.get("input")
    name = format_path(path)
    if kind == "extra_forbidden":
        allowed = sorted(_fields_at(schema, path[:-1]))
        key = str(path[-1])
        return InputError(f"{where}: unknown key {key!r} {_within(path[:-1])}{did_you_mean(key, allowed)}",
                          f"use only {', '.join(allowed)}" if allowed else fix)  # fmt: skip
    if kind == "missing":
        return InputError(f"{where}: missing key {str(path[-1])!r} {_within(path[:-1])}", fix)
    message = str(error["msg"])
    message = message[0].lower() + message[1:]
    if message.startswith("value error, "):
        message = message[len("value error, ") :]
    expected = _EXPECTED.get(kind)
    if expected is not None:
        scalar = given is not None and not isinstance(given, dict | list)
        hint = f"quote it: '{_plain_text(given)}'" if kind == "string_type" and scalar else f"write {expected} there"
        return InputError(f"{where}: {name} must be {expected}, got {_short(given)}", hint)
    bound = _bound(kind, error.get("ctx") or {})
    if bound:
        return InputError(f"{where}: {name} must be {bound}, got {_short(given)}", fix)
    return InputError(f"{where}: {name}: {message}, got {_short(given)}", fix)


def _bound(kind: str, ctx: dict[str, Any]) -> str:
    """A range or size pydantic refused a value for, said as the CLI's own errors say it."""
    if kind == "greater_than":
        return "a positive number" if ctx["gt"] == 0 else f"greater than {ctx['gt']}"
    words = {"greater_than_equal": (">=", "ge"), "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in words:
        sign, key = words[kind]
        return f"{sign} {ctx[key]:g}" if isinstance(ctx[key], float) else f"{sign} {ctx[key]}"
    if kind == "finite_number":
        return "a finite number"
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters"
    if kind == "string_too_short":
        return "a non-empty string"
    if kind == "too_long":
        return f"at most {ctx['max_length']} items"
    if kind == "too_short":
        return f"at least {ctx['min_length']} item(s)"
    return ""


# What a value of the wrong type should have been, by pydantic's error type.
_EXPECTED = {
    "string_type": "a string", "int_type": "a whole number", "float_type": "a number", "bool_type": "true or false",
    "dict_type": "a mapping", "list_type": "a list", "model_type": "a mapping", "model_attributes_type": "a mapping",
}  # fmt: skip


def _plain_text(value: Any) -> str:
    if isinstance(value, YamlTimestamp):
        return value.text
    return str(value).lower() if isinstance(value, bool) else str(value)


def _fields_at(schema: Any, path: Path) -> list[str]:
    """The keys the model at ``path`` of ``schema`` allows (walking lists, dicts and unions)."""
    candidates = [schema]
    for part in path:
        step = []
        for kind in candidates:
            if isinstance(kind, type) and hasattr(kind, "model_fields") and isinstance(part, str):
                field = kind.model_fields.get(part)
                if field is not None:
                    step.append(field.annotation)
            else:
                step.extend(_items(kind, part))
        candidates = [c for kind in step for c in _unwrap(kind)]
    names = {name for kind in candidates if hasattr(kind, "model_fields") for name in kind.model_fields}
    return sorted(names)


def _unwrap(kind: Any) -> Iterator[Any]:
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        yield from _unwrap(typing.get_args(kind)[0])
    elif origin is typing.Union or isinstance(kind, types.UnionType):
        for arm in typing.get_args(kind):
            yield from _unwrap(arm)
    else:
        yield kind


def _items(kind: Any, part: str | int) -> list[Any]:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (list, tuple) and args and isinstance(part, int):
        return [args[0]]
    if origin is dict and len(args) == 2:
        return [args[1]]
    return []
