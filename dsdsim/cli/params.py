"""Command parameters derived from typed option objects, so a group of options is listed once.

A command writes ``@takes(deployment=DeploymentArgs)`` and a parameter ``deployment: DeploymentArgs``; the
decorator puts the dataclass's fields in that parameter's place in the command's signature (``dsdsim.cli.command``
reads each as an option, with the field's ``Annotated`` declaration and default) and calls the command with the
object built from them. explain, predict, plan and the plots then share one declaration of, say, the deployment options
instead of re-listing eight parameters each.

``without(OptionClass, "hardware")`` leaves fields out (the object gets their defaults): ``plan`` takes its
hardware from its candidates.

Fields declared with a plain type (an API option object such as ``PredictOptions``) take their option from
``declarations``: a mapping of field name to the ``Annotated`` alias in ``dsdsim.cli.options``. A field with no
declaration is an error at import, so an option object cannot grow a field the CLI silently drops.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from typing import Any, Callable, Mapping, Optional

from dsdsim.records import frozen


@frozen
class Without:
    """An option class with some of its fields left off the command line."""

    cls: type
    left_out: frozenset


def without(cls: type, *names: str) -> Without:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(names) - known
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)}")
    return Without(cls, frozenset(names))


def takes(declarations: Optional[Mapping[str, Any]] = None, **groups: type | Without) -> Callable:
    """Decorator: expand each ``name=OptionClass`` parameter of the command into the class's fields."""
    declarations = dict(declarations or {})
    left_out = {g: (c.left_out if isinstance(c, Without) else frozenset()) for g, c in groups.items()}
    groups = {g: (c.cls if isinstance(c, Without) else c) for g, c in groups.items()}

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        missing = set(groups) - set(sig.parameters)
        if missing:
            raise TypeError(f"{fn.__name__} has no parameter {sorted(missing)} to take the options into")
        params: list[inspect.Parameter] = []
        owner: dict[str, str] = {}
        for p in sig.parameters.values():
            if p.name not in groups:
                params.append(p)
                continue
            for name, annotation, default in option_fields(groups[p.name], declarations, left_out[p.name]):
                if name in owner or name in sig.parameters:
                    raise TypeError(f"{fn.__name__}: option {name!r} is declared twice")
                owner[name] = p.name
                params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                                annotation=annotation))

        @functools.wraps(fn)
        def command(*args, **kwargs):
            values: dict[str, dict] = {g: {} for g in groups}
            for name in [n for n in kwargs if n in owner]:
                values[owner[name]][name] = kwargs.pop(name)
            for g, cls in groups.items():
                kwargs[g] = cls(**values[g])
            return fn(*args, **kwargs)

        command.__signature__ = sig.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params
                                   if p.annotation is not inspect.Parameter.empty}
        del command.__wrapped__       # the expanded signature is read, not the original
        return command

    return decorate


def option_fields(cls: type, declarations: Mapping[str, Any], left_out=frozenset()) -> list[tuple[str, Any, Any]]:
    """(name, Annotated declaration, default) of each init field of the dataclass ``cls`` not ``left_out``."""
    hints = None
    out = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name in left_out:
            continue
        annotation = declarations.get(f.name)
        if annotation is None:            # the class declares its own options (resolved only then)
            try:
                hints = hints if hints is not None else typing.get_type_hints(cls, include_extras=True)
            except NameError:             # an API object typed with names only a type checker imports
                hints = {}
            annotation = hints.get(f.name)
            if typing.get_origin(annotation) is not typing.Annotated:
                raise TypeError(f"{cls.__name__}.{f.name} has no command-line declaration")
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = inspect.Parameter.empty
        out.append((f.name, annotation, default))
    return out
