"""``@frozen``: dsdsim's frozen dataclass, its methods compiled only when first called.

The standard decorator writes each method it generates as source and compiles it as the class is built:
``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__``. On Python 3.11 that is
about 5 M instructions a class, and the 58 frozen results, operators and options that ``dsdsim predict`` imports
made it some 280 M of the command's 1,630 M (``benchmarks/bench_records.py`` times one class). ``frozen`` lets
``dataclasses`` read the fields (it generates no method) and gives the class:

- ``__init__``, ``__eq__`` and ``__hash__`` compiled from the source dataclasses writes, at their first call (24 of
  those 58 classes have no instance in a predict run), each then put on the class in place of the one that compiled
  it; until then ``__init__`` has the real one's signature and annotations (``inspect.signature``, ``help``), and a
  misordered default fails at the class statement. ``__init__``: the same parameters, defaults, default factories,
  ``init=False`` fields and ``__post_init__`` call, fields set with ``object.__setattr__``. ``__eq__``: the tuples
  of ``compare=True`` fields, for an object of exactly the same class (else NotImplemented). ``__hash__``: the hash
  of the tuple of fields that hash (``hash=None`` follows ``compare``).
- ``__repr__``: ``Name(a=1, b=2)`` over the ``repr=True`` fields, ``...`` for a repr that reaches itself again.
- ``__setattr__``/``__delattr__``: ``FrozenInstanceError`` with the standard words, for a field or on the class
  itself; a plain subclass may set attributes that are not fields.

The last three are closures over the field names (no compile): a repr and a refused assignment are not hot paths.

Methods written in the class body are kept, as the standard decorator keeps them (a class ``__eq__`` without a
``__hash__`` still gets the fields' hash). ``dataclasses.fields``, ``replace``, ``asdict``, ``is_dataclass``,
``__match_args__``, pickling and copying work as before; ``__dataclass_params__`` records what the dataclasses
machinery itself generated (``frozen=False``: the freezing is this module's). A class with a base that the standard
decorator froze is handed to it whole, since it refuses to mix. ``tests/test_records.py`` holds each behaviour
against ``@dataclass(frozen=True)``'s.
"""
from __future__ import annotations

import dataclasses
import sys
from _thread import get_ident
from dataclasses import MISSING, FrozenInstanceError
from inspect import Parameter, Signature, signature

__all__ = ["frozen"]

_OWN = "__dsdsim_frozen__"        # set on classes this decorator built: their bases count as frozen
_TAKES = frozenset(("init", "repr", "eq"))


def frozen(cls=None, /, **options):
    """A frozen dataclass: ``@frozen`` or ``@frozen(init=False)`` (also ``repr=`` and ``eq=``, as for dataclass)."""
    unknown = set(options) - _TAKES
    if unknown:
        raise TypeError(f"frozen() takes init, repr and eq; for {', '.join(sorted(unknown))} use "
                        f"@dataclasses.dataclass(frozen=True, ...)")

    def wrap(cls):
        return _frozen_class(cls, **options)

    return wrap if cls is None else wrap(cls)


def _frozen_class(cls, init: bool = True, repr: bool = True, eq: bool = True):
    if any(_frozen_by_dataclass(b) for b in cls.__mro__[1:]):
        return dataclasses.dataclass(cls, init=init, repr=repr, eq=eq, frozen=True)
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    if any(hasattr(b, "__dataclass_fields__") and not getattr(b, _OWN, False) for b in cls.__mro__[1:]):
        raise TypeError("cannot inherit frozen dataclass from a non-frozen one")
    own = dict(cls.__dict__)
    documented = bool(cls.__doc__)
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)
    if any(f.kw_only is True for f in fields) or _has_init_vars(cls):
        raise TypeError(f"{cls.__name__}: frozen() takes no kw_only fields or InitVars; use "
                        f"@dataclasses.dataclass(frozen=True)")
    setattr(cls, _OWN, True)
    if init and "__init__" not in own:
        _set(cls, "__init__", _lazy_init(cls, fields))
    if repr and "__repr__" not in own:
        _set(cls, "__repr__", _repr(tuple(f.name for f in fields if f.repr)))
    if eq:
        if "__eq__" not in own:
            _set(cls, "__eq__", _lazy_eq(cls, tuple(f.name for f in fields if f.compare)))
        class_hash = own.get("__hash__", MISSING)
        if class_hash is MISSING or (class_hash is None and "__eq__" in own):   # no hash of the class's own
            hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            _set(cls, "__hash__", _lazy_hash(cls, hashed))
    names = frozenset(f.name for f in fields)
    _set(cls, "__setattr__", _setattr(cls, names))
    _set(cls, "__delattr__", _delattr(cls, names))
    if not documented:          # as dataclass words a class without a docstring: its name and signature
        try:
            cls.__doc__ = cls.__name__ + str(signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            cls.__doc__ = cls.__name__
    return cls


def _frozen_by_dataclass(base) -> bool:
    params = getattr(base, "__dataclass_params__", None)
    return params is not None and params.frozen


def _has_init_vars(cls) -> bool:
    return any(getattr(f, "_field_type", None) is getattr(dataclasses, "_FIELD_INITVAR", object())
               for f in cls.__dataclass_fields__.values())


def _set(cls, name: str, fn) -> None:
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)


