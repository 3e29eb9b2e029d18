"""Reading a user's text, JSON and YAML files: one way, so every input reports alike (``file:line``, one line).

zhin.yaml, presets, case files, budget files, eval results and request-diff sides are all read here. These used to
live in ``pipeline/config.py``, which made every reader of a JSON file (the preset importer, request-diff, eval)
import the config stage, and the config stage import the preset importer back: a cycle across the layers. The
readers depend only on :mod:`zhin_cli.core.inputfiles` (the hostile-input guards) and :mod:`zhin_cli.core.errors`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from zhin_cli.core.errors import ConfigError, ZhinError
from zhin_cli.core.inputfiles import (
    DIGIT_LIMIT_MESSAGE,
    MAYBE_SURROGATE,
    first_surrogate,
    is_digit_limit,
    join_surrogate_pairs,
    lone_surrogate_in_json,
    read_regular_bytes,
    surrogate_line,
    surrogate_message,
)

if TYPE_CHECKING:  # jsontext loads orjson: only its types are needed here
    from zhin_cli.core.jsontext import JSON, JSONObject


def read_text_file(path: Path, error: type[ZhinError] = ConfigError, what: str = "config file", encoding: str = "utf-8") -> str:
    """A text input's contents; a missing file, a folder, bytes that are not UTF-8 (with their line) or an OS
    error is one ``error``. Shared by every file the toolkit reads as text so they all report alike."""
    try:
        data = read_regular_bytes(path, error, what)  # a FIFO or a device is refused before reading
    except FileNotFoundError:
        raise error(f"no such {what}: {path}") from None
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}", where=str(path)) from None
    try:
        return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")  # as read_text() does
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(f"{what} is not UTF-8 (byte {exc.start})", where=f"{path}:{line}") from None


def read_json_file(path: Path, error: type[ZhinError] = ConfigError, what: str = "JSON file",
                   encoding: str = "utf-8") -> tuple[Any, str]:
    """A JSON file's data and its text; unreadable, not JSON (with its line) or nested too deeply is one ``error``.

    The data is ``JSON`` (``_parse_json``); left unchecked by the type checker until its one caller that assumes a shape without
    narrowing it (store/sillytavern.py's group reader) does (issue 32)."""
    text = read_text_file(path, error, what, encoding)
    return _parse_json(text, path, error, what), text


class _DuplicateKey(Exception):
    """Raised by :func:`_unique_keys` inside ``json.loads``; the line is found afterwards (:func:`json_key_lines`)."""


def _unique_keys(pairs: list[tuple[str, JSON]]) -> JSONObject:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise _DuplicateKey
    return mapping


def read_json_keyed(path: Path, error: type[ZhinError] = ConfigError,
                    what: str = "JSON file") -> tuple[JSON, Callable[[], dict[str, int]]]:
    """A JSON file read as :func:`read_yaml_file` reads YAML: its data (a duplicate key refused at its line) and
    the line of every key — here a function, called only when an error needs a line: the data is read by
    ``json`` in C, the lines by a scan in Python that a valid file never pays for."""
    text = read_text_file(path, error, what)
    try:
        data = _parse_json(text, path, error, what, _unique_keys)
    except _DuplicateKey:
        json_key_lines(text, path, error)  # raises at the duplicate's line
        raise error(f"{what}: a duplicate key", where=str(path)) from None  # not reached: the scan finds it
    return data, functools.cache(lambda: json_key_lines(text, path, error))


def _parse_json(text: str, path: Path, error: type[ZhinError], what: str,
                hook: Callable[[list[tuple[str, JSON]]], JSONObject] | None = None) -> JSON:
    try:
        data: JSON = json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON: {exc.msg} (column {exc.colno})", where=f"{path}:{exc.lineno}") from None
    except RecursionError:
        raise error(f"{what} is not valid JSON: nested too deeply", where=str(path)) from None
    except ValueError as exc:
        if not is_digit_limit(exc):
            raise
        match = re.search(r"\d{4301}", text)
        line = text.count("\n", 0, match.start()) + 1 if match else 1
        raise error(f"{what} is not valid JSON: {DIGIT_LIMIT_MESSAGE}", where=f"{path}:{line}") from None
    offset = lone_surrogate_in_json(text)
    if offset is not None:
        raise error(surrogate_message(text[offset : offset + 6]), where=f"{path}:{text.count(chr(10), 0, offset) + 1}")
    return data


# A token of a JSON text already parsed by ``json``: a string, a punctuation mark, or a bare literal (number,
# true, false, null). Raw newlines cannot occur inside a JSON string, so counting them between tokens is exact.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


@dataclass
class _Container:
    name: str  # its key path, as read_yaml_file names it
    is_object: bool
    index: int = 0  # an array's next item
    key_next: bool = True  # an object's next string is a key
    member: str = ""  # an object's current member: the name of the value that follows
    keys: set[str] = dataclasses.field(default_factory=set)


def json_key_lines(text: str, path: Path, error: type[ZhinError] = ConfigError) -> dict[str, int]:
    """The line of every key and array item of a valid JSON ``text``, named as :func:`read_yaml_file` names them
    (``a.b[2].c``; ``""``: the document); a key given twice in one object is ``error`` at its line. One pass."""
    lines: dict[str, int] = {}
    stack: list[_Container] = []
    line, position = 1, 0
    for match in _JSON_TOKEN.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        token = match.group()
        top = stack[-1] if stack else None
        if top is not None and top.is_object and top.key_next and token.startswith('"'):
            key = json.loads(token)
            if key in top.keys:
                raise error(f"duplicate key {key!r}", where=f"{path}:{line}")
            top.keys.add(key)
            top.member, top.key_next = (f"{top.name}.{key}" if top.name else key), False
            lines.setdefault(top.member, line)
        elif token in ("}", "]"):
            stack.pop()
        elif token == ",":
            if top is not None and top.is_object:
                top.key_next = True
            elif top is not None:
                top.index += 1
        elif token != ":":  # a value starts: name it
            if top is None:
                name = ""
                lines.setdefault(name, line)
            elif top.is_object:
                name = top.member
            else:
                name = f"{top.name}[{top.index}]"
                lines.setdefault(name, line)
            if token in ("{", "["):
                stack.append(_Container(name, token == "{"))
    return lines


def read_yaml_file(path: Path, error: type[ZhinError] = ConfigError, what: str = "config file") -> tuple[Any, dict[str, int]]:
    """A YAML file's data and the line of every key; every problem is one ``error`` naming ``file:line``.

    Shared by every YAML input (zhin.yaml, eval cases, prompt-budget.yaml) so they all report alike. The data is
    an ``object`` (YAML has dates and non-text keys, so not ``JSON``); left unchecked until pipeline/prices.py,
    which holds it and read_json_keyed's ``JSON`` in one variable, narrows it (issue 32)."""
    text = read_text_file(path, error, what)
    try:
        return _load_yaml(text, path)
    except ConfigError as exc:  # a duplicate key, reported as the caller's kind of error
        raise error(exc.message, where=exc.where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"invalid YAML: {problem}", where=where) from None
    except RecursionError:
        raise error("invalid YAML: nested too deeply", where=str(path)) from None


# What YAML aliases (``&a`` … ``*a``) may expand a document to, in nodes plus scalar characters: an alias bomb
# ("billion laughs") is a few hundred bytes that expand to gigabytes when formatted, validated or serialised.
# Real configs and case files that reuse an anchor stay far below (a 50 KB timeline reused 40 times is 2 M).
MAX_YAML_EXPANSION = 4_000_000
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_LEADING_ZERO = re.compile(r"0[0-9]")  # 010: octal in YAML 1.1, decimal in 1.2
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _Yaml12Numbers(yaml.resolver.Resolver):
    """YAML 1.2's numbers (its core schema) in place of 1.1's: ``2:30`` is text, not 150 (base 60); ``1_000`` and
    ``0b11`` are text; ``1e5`` and ``1.0e5`` are floats (1.1 wants a dot and a signed exponent); ``0o17`` is 15.
    ``010`` — 8 in 1.1, 10 in 1.2 — is an int the constructor refuses: no zhin field wants an
    octal or a base-60 number, and reading either silently as the other is the worst outcome. Booleans, nulls
    and dates stay as PyYAML reads them (``yes``/``no`` included): configs use them."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


_Yaml12Numbers.add_implicit_resolver(_INT_TAG, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                                     list("-+0123456789"))
_Yaml12Numbers.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                           r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+.0123456789"))


class _Yaml12Constructor(yaml.constructor.SafeConstructor):
    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """YAML 1.2's integers; ``010`` refused (see :class:`_Yaml12Numbers`), as is an ``!!int`` that is none."""
        value = str(self.construct_scalar(node))
        sign, digits = (-1, value[1:]) if value.startswith("-") else (1, value.removeprefix("+"))
        if _LEADING_ZERO.match(digits):
            raise yaml.constructor.ConstructorError(
                None, None, f"{value[:40]} has a leading zero (octal in YAML 1.1, decimal in 1.2): write it without "
                "the zero, as 0o… for octal, or quote it as text", node.start_mark)
        try:
            if digits[:2] in ("0o", "0x"):
                return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
            return sign * int(digits, 10)
        except ValueError:
            raise yaml.constructor.ConstructorError(None, None, f"not an integer: {value[:40]!r}",
                                                    node.start_mark) from None


# the stubs bound a constructor's loader to PyYAML's own loader classes; ours composes them
_Yaml12Constructor.add_constructor(_INT_TAG, _Yaml12Constructor.construct_yaml_int)  # type: ignore[type-var]


class _PyLoader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
                _Yaml12Constructor, _Yaml12Numbers):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Yaml12Constructor.__init__(self)
        _Yaml12Numbers.__init__(self)


