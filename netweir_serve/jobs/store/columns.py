"""How a record's fields are written to a table's columns and read back.

Each field's column is declared once, as a Column; the statements of a
backend are derived from those declarations.
"""

import json
from dataclasses import dataclass


def _identity(value):
    return value


def dump_pairs(pairs):
    return json.dumps(pairs)


def load_pairs(text):
    return tuple(tuple(pair) for pair in json.loads(text))


def dump_list(values):
    return json.dumps(list(values))


def load_list(text):
    return tuple(json.loads(text)) if text else ()


def dump_json(value):
    return json.dumps(value) if value is not None else None


def load_json(text):
    return json.loads(text) if text else None


@dataclass(frozen=True)
class Column:
    """A column named as the record field it holds."""

    name: str
    to_db: object = _identity
    from_db: object = _identity


def select_list(columns):
    return ", ".join(c.name for c in columns)


def record_of(kind, columns, row):
    """A ``kind`` record from ``row``, read as ``columns``."""
    return kind(**{c.name: c.from_db(value) for c, value in zip(columns, row)})


def set_clauses(settable, changes, placeholder):
    """The ``column = placeholder`` clauses of an UPDATE and their values,
    for ``changes`` (field name: value) of the Columns ``settable`` (by
    name). Raises TypeError naming the fields that are not settable."""
    unknown = set(changes) - set(settable)
    if unknown:
        raise TypeError(f"not a settable field: {', '.join(sorted(unknown))}")
    return ([f"{key} = {placeholder}" for key in changes],
            [settable[key].to_db(value) for key, value in changes.items()])
