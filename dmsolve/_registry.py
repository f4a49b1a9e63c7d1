"""Objects by name: one :class:`Registry` class for every kind of choice
(Krylov methods, preconditioners, smoothers, partitioners, problems, ...).

The lower layer owns each registry and the packages above fill it, as PETSc's
``PCRegister``/``KSPRegister`` do: :data:`PRECONDITIONERS` lives here, and
the ``preconditioners`` package registers its factories into it when it is
imported (found through the ``dmsolve.preconditioners`` entry point group).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Iterator

__all__ = ["Registry", "split_descriptor", "PRECONDITIONERS"]


def split_descriptor(desc, kind: str = "preconditioner") -> tuple[str, dict]:
    """``"name"`` or ``("name", {options})`` -> ``(name, options)``.

    The one parser of PyAMG-style descriptors, e.g.
    ``("jacobi", {"omega": 0.8})``. ``("name", None)`` means no options.
    The name is returned as given (see :meth:`Registry.canonical`); the
    options are a fresh dict. Not collective.

    Raises
    ------
    TypeError
        If ``desc`` is neither a name nor a ``(name, dict)`` pair.
    """
    if isinstance(desc, str):
        return desc, {}
    if isinstance(desc, (tuple, list)) and len(desc) == 2 and isinstance(desc[0], str):
        opts = desc[1]
        if opts is None:
            return desc[0], {}
        if not isinstance(opts, dict):
            raise TypeError("%s options must be a dict, as in ('jacobi', {'omega': 0.8}); "
                            "got %s" % (kind, type(opts).__name__))
        return desc[0], dict(opts)
    raise TypeError("%s must be a name or a (name, options) pair, got %r" % (kind, desc))


# register()'s default for "no object given: return a decorator" (None is a valid object)
_DECORATE = object()


class Registry:
    """A table of objects (classes, factories, functions) by name.

    One rule for names: case and ``_``/``-`` do not matter (``"Gauss_Seidel"``
    finds ``"gauss-seidel"``). One error wording: an unknown name raises
    ``ValueError("unknown <kind> 'x'; available: a, b, c")`` and a name that
    is not a string raises ``TypeError``, the same on every rank because
    every rank registers the same names (module import does that).

    Parameters
    ----------
    kind : str
        What the registry holds, as it reads in messages (``"smoother"``).
    entry_points : str, optional
        An entry point group whose modules are imported the first time a name
        is missing, so that packages above this one can fill the registry
        without this one importing them.

    Notes
    -----
    Not collective: every method is local.

    Examples
    --------
    >>> SHAPES = Registry("shape")
    >>> @SHAPES.register("unit-square")
    ... def square(n):
    ...     return n * n
    >>> SHAPES["Unit_Square"](3)
    9
    """

    def __init__(self, kind: str, *, entry_points: str | None = None):
        self.kind = kind
        self._group = entry_points
        self._loaded = entry_points is None
        self._items: dict[str, Any] = {}
        self._aliases: dict[str, str] = {}

    @staticmethod
    def normalize(name: str) -> str:
        """The canonical spelling of a name: lower case, ``-`` for ``_``. Not collective."""
        return name.strip().lower().replace("_", "-")

    def register(self, name: str, obj: Any = _DECORATE, *, aliases: tuple[str, ...] = (),
                 replace: bool = False):
        """Register ``obj`` under ``name`` (and ``aliases``).

        Usable as a decorator (``@REG.register("jacobi")``). Registering a
        name twice is an error unless ``replace=True``. Not collective; every
        rank must register the same names.

        Raises
        ------
        TypeError
            If ``name`` is not a non-empty string.
        ValueError
            If the name or an alias is already registered and not ``replace``.
        """
        if not isinstance(name, str) or not name.strip():
            raise TypeError("%s name must be a non-empty string, got %r" % (self.kind, name))
        key = self.normalize(name)
        keys = [key] + [self.normalize(a) for a in aliases]

        def add(o):
            if not replace:
                for k in keys:
                    if k in self._items or k in self._aliases:
                        raise ValueError("%s %r is already registered" % (self.kind, k))
            for k in keys:
                self._aliases.pop(k, None)
                self._items.pop(k, None)
            for a in [a for a, k in self._aliases.items() if k == key]:
                del self._aliases[a]       # a replaced name keeps only its new aliases
            self._items[key] = o
            for k in keys[1:]:
                self._aliases[k] = key
            return o

        return add if obj is _DECORATE else add(obj)

    def unregister(self, name: str) -> None:
        """Remove ``name`` and its aliases. Not collective."""
        key = self.canonical(name)
        del self._items[key]
        for a in [a for a, k in self._aliases.items() if k == key]:
            del self._aliases[a]

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(group=self._group):
            ep.load()           # importing the module registers its names

    def _find(self, name: str) -> str | None:
        key = self.normalize(name)
        key = self._aliases.get(key, key)
        return key if key in self._items else None

    def canonical(self, name) -> str:
        """The registered name that ``name`` refers to (aliases resolved).

        Not collective.

        Raises
        ------
        TypeError
            If ``name`` is not a string.
        ValueError
            If no such name is registered; the message lists the names.
        """
        if not isinstance(name, str):
            raise TypeError("%s name must be a string, got %s"
                            % (self.kind, type(name).__name__))
        key = self._find(name)
        if key is None:
            self._load()
            key = self._find(name)
        if key is None:
            raise ValueError("unknown %s %r; available: %s"
                             % (self.kind, name, ", ".join(self.names())))
        return key

    def __getitem__(self, name: str) -> Any:
        """The object registered as ``name``; see :meth:`canonical` for errors."""
        return self._items[self.canonical(name)]

    def __contains__(self, name) -> bool:
        if not isinstance(name, str):
            return False
        if self._find(name) is None:
            self._load()
        return self._find(name) is not None

    def names(self) -> list[str]:
        """The registered names, sorted (aliases not included). Not collective."""
        self._load()
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def items(self) -> list[tuple[str, Any]]:
        """``(name, object)`` pairs, sorted by name. Not collective."""
        return [(k, self._items[k]) for k in self.names()]

    def resolve(self, desc) -> tuple[str, Any, dict]:
        """``name`` or ``(name, options)`` -> ``(canonical name, object, options)``.

        Not collective. Raises as :func:`split_descriptor` and :meth:`canonical`.
        """
        name, opts = split_descriptor(desc, self.kind)
        key = self.canonical(name)
        return key, self._items[key], opts

    def __repr__(self) -> str:
        return "Registry(%r, names=%s)" % (self.kind, sorted(self._items))


#: Preconditioner factories ``factory(A, **options)`` by name. Filled by the
#: ``preconditioners`` package (and by anyone else through ``register``).
PRECONDITIONERS = Registry("preconditioner", entry_points="dmsolve.preconditioners")

