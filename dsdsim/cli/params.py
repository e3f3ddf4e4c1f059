"""Command parameters derived from typed option objects, so a group of options is listed once.

A command writes ``@takes(deployment=DeploymentArgs)`` and a parameter ``deployment: DeploymentArgs``; the
decorator puts the dataclass's fields in that parameter's place in the command's signature (typer reads each as
an option, with the field's ``Annotated`` declaration and default) and calls the command with the object built
from them. explain, predict, plan and the plots then share one declaration of, say, the deployment options
instead of re-listing eight parameters each.

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


def takes(declarations: Optional[Mapping[str, Any]] = None, **groups: type) -> Callable:
    """Decorator: expand each ``name=OptionClass`` parameter of the command into the class's fields."""
    declarations = dict(declarations or {})

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
            for name, annotation, default in option_fields(groups[p.name], declarations):
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
        del command.__wrapped__       # typer must read the expanded signature, not the original
        return command

    return decorate


def option_fields(cls: type, declarations: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, Annotated declaration, default) of each init field of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        annotation = hints[f.name]
        if typing.get_origin(annotation) is not typing.Annotated:
            if f.name not in declarations:
                raise TypeError(f"{cls.__name__}.{f.name} has no command-line declaration")
            annotation = declarations[f.name]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = inspect.Parameter.empty
        out.append((f.name, annotation, default))
    return out
