"""Reading manifest files (``shardcdc validate -f``, ``shardcdc run -f``): YAML or JSON, safely.

Whatever the file holds, the answer is its documents or one ``ManifestError`` line saying where
and what is wrong, never a traceback:

* the bytes must be UTF-8 (as ``kubectl`` wants them);
* plain YAML only: a tag such as ``!!python/object`` is refused (``yaml.SafeLoader``);
* aliases may not blow a small file up into a huge object (the "billion laughs"): a document may
  expand to at most ``MAX_NODES`` nodes, counting each use of an alias in full, and nest at most
  ``MAX_DEPTH`` deep;
* syntax errors, undefined aliases and the like name the line and column.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cdcworker.jsontypes import JsonValue
from cdcworker.textcut import quote

__all__ = ["MAX_DEPTH", "MAX_NODES", "ManifestError", "load_documents", "parse_documents"]

# A CdcConnector is a few hundred nodes; a bundle with Secrets and Namespaces a few thousand.
MAX_NODES = 100_000
MAX_DEPTH = 100


class ManifestError(ValueError):
    """A manifest that cannot be read; the message is one line naming the file and the place."""


def load_documents(path: Path | str) -> list[JsonValue]:
    """The documents of the YAML/JSON file at ``path`` (empty documents dropped)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    return parse_documents(data, str(path))


def parse_documents(data: bytes, where: str = "<manifest>") -> list[JsonValue]:
    """The documents of a YAML/JSON text given as bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                            "save the file as UTF-8") from None
    try:
        return [doc for doc in yaml.load_all(text, Loader=_BoundedLoader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        raise ManifestError(f"{where}: {_describe(exc)}") from None
    except yaml.reader.ReaderError as exc:  # a control character: not YAML text
        raise ManifestError(f"{where}: character {exc.position + 1}: unacceptable character #x{exc.character:04x} "
                            f"({exc.reason}); YAML text may not hold control characters") from None
    except (yaml.YAMLError, _TooBig) as exc:
        raise ManifestError(f"{where}: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ManifestError(f"{where}: nested too deeply to read (at most {MAX_DEPTH} levels)") from None


class _TooBig(ValueError):
    pass


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses documents whose aliases expand past ``MAX_NODES`` nodes."""

    def compose_document(self) -> JsonValue:
        node = super().compose_document()
        if node is not None:
            _check_size(node)
        return node


def _check_size(root: yaml.Node) -> None:
    """The node count of ``root`` with every alias expanded (memoised per node, so a bomb is
    measured without being built) and its depth, against the limits."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not done:
            if id(node) in on_path:
                raise _TooBig("a recursive alias (a node that contains itself) is not allowed")
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        on_path.discard(id(node))
        total = 1 + sum(sizes[id(c)][0] for c in children)
        depth = 1 + max((sizes[id(c)][1] for c in children), default=0)
        if total > MAX_NODES:
            raise _TooBig(f"the document expands to more than {MAX_NODES:,} values (aliases: *name); a manifest "
                          "is far smaller: write it out without nested aliases")
        if depth > MAX_DEPTH:
            raise _TooBig(f"nested too deeply to read (at most {MAX_DEPTH} levels)")
        sizes[id(node)] = (total, depth)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _describe(exc: yaml.MarkedYAMLError) -> str:
    """One line: ``line L, column C: <problem> (<context>)``, values cut."""
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = _cut(exc.problem or "invalid YAML")
    if isinstance(exc, yaml.constructor.ConstructorError) and "constructor for the tag" in problem:
        problem += " (only plain YAML is read: remove the tag)"
    context = f" ({_cut(exc.context)})" if exc.context else ""
    return f"{where}{problem}{context}"


def _cut(text: str) -> str:
    return text if len(text) <= 160 else quote(text, 160, render=str)
