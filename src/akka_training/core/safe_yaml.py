"""YAML (and JSON) documents read with limits: what a plan or a settings file may hold.

`load_document` refuses, each with a sentence that names the file and where in it:

- text that is not UTF-8, or longer than `limits.MAX_PLAN_BYTES`;
- a key written twice in one mapping (YAML would keep the last one silently);
- nesting deeper than `limits.MAX_DOCUMENT_DEPTH`, counted after aliases are expanded;
- more than `limits.MAX_DOCUMENT_NODES` values once aliases are expanded (an alias bomb, a
  few lines that expand to billions of values) and an alias that refers to itself;
- ``.nan`` and ``.inf``, and whole numbers too long for any field.

The document is composed first and measured before any Python value is made from it, so a
refused document costs no more memory than its text.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from akka_training.core.errors import InvalidRequest
from akka_training.core.limits import MAX_DOCUMENT_DEPTH, MAX_DOCUMENT_NODES, MAX_PLAN_BYTES

_FLOAT = "tag:yaml.org,2002:float"
_INT = "tag:yaml.org,2002:int"
_MERGE = "tag:yaml.org,2002:merge"
# No field holds a whole number longer than this (a BIGINT has 19 digits).
_MAX_DIGITS = 40


def load_document(
    data: bytes | str, source: str, max_bytes: int = MAX_PLAN_BYTES, syntax: str = "YAML or JSON"
) -> Any:
    """The document in `data` (YAML or JSON), or `InvalidRequest` saying what to change.
    `source` names it in messages: a path, ``-`` for standard input, or a phrase."""
    where = "standard input" if source == "-" else source
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise InvalidRequest(
            f"{where} is larger than the {max_bytes:,} bytes a document may hold; check that "
            "this is the right file."
        )
    if isinstance(data, str):
        text = data
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InvalidRequest(
                f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
                "save it as UTF-8."
            ) from None
    loader = _Loader(text, where)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        pairs = _measure(node, where)
        document = loader.construct_document(node)
        return _join_pairs(document) if pairs else document
    except yaml.YAMLError as exc:
        raise InvalidRequest(f"{where} is not valid {syntax}: {exc}") from None
    finally:
        loader.dispose()


# PyYAML ships no types (and types-PyYAML is not a dependency), so its loader is Any to mypy.
class _Loader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader with a nesting limit while composing and no duplicate keys."""

    def __init__(self, text: str, where: str) -> None:
        super().__init__(text)
        self.where = where
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DOCUMENT_DEPTH:
            mark = self.peek_event().start_mark
            raise _too_deep(self.where, mark.line + 1)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise InvalidRequest(
                    f"{self.where}: the key {key} appears twice in one mapping (lines "
                    f"{seen[key]} and {line}); keep one of them."
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def _measure(root: Node, where: str) -> bool:
    """Refuse a document too deep or too large once its aliases are expanded, or one with a
    value no plan can hold. Each node is measured once (aliases share nodes), so this is linear
    in the text; the recursion stops at the depth limit."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height), once measured
    open_nodes: set[int] = set()
    surrogates = False  # whether a text holds a pair of surrogate escapes, to be joined

    def visit(node: Node, level: int, path: str) -> tuple[int, int]:
        nonlocal surrogates
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            if level + known[1] - 1 > MAX_DOCUMENT_DEPTH:
                raise _too_deep(where, node.start_mark.line + 1)
            return known
        if key in open_nodes:
            raise InvalidRequest(
                f"{where}: the alias on line {node.start_mark.line + 1} refers to a value that "
                "holds it; a document cannot hold itself."
            )
        if level > MAX_DOCUMENT_DEPTH:
            raise _too_deep(where, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            surrogates = _check_scalar(node, where, path) or surrogates
            sizes[key] = (1, 1)
            return 1, 1
        children: list[tuple[Node, str]] = []
        if isinstance(node, SequenceNode):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            for k, v in node.value:
                name = k.value if isinstance(k, ScalarNode) else "?"
                children.extend(((k, path), (v, f"{path}.{name}" if path else str(name))))
        open_nodes.add(key)
        total, height = 1, 1
        for child, child_path in children:
            size, child_height = visit(child, level + 1, child_path)
            total += size
            height = max(height, child_height + 1)
            if total > MAX_DOCUMENT_NODES:
                raise InvalidRequest(
                    f"{where} holds more than {MAX_DOCUMENT_NODES:,} values once its aliases "
                    f"(*name) are expanded (the value on line {node.start_mark.line + 1} "
                    "alone does); write the values out, or use fewer aliases."
                )
        open_nodes.discard(key)
        sizes[key] = (total, height)
        return total, height

    visit(root, 1, "")
    return surrogates


def _check_scalar(node: ScalarNode, where: str, path: str) -> bool:
    """Refuse a value no plan can hold; True when the text holds a pair of surrogate escapes
    (to be joined into its character)."""
    line = node.start_mark.line + 1
    if not isinstance(node.value, str) or not _has_surrogates(node.value):
        _check_number(node, where, line)
        return False
    if _lone_surrogate(node.value):
        # An escape such as "\ud800" alone reads as half of a UTF-16 pair: no character, and
        # no text a request or a file can carry.
        field = f" ({path})" if path else ""
        raise InvalidRequest(
            f"{where} line {line}{field}: the text holds a lone surrogate (an escape such as "
            "\\ud800 that is half of a character); write the character itself, or both halves "
            "of its pair."
        )
    return True


def _check_number(node: ScalarNode, where: str, line: int) -> None:
    if node.tag == _FLOAT:
        value = node.value.lower().lstrip("+")
        if value in (".nan", ".inf", "-.inf"):
            raise InvalidRequest(
                f"{where} line {line}: {node.value} is not a number a plan or a setting can "
                "hold; write a finite number."
            )
        try:
            finite = math.isfinite(float(value.replace("_", "")))
        except ValueError:
            finite = True  # sexagesimal and other YAML 1.1 forms: PyYAML reads them
        if not finite:
            raise InvalidRequest(
                f"{where} line {line}: {node.value} is too large for a number; write a smaller one."
            )
    elif node.tag == _INT and len(node.value) > _MAX_DIGITS:
        raise InvalidRequest(
            f"{where} line {line}: a whole number of {len(node.value)} digits is larger than "
            "any field holds; write a smaller one."
        )


def _has_surrogates(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def _lone_surrogate(text: str) -> bool:
    try:
        _joined(text)
    except UnicodeDecodeError:
        return True
    return False


def _joined(text: str) -> str:
    """`text` with each pair of surrogate escapes (PyYAML reads ``"\ud83d\ude00"`` as two
    halves, where JSON readers join them) joined into its character."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def _join_pairs(value: Any) -> Any:
    if isinstance(value, str):
        return _joined(value) if _has_surrogates(value) else value
    if isinstance(value, list):
        return [_join_pairs(v) for v in value]
    if isinstance(value, dict):
        return {_join_pairs(k): _join_pairs(v) for k, v in value.items()}
    return value


def _too_deep(where: str, line: int) -> InvalidRequest:
    return InvalidRequest(
        f"{where} nests deeper than {MAX_DOCUMENT_DEPTH} levels (at line {line}); a plan is "
        "a few levels deep: check the indentation and brackets."
    )
