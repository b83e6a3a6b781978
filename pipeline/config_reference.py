"""The configuration reference, generated from components/settings.py: every field of every section, its
type, default and check, and the comment written beside or above it there. The docs site renders it
(docs/hooks.py), so the reference cannot drift from the code.
"""
from __future__ import annotations

import ast
import dataclasses
import io
import tokenize
import typing

from components import settings


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the comment on the field's line, or the comment lines right above it."""
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    result = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
                continue
            text = [comments[line] for line in range(statement.lineno, statement.end_lineno + 1) if line in comments]
            above, line = [], statement.lineno - 1
            while line in comments and lines[line - 1].strip().startswith("#"):
                above.insert(0, comments[line])
                line -= 1
            result[(node.name, statement.target.id)] = " ".join(above + text)
    return result


def _type_name(hint) -> str:
    if typing.get_origin(hint) is list:
        return f"list of {typing.get_args(hint)[0].__name__}"
    arguments = [argument for argument in typing.get_args(hint) if argument is not type(None)]
    if arguments and len(arguments) < len(typing.get_args(hint)):
        return f"{arguments[0].__name__} or null"
    return hint.__name__


def _default(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        value = value.replace(settings.PROJECT_ROOT + "/", "<project>/")  # the bundled schema, wherever installed
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _rows(section, prefix: str, comments: dict) -> list[str]:
    hints = typing.get_type_hints(type(section))
    rows = []
    for field in dataclasses.fields(section):
        value, hint = getattr(section, field.name), hints[field.name]
        if dataclasses.is_dataclass(hint):
            continue
        check = field.metadata.get(settings.CHECK)
        description = comments.get((type(section).__name__, field.name), "").replace("|", "\\|")
        default = "required" if field.metadata.get(settings.REQUIRED) else _default(value)
        rows.append(f"| `{prefix}{field.name}` | {_type_name(hint)} | {default} | "
                    f"{check.message if check else 'any value of its type'} | {description} |")
    return rows


def render_markdown() -> str:
    """The reference: the top-level keys, then one table per section, in the order of PipelineConfig."""
    with open(settings.__file__) as handle:
        comments = field_comments(handle.read())
    config = settings.PipelineConfig()
    header = ["| key | type | default | check | what it is |", "| --- | --- | --- | --- | --- |"]
    parts = ["## Top level", "", *header, *_rows(config, "", comments), ""]
    hints = typing.get_type_hints(settings.PipelineConfig)
    for field in dataclasses.fields(config):
        if not dataclasses.is_dataclass(hints[field.name]):
            continue
        section = getattr(config, field.name)
        doc = (type(section).__doc__ or "").strip()
        parts += [f"## `{field.name}`", ""] + ([" ".join(doc.split()), ""] if doc and not doc.startswith(
            f"{type(section).__name__}(") else [])
        parts += [*header, *_rows(section, field.name + ".", comments), ""]
        for sub in dataclasses.fields(section):
            value = getattr(section, sub.name)
            if dataclasses.is_dataclass(value):
                parts += [f"### `{field.name}.{sub.name}`", "", *header,
                          *_rows(value, f"{field.name}.{sub.name}.", comments), ""]
    return "\n".join(parts)
