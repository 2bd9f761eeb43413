"""The one place that turns the playbook's dataclasses into JSON and back.

Facts files, plans, results and records are typed dataclasses; :func:`write_json` writes one
(atomically, see :mod:`playbook.files`), :func:`read_json` rebuilds it, nested dataclasses, lists,
optionals and enums included. Unknown keys are ignored, so a newer playbook reads older files.

Two hooks, both on the class read: ``from_text`` rebuilds a dataclass an older file kept as a plain sentence, and
``upgrade_json`` turns an older file's dict into the current shape before it is read (verify's flat result into
its mapping by unit). A mapping whose values' types come from a registry (verify's ``measurements``) is read as
plain JSON values and typed by :func:`as_type` when its reader names the type.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from playbook.files import atomic_write_text

T = TypeVar("T")

def to_json_text(obj: Any) -> str:
    data = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj
    return json.dumps(data, indent=2, sort_keys=False, default=_default) + "\n"


def write_json(obj: Any, path: Path) -> Path:
    """Write a dataclass as indented JSON; the file is the hand-over to the next step."""
    return atomic_write_text(Path(path), to_json_text(obj))


def read_json(cls: type[T], path: Path) -> T:
    return from_dict(cls, json.loads(Path(path).read_text(encoding="utf-8")))


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a (nested) dataclass from ``dataclasses.asdict`` output; unknown keys are ignored."""
    upgrade = getattr(cls, "upgrade_json", None)
    if upgrade is not None:
        data = upgrade(data)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in data:
            kwargs[field.name] = _value(hints[field.name], data[field.name])
    return cls(**kwargs)


def as_type(hint: type[T], value: Any) -> T:
    """``value`` as ``hint``: as it is when it is one already, else rebuilt from its JSON form."""
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    return typing.cast(T, _value(hint, value))


def _default(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else str(value)


def _value(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if hint is Path:
        return Path(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, str) and hasattr(hint, "from_text"):  # an older file's plain sentence
            return hint.from_text(value)
        return from_dict(hint, value)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            if option is type(None):
                continue
            if dataclasses.is_dataclass(option) and isinstance(option, type) and isinstance(value, dict):
                return from_dict(option, value)
            if isinstance(option, type) and issubclass(option, Enum):
                return option(value)
        return value
    if origin in (list, tuple) and args:
        items = [_value(args[0], item) for item in value]
        return tuple(items) if origin is tuple else items
    if origin is dict and len(args) == 2:
        return {k: _value(args[1], v) for k, v in value.items()}
    return value