class _Loader(Protocol):
    """What reading one document needs of a loader: PyYAML's (:class:`_PyLoader`) or libyaml's."""

    def get_single_node(self) -> yaml.Node | None: ...

    def construct_document(self, node: yaml.Node) -> object: ...

    def dispose(self) -> None: ...


_CLoader: Callable[[str], _Loader] | None = None
if yaml.__with_libyaml__:  # libyaml composes a document several times faster (a 100,000-row prices file: 7×)
    from yaml._yaml import CParser

    class _LibyamlLoader(CParser, _Yaml12Constructor, _Yaml12Numbers):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Yaml12Constructor.__init__(self)
            _Yaml12Numbers.__init__(self)

    _CLoader = _LibyamlLoader


def _compose(text: str) -> tuple[_Loader, yaml.Node | None]:
    """A loader and the document's node graph: libyaml's where it is built in, else PyYAML's. PyYAML's too when
    libyaml refuses the text (so every error reads as it always did: PyYAML's message and line; libyaml also stops
    at 1,000 levels of nesting, where PyYAML goes on) or the text may hold a ``\\ud83d`` escape, which libyaml
    refuses and PyYAML reads (the pair is joined afterwards). Both resolve and construct with the classes above."""
    if _CLoader is not None and not MAYBE_SURROGATE.search(text):
        fast = _CLoader(text)
        try:
            return fast, fast.get_single_node()
        except yaml.YAMLError:
            fast.dispose()
    loader: _Loader = _PyLoader(text)
    try:
        return loader, loader.get_single_node()
    except BaseException:
        loader.dispose()
        raise


