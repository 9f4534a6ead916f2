"""Projects named with --project: a spider file, or a directory of them."""

import os
from dataclasses import dataclass

from .names import fold, name_problem


class ProjectError(ValueError):
    """A --project that cannot be served; the message is for the user."""


@dataclass(frozen=True)
class Project:
    """A served project. ``path`` is absolute: a ``.py`` file or a directory."""

    name: str
    path: str

    @property
    def key(self):
        return fold(self.name)

    @property
    def is_directory(self):
        return os.path.isdir(self.path)

    @property
    def workdir(self):
        """Where the project's jobs run, so spider files can import each other."""
        return self.path if self.is_directory else os.path.dirname(self.path)

    def spider_files(self):
        """The files to read for spiders, sorted: the file itself, or every
        ``.py`` file directly in the directory (subdirectories hold helpers)."""
        if not self.is_directory:
            return [self.path] if os.path.isfile(self.path) else []
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return sorted(
            os.path.join(self.path, n)
            for n in names
            if n.endswith(".py") and os.path.isfile(os.path.join(self.path, n))
        )


def parse_project(text):
    """A Project from ``NAME=PATH`` or a bare ``PATH``; raises ProjectError."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = None, text
    if not path:
        raise ProjectError(f"--project {text!r}: no path given")
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(full):
        raise ProjectError(f"--project {text!r}: {path} does not exist")
    if not os.path.isdir(full) and not full.endswith(".py"):
        raise ProjectError(f"--project {text!r}: {path} is neither a directory nor a .py file")
    if name is None:
        base = os.path.basename(full.rstrip(os.sep))
        name = base[:-3] if base.endswith(".py") else base
    problem = name_problem("project name", name)
    if problem:
        raise ProjectError(f"--project {text!r}: {problem}")
    return Project(name=name, path=full)


class ProjectTable:
    """The served projects, looked up by name ignoring case."""

    def __init__(self, projects=()):
        self._by_key = {}
        for project in projects:
            if project.key in self._by_key:
                raise ProjectError(
                    f"project {project.name!r} is given twice"
                    " (project names ignore case)"
                )
            self._by_key[project.key] = project

    def get(self, name):
        """The Project called ``name`` (any case), or None."""
        return self._by_key.get(fold(name)) if isinstance(name, str) else None

    def names(self):
        return sorted(p.name for p in self._by_key.values())

    def __iter__(self):
        return iter(sorted(self._by_key.values(), key=lambda p: p.key))

    def __len__(self):
        return len(self._by_key)
