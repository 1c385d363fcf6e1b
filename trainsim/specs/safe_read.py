"""The one reader for every file trainsim takes: scenario, model, cluster, Hugging Face config.json, profile, plan,
measured result, baseline, suite, dataset CSV and nccl-tests output.

Every file is read the same way, so one hostile file cannot do what another is refused for:

* only a regular file is read (a FIFO or device would block or never end), at most ``max_bytes`` of it;
* UTF-8, strict (a binary file is refused, not decoded into noise);
* YAML through a ``yaml.SafeLoader`` subclass (no Python tags) that refuses a key given twice in one mapping
  (naming the key and both lines), nesting deeper than ``MAX_DEPTH`` and an alias expansion larger than
  ``MAX_EXPANDED_NODES`` nodes (a "billion laughs" document is refused while it is composed, before it is
  expanded into Python objects);
* JSON through the standard decoder with an ``object_pairs_hook`` that refuses duplicate keys (naming the key
  and its line), non-finite constants (``NaN``, ``Infinity``) and nesting deeper than ``MAX_DEPTH``;
* an integer of more than ``MAX_INT_DIGITS`` digits in YAML or JSON is refused (CPython's int() refuses a longer
  decimal with a bare ValueError; a hex or base-60 one is refused by its value);
* CSV through ``csv.DictReader`` with a duplicated column name refused, trailing rows of empty cells and a UTF-8
  byte-order mark (both as spreadsheet programs write them) dropped;
* no string of a YAML/JSON document and no CSV cell may hold a control character other than tab, newline and a
  CR LF line break (C0, DEL, C1: ``CONTROL``): YAML's ``"\\e"`` or JSON's ``"\\u001b"`` would otherwise carry a
  terminal escape sequence through a model or cluster name into the console, a report or a log; no key or value
  may be YAML's ``!!binary`` bytes, which would carry the same sequences past that check.

Every failure is a SpecError naming the field (``scenario``, ``model``, ``calibration``, ...) and the reason;
a RecursionError never escapes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent

from .errors import SpecError

MAX_INPUT_BYTES = 4 * 1024 * 1024  # a scenario, model, cluster or config.json is a few KB
# A real configuration nests a handful of levels (scenario -> training -> recompute_modules); 64 leaves room
# for generated files while keeping the recursive composers/decoders far from Python's recursion limit.
MAX_DEPTH = 64
# Nodes a YAML document may expand to once aliases are followed: 100 000 is far beyond any configuration
# (a 4 MiB file of plain scalars holds at most ~1 M short tokens, but a profile or baseline is JSON, not YAML)
# and refuses the classic billion-laughs document (9^9 ~ 3.9e8 nodes) while it is composed.
MAX_EXPANDED_NODES = 100_000
# Digits an integer may have: CPython's own limit on converting decimal text to int (sys.int_info
# .default_max_str_digits = 4300, set against the quadratic conversion time of CVE-2020-10735), here independent of
# the PYTHONINTMAXSTRDIGITS setting. Past it int() raises a bare ValueError; no setting needs more than ~20 digits.
MAX_INT_DIGITS = 4300
_INT_BOUND = 10**MAX_INT_DIGITS


# Characters no configuration text needs and a terminal acts on: C0 controls but tab and newline, DEL, C1 (U+009B
# is a one-byte CSI on some terminals), and a carriage return that does not end a Windows line break (CR LF, as
# spreadsheet programs write inside a multi-line cell) -- a lone one returns the cursor over the text before it.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
TEXT_ALLOWED = "only tab, newline and CR LF line breaks are allowed in text"
# A UTF-16 surrogate is no character: YAML's "\ud83d\ude80" and JSON's lone "\ud800" decode to one, which no
# encoder can write back (a UTF-8 report or JSON output would fail on it).
SURROGATE = re.compile(r"[\ud800-\udfff]")


class InputTooComplex(ValueError):
    """A parse refused for its structure (depth, aliases, duplicate keys, non-finite constant)."""


# --- bytes and text -----------------------------------------------------------------------------------------------

def not_a_file(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a file ("no such file", a directory, not a regular file), None if it can."""
    p = Path(path)
    if p.is_file():
        return None
    if p.is_dir():
        return f"{p} is a directory, not a file"
    return f"{p} is not a regular file" if p.exists() else f"no such file: {p}"