def _load_yaml(text: str, path: Path) -> tuple[Any, dict[str, int]]:
    """``yaml.safe_load`` with YAML 1.2's numbers (:class:`_Yaml12Numbers`), plus the line of every key
    (``a.b[2].c`` → line), duplicate keys rejected, aliases bounded (``MAX_YAML_EXPANSION``, no recursive alias),
    integers past Python's digit limit or with a leading zero and lone surrogates refused."""
    loader, node = _compose(text)
    try:
        lines: dict[str, int] = {}
        if node is not None:
            lines[""] = node.start_mark.line + 1
            _key_lines(node, "", lines, set(), path)
            _check_expansion(node, path)
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    if data and MAYBE_SURROGATE.search(text):
        data = join_surrogate_pairs(data)  # YAML's \u escapes are code points: "\ud83d\ude00" is one character
        escape = first_surrogate(data)
        if escape is not None:
            raise ConfigError(surrogate_message(escape), where=f"{path}:{surrogate_line(text, escape)}")
    return data or {}, lines


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases expand it past ``MAX_YAML_EXPANSION`` (naming the top-level key that does),
    or that uses an anchor inside itself; and an integer too long for Python to read. Nothing is expanded here:
    sizes are summed over the composed graph, each shared node once."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError("a YAML anchor is used inside itself (a recursive alias)", where=f"{path}:{node.start_mark.line + 1}")
        active.add(key)
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _INT_TAG and len(node.value) > 4300:
                raise ConfigError(f"invalid YAML: {DIGIT_LIMIT_MESSAGE}", where=f"{path}:{node.start_mark.line + 1}")
            if node.tag == _TIMESTAMP_TAG:  # 2026-13-01 looks like a date to YAML, then fails to become one
                try:
                    yaml.SafeLoader.construct_yaml_timestamp(yaml.SafeLoader(""), node)
                except (ValueError, OverflowError):
                    raise ConfigError(f"invalid YAML: not a date: {node.value[:40]!r} (quote it to keep it as text)",
                                      where=f"{path}:{node.start_mark.line + 1}") from None
            total = 1 + len(node.value)
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
            total = 1
            for child in children:
                total += size(child)
                if total > MAX_YAML_EXPANSION:
                    break
        active.discard(key)
        sizes[key] = total
        return total

    if size(root) <= MAX_YAML_EXPANSION or sum(1 + len(str(n.value)) if isinstance(n, yaml.ScalarNode) else 1
                                               for n in _distinct_nodes(root)) > MAX_YAML_EXPANSION:
        return  # within the bound, or big without help from aliases (the file itself is that big)
    # Name the innermost value that alone expands past the bound (``model[7]``), at its line.
    node, name, line = root, "", root.start_mark.line + 1
    while True:
        if isinstance(node, yaml.MappingNode):
            steps = [(f"{name}.{k.value}" if name else str(k.value), v, k.start_mark.line + 1) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            steps = [(f"{name}[{i}]", v, v.start_mark.line + 1) for i, v in enumerate(node.value)]
        else:
            break
        step = next((s for s in steps if sizes.get(id(s[1]), 0) > MAX_YAML_EXPANSION), None)
        if step is None:
            break
        name, node, line = step
    raise ConfigError(f"YAML aliases expand {name[:80] or 'the document'} to more than {MAX_YAML_EXPANSION:,} nodes "
                      "and characters (an alias bomb?): refused", where=f"{path}:{line}")


def _distinct_nodes(root: yaml.Node) -> Iterator[yaml.Node]:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)


