"""Facts files: typed dataclasses written to and read from JSON in the run folder."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def write_facts(obj: Any, path: Path) -> Path:
    """Write a dataclass as indented JSON; the file is the hand-over to the next step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(obj), indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path


def read_facts(cls: type[T], path: Path) -> T:
    return from_dict(cls, json.loads(path.read_text(encoding="utf-8")))


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a (nested) dataclass from ``dataclasses.asdict`` output; unknown keys are ignored."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in data:
            kwargs[field.name] = _value(hints[field.name], data[field.name])
    return cls(**kwargs)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return from_dict(hint, value)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            if option is type(None):
                continue
            if dataclasses.is_dataclass(option) and isinstance(value, dict):
                return from_dict(option, value)
        return value
    if origin in (list, tuple) and args and dataclasses.is_dataclass(args[0]):
        items = [from_dict(args[0], item) for item in value]
        return tuple(items) if origin is tuple else items
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return {k: from_dict(args[1], v) for k, v in value.items()}
    return value