def read_text(path: str | os.PathLike, field: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes, else a SpecError naming ``field``."""
    p = Path(path)
    try:
        # Open without blocking (a FIFO would wait for a writer forever), then check what was opened.
        with os.fdopen(os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise SpecError(field, f"{p} is a directory, not a file")
            if not stat.S_ISREG(st.st_mode):
                raise SpecError(field, f"{p} is not a regular file")
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise SpecError(field, f"no such file: {p}") from None
    except IsADirectoryError:
        raise SpecError(field, f"{p} is a directory, not a file") from None
    except OSError as e:
        raise SpecError(field, f"cannot read {p}: {e.strerror or type(e).__name__}") from None
    if len(data) > max_bytes:
        size = max(st.st_size, len(data))
        raise SpecError(field, f"{p} is {size / 2**20:.1f} MiB; this input is limited to {max_bytes / 2**20:g} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(field, f"cannot read {p}: not UTF-8 text (byte {e.start})") from None


def refuse_control_characters(data: Any, field: str, source: str) -> None:
    """SpecError naming the first key or string of a parsed document (keys, then values, depth first) that holds
    a control character (``CONTROL``) or a surrogate (``SURROGATE``), or that is bytes (YAML's ``!!binary``: text
    no one typed, which pydantic decodes into a name -- escape sequences included); the document is at most
    MAX_DEPTH deep, so the walk is bounded. Each distinct object is scanned once: YAML aliases make one string or
    collection appear up to MAX_EXPANDED_NODES times (a 3.5 MB string behind 1000 aliases took 28 s to rescan),
    and every object of ``data`` is alive during the walk, so ``id`` names it."""
    stack: list[tuple[Any, str]] = [(data, "")]
    seen: set[int] = set()
    while stack:
        node, where = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, (bytes, bytearray)):
            raise SpecError(field, f"{source}: {where or 'the document'} is binary data (!!binary); write text or "
                                   "a number")
        if isinstance(node, str):
            m = CONTROL.search(node)
            if m:
                raise SpecError(field, f"{source}: {where or 'the document'} holds the control character "
                                       f"U+{ord(m.group(0)):04X}; {TEXT_ALLOWED}")
            m = SURROGATE.search(node)
            if m:
                raise SpecError(field, f"{source}: {where or 'the document'} holds U+{ord(m.group(0)):04X}, a lone "
                                       "UTF-16 surrogate escape, which is no character (write the character itself)")
        elif isinstance(node, dict):
            for k, v in reversed(list(node.items())):
                stack.append((v, f"{where}.{k}" if where else str(k)))
                stack.append((k, f"{where}.{k!r}" if where else f"key {k!r}"))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))


# --- YAML -----------------------------------------------------------------------------------------------------------

class StrictSafeLoader(yaml.SafeLoader):
    """SafeLoader that bounds flow and block nesting and alias expansion, and refuses duplicate keys."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass):  # the scanner's '[' / '{'
        # Refused here, in the scanner: its simple-key bookkeeping is quadratic in the flow depth, so a
        # 50 000-deep '[[[...' would take minutes before the composer ever saw a node.
        if self.flow_level >= MAX_DEPTH:
            raise yaml.YAMLError(f"nesting deeper than {MAX_DEPTH} levels at line {self.line + 1}")
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"nesting deeper than {MAX_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_yaml_keys(self, node)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        where = f" at line {node.start_mark.line + 1}"
        _refuse_long_integer(str(node.value), where, yaml.YAMLError)
        value = super().construct_yaml_int(node)
        _refuse_long_integer(str(node.value), where, yaml.YAMLError, value)
        _refuse_yaml11_number(node, value)
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        _refuse_yaml11_number(node, value)
        return value


StrictSafeLoader.add_constructor("tag:yaml.org,2002:int", StrictSafeLoader.construct_yaml_int)
StrictSafeLoader.add_constructor("tag:yaml.org,2002:float", StrictSafeLoader.construct_yaml_float)
_YAML11_OCTAL = re.compile(r"[-+]?0[0-7_]+")


def _refuse_long_integer(text: str, where: str, error: type[Exception], value: int | None = None) -> None:
    """``error`` when the integer written as ``text`` has more than MAX_INT_DIGITS digits: checked on the text
    before it is converted (int() refuses a longer decimal with a bare ValueError, and base-60 conversion is
    quadratic in the length), and on ``value`` once converted (a hex, binary or base-60 number's decimal digits)."""
    body = text.replace("_", "").lstrip("+-")
    if len(body) > MAX_INT_DIGITS:
        digits = f"{len(body)} digits" if body.isdigit() else f"more than {MAX_INT_DIGITS} digits"
    elif value is not None and abs(value) >= _INT_BOUND:
        digits = f"more than {MAX_INT_DIGITS} (decimal) digits"
    else:
        return
    raise error(f"an integer of {digits}{where}; numbers are limited to {MAX_INT_DIGITS} digits")


def _refuse_yaml11_number(node: yaml.ScalarNode, value: Any) -> None:
    """YAML 1.1 (PyYAML) reads a leading zero as octal (``tp: 010`` is 8) and colons as base 60 (``seq_len: 1:30``
    is 90): numbers no one writing a configuration means, read without a word. Refused; quoted, they are text."""
    text = str(node.value)
    if ":" in text or _YAML11_OCTAL.fullmatch(text):
        kind = "base-60 (sexagesimal)" if ":" in text else "octal"
        raise yaml.YAMLError(f"{text} at line {node.start_mark.line + 1} reads as the YAML 1.1 {kind} number "
                             f"{value}: write the decimal number (or quote it)")


def _check_expansion(root: yaml.Node) -> None:
    """Walk the composed graph as if every alias were expanded; stop once it exceeds MAX_EXPANDED_NODES
    (a recursive alias expands without end, so it is refused the same way)."""
    stack, seen = [root], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > MAX_EXPANDED_NODES:
            raise yaml.YAMLError(f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes (an alias bomb?)")
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append(k)
                stack.append(v)


def _refuse_duplicate_yaml_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue  # '<<' merges may be overridden by explicit keys; complex keys are refused by the constructor
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in first:
                raise yaml.YAMLError(f"duplicate key {key!r} at line {line} (first given at line {first[key]})")
            first[key] = line
        except TypeError:
            continue


def parse_yaml(text: str, field: str, source: str) -> Any:
    """``text`` as YAML (safe, bounded, no duplicate keys); a SpecError naming ``field`` otherwise."""
    try:
        data = yaml.load(text, Loader=StrictSafeLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" (line {mark.line + 1})" if mark else ""
        raise SpecError(field, f"{source} is not valid YAML{where}") from None
    except yaml.reader.ReaderError as e:
        code = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "\0")
        raise SpecError(field, f"{source}: character U+{code:04X} at position {e.position} is not allowed in "
                               "YAML") from None
    except yaml.YAMLError as e:
        raise SpecError(field, f"{source}: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise SpecError(field, f"{source}: nesting too deep") from None
    refuse_control_characters(data, field, source)
    return data


# --- JSON -----------------------------------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole) or a bracket


def _reject_constant(name: str):
    raise InputTooComplex(f"non-finite number {name}")


def _json_int(text: str) -> int:
    _refuse_long_integer(text, "", InputTooComplex)
    return int(text)


def _line_of_key(text: str, start: int, key: str, occurrence: int) -> int | None:
    """Line of the ``occurrence``-th (0-based) key ``key`` of the object starting at ``start``, at that object's
    own level (a small lexer: strings and nesting); only used to name a duplicate."""
    depth, i, found, n = 0, start, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            m = _JSON_STRING.match(text, i)
            if not m:
                return None
            j = m.end()
            if depth == 1 and re.match(r"\s*:", text[j:j + 64]):
                try:
                    if json.loads(m.group(0)) == key:
                        if found == occurrence:
                            return text.count("\n", 0, i) + 1
                        found += 1
                except ValueError:
                    pass
            i = j
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return None
        i += 1
    return None


def parse_json(text: str, field: str, source: str) -> Any:
    """``text`` as JSON with duplicate keys, NaN/Infinity and nesting deeper than MAX_DEPTH refused; a leading
    UTF-8 byte-order mark (Windows editors write one) is dropped, as the YAML reader drops it."""
    text = text.removeprefix("\ufeff")
    if _json_depth(text) > MAX_DEPTH:
        raise SpecError(field, f"{source}: nesting deeper than {MAX_DEPTH} levels")

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                raise InputTooComplex(k)
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs_hook, parse_constant=_reject_constant, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise SpecError(field, f"{source} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except InputTooComplex as e:
        msg = str(e)
        if msg.startswith(("non-finite", "an integer of")):
            raise SpecError(field, f"{source}: {msg}") from None
        raise SpecError(field, f"{source}: duplicate key {msg!r}{_json_duplicate_line(text, msg)}") from None
    except RecursionError:
        raise SpecError(field, f"{source}: nesting too deep") from None
    refuse_control_characters(data, field, source)
    return data


def _json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings (checked before decoding: the decoder recurses per level)."""
    depth = deepest = 0
    for m in _JSON_TOKEN.finditer(text):
        c = m.group(0)
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                break
        elif c in "]}":
            depth -= 1
    return deepest


def _json_duplicate_line(text: str, key: str) -> str:
    """' at line N' for the second occurrence of ``key`` in the first object that repeats it."""
    for m in re.finditer(r"\{", text):
        line = _line_of_key(text, m.start(), key, 1)
        if line is not None:
            return f" at line {line}"
    return ""


# --- mappings, CSV --------------------------------------------------------------------------------------------------

def parse_by_suffix(text: str, path: str | os.PathLike, field: str) -> Any:
    """JSON for ``*.json``, YAML otherwise (YAML 1.1 reads JSON too, but JSON's own errors are clearer)."""
    p = Path(path)
    return parse_json(text, field, str(p)) if p.suffix.lower() == ".json" else parse_yaml(text, field, str(p))


def read_structured(path: str | os.PathLike, field: str, max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """A YAML or JSON file (by suffix) read and parsed with every limit above."""
    return parse_by_suffix(read_text(path, field, max_bytes), path, field)


def read_csv_rows(path: str | os.PathLike, field: str, max_bytes: int = 16 * 1024 * 1024, *,
                  ragged: bool = False) -> list[dict[str, str]]:
    """Rows of a CSV file with a header; a column named twice is refused (the last would silently win), and so is a
    row of more or fewer cells than the header unless ``ragged`` (a reader that skips such rows one by one)."""
    text = read_text(path, field, max_bytes).removeprefix("\ufeff")  # Excel's "CSV UTF-8" starts with a BOM
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        dup = next((c for i, c in enumerate(header) if c in header[:i]), None)
        if dup is not None:
            raise SpecError(field, f"{path}: duplicate column {dup!r} at line 1")
        rows = list(reader)
        while rows and _blank(rows[-1]):  # a spreadsheet's trailing lines of bare commas are no rows
            rows.pop()
        for line, row in enumerate(() if ragged else rows, 2):  # an unquoted comma shifts every later column
            if None in row or None in row.values():
                n = len(header) + len(row.get(None) or ()) - sum(v is None for v in row.values())
                raise SpecError(field, f"{path}: row {line} has {n} cells, the header {len(header)} (an unquoted "
                                       "comma in a cell, such as 1,024, shifts every later column: quote it)")
        bad = next(_control_cells(header, rows), None)
        if bad is not None:
            line, column, cell = bad
            char = ord(CONTROL.search(cell).group(0))
            raise SpecError(field, f"{path}: row {line}, column {column!r} holds the control character "
                                   f"U+{char:04X}; {TEXT_ALLOWED}")
        return rows
    except csv.Error as e:
        raise SpecError(field, f"cannot read {path}: csv.Error: {e}") from None


def _blank(row: dict) -> bool:
    """Whether every cell of a CSV row is empty or whitespace (and it has no cells beyond the header's)."""
    return all(isinstance(v, str) and not v.strip() or v is None for v in row.values())


def _control_cells(header: list[str], rows: list[dict]):
    """(row, column, text) of every header name (row 1, column "header") or cell holding a control character; the
    header is row 1, the first record row 2."""
    for name in header:
        if CONTROL.search(name or ""):
            yield 1, "header", name
    for i, row in enumerate(rows, 2):
        for column, v in row.items():
            for text in (v if isinstance(v, list) else [v]):  # a row longer than the header: its extra cells
                if isinstance(text, str) and CONTROL.search(text):
                    yield i, column, text