def _key_lines(node: yaml.Node, prefix: str, lines: dict[str, int], seen: set[int], path: Path) -> None:
    if id(node) in seen:  # an alias: its keys were recorded where the anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if key in keys and key != "<<":
                raise ConfigError(f"duplicate key {key!r}", where=f"{path}:{line}")
            keys.add(key)
            name = f"{prefix}.{key}" if prefix else key
            lines.setdefault(name, line)
            _key_lines(value_node, name, lines, seen, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            name = f"{prefix}[{index}]"
            lines.setdefault(name, item.start_mark.line + 1)
            _key_lines(item, name, lines, seen, path)


def key_path(parts: Iterable[object]) -> str:
    """``["segments", "add", 0, "kind"]`` → ``segments.add[0].kind``: the key form of the line maps
    ``read_yaml_file`` returns."""
    key = ""
    for part in parts:
        key = f"{key}[{part}]" if isinstance(part, int) else (f"{key}.{part}" if key else str(part))
    return key


def enclosing_key(lines: dict[str, int], key: str) -> str | None:
    """``key``, or the nearest key enclosing it that ``lines`` has (``a.b[2].c`` → ``a.b[2]`` → ``a.b`` → ``a``);
    None if none: where an error about ``key`` is reported."""
    while key and key not in lines:
        key = key[: key.rindex("[")] if key.endswith("]") else key.rpartition(".")[0]
    return key if key in lines else None