# --- the methods ---------------------------------------------------------------------------------------


class _Factory:
    """The default of a parameter whose field has a default factory (dataclasses' _HAS_DEFAULT_FACTORY)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _lazy_init(cls, fields):
    """An ``__init__`` that compiles the real one (``_init``) at its first call and puts it on the class in its
    place: a class that a run never instantiates costs no compile (24 of the 58 that predict imports). It has the
    real one's signature and annotations from the start, and a misordered default fails at the class statement."""
    me = _self_name(fields)
    parameters = [Parameter(me, Parameter.POSITIONAL_OR_KEYWORD)]
    for f in fields:
        if f.init:
            default = f.default if f.default is not MISSING else (
                _FACTORY if f.default_factory is not MISSING else Parameter.empty)
            if default is Parameter.empty and parameters[-1].default is not Parameter.empty:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            parameters.append(Parameter(f.name, Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=f.type))

    stub = _on_first_call(cls, "__init__", lambda: _init(cls, fields))
    stub.__signature__ = Signature(parameters, return_annotation=None)
    stub.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    return stub


def _on_first_call(cls, name: str, build):
    """A stand-in for method ``name`` that builds the real one (``build()``, a compile) at its first call, puts it on
    the class in its own place, and returns what the real one returns."""
    def first_call(*args, **kwargs):
        real = build()
        _set(cls, name, real)
        return real(*args, **kwargs)

    return first_call


def _self_name(fields) -> str:
    return "__dataclass_self__" if any(f.name == "self" for f in fields) else "self"


def _init(cls, fields):
    """``__init__`` compiled from source as dataclasses writes it for a frozen class."""
    me = _self_name(fields)
    params, lines, values = [me], [], {"__object_setattr": object.__setattr__, "__factory": _FACTORY}
    for f in fields:
        default = f"__default_{f.name}"
        if f.init:
            if f.default is not MISSING:
                values[default] = f.default
                params.append(f"{f.name}={default}")
                value = f.name
            elif f.default_factory is not MISSING:
                values[default] = f.default_factory
                params.append(f"{f.name}=__factory")
                value = f"{default}() if {f.name} is __factory else {f.name}"
            else:
                params.append(f.name)
                value = f.name
        elif f.default_factory is not MISSING:
            values[default] = f.default_factory
            value = f"{default}()"
        else:
            continue            # read from the class attribute that holds the default
        lines.append(f"__object_setattr({me}, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        lines.append(f"{me}.__post_init__()")
    fn = _compiled(cls, "__init__", params, lines, values)
    fn.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    return fn


def _compiled(cls, name: str, params: list, lines: list, values: dict):
    """The function ``name(params)`` with body ``lines``, compiled in the class's module (as dataclasses does:
    its globals are the module's) with ``values`` bound as closure variables; ``_set`` names it."""
    source = (f"def __make__({', '.join(values)}):\n def {name}({', '.join(params)}):\n"
              + "\n".join(f"  {line}" for line in lines or ["pass"]) + f"\n return {name}")
    module = sys.modules.get(cls.__module__)
    namespace: dict = {}
    exec(source, module.__dict__ if module is not None else {}, namespace)
    return namespace["__make__"](**values)


def _fields_tuple(obj: str, names: tuple) -> str:
    """``(obj.a,obj.b,)``, as dataclasses writes the tuples it compares and hashes."""
    return f"({','.join(f'{obj}.{n}' for n in names)},)" if names else "()"


def _lazy_eq(cls, names: tuple):
    """``__eq__`` as dataclasses writes it (the tuples of compared fields of two objects of exactly the same class),
    compiled at its first call."""
    return _on_first_call(cls, "__eq__", lambda: _compiled(cls, "__eq__", ["self", "other"], [
        "if other.__class__ is self.__class__:",
        f" return {_fields_tuple('self', names)}=={_fields_tuple('other', names)}",
        "return NotImplemented"], {}))


def _lazy_hash(cls, names: tuple):
    """``__hash__`` as dataclasses writes it (the hash of the tuple of hashed fields), compiled at its first call."""
    return _on_first_call(cls, "__hash__", lambda: _compiled(
        cls, "__hash__", ["self"], [f"return hash({_fields_tuple('self', names)})"], {}))


def _repr(names: tuple):
    running = set()

    def __repr__(self):
        key = (id(self), get_ident())
        if key in running:
            return "..."
        running.add(key)
        try:
            return (f"{self.__class__.__qualname__}("
                    + ", ".join(f"{name}={getattr(self, name)!r}" for name in names) + ")")
        finally:
            running.discard(key)

    return __repr__


def _setattr(cls, names: frozenset):
    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _delattr(cls, names: frozenset):
    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__
