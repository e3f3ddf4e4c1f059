"""The command line's small framework: commands are typed functions whose options are ``Annotated`` declarations.

A command is a function registered on an ``App`` (``@app.command()``); each parameter is an option (``Option``) or
an argument (``Argument``), declared in its default or in ``Annotated[type, Option(...)]``, and a parameter typed
``Invocation`` receives which options the user typed. The types are those the commands use: ``str``, ``int``,
``float``, ``bool`` (a flag, or ``--x/--no-x``), ``Path``, an ``Enum`` (its values are the choices),
``Optional[...]`` and ``List[...]`` (a repeatable option; a command's takes every word up to the next option,
so a shell glob gives it its files). The command line is split by a stdlib ``argparse``
parser built from the declarations (``_parser``); the values are converted here, in the order typed. Help is laid
out as click lays it out, and usage errors use click's words ("No such option: --speed", "Invalid value for '--tp':
..."), raised as ``UsageError`` for ``dsdsim.cli.app`` to print in one line.

Why not typer: importing typer (and the click it bundles, and pydantic's adapters it parses options with) and
building its click command cost some 120 M instructions, about a tenth of `dsdsim predict` on defaults. Here a
registration only stores the function; the one command a run names is read (``inspect.signature``) and parsed.
"""
from __future__ import annotations

import argparse
import enum
import inspect
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Optional

REQUIRED = ...                  # an option or argument without a default (typer's spelling: ``Option(...)``)
_UNSET = object()               # no default declared in the Option itself: the parameter's default applies
_HELP_NAMES = ("-h", "--help")
_MAX_WIDTH = 80                 # help is wrapped to the terminal, at most this wide (click's default)
_OPTION_COLUMN = 30             # widest first column of an option row before its help moves to the next line


# --- declarations -------------------------------------------------------------------------------------------


class Option:
    """An option's declaration: ``Option(default, "--long", "-s", help=...)`` as a parameter's default, or
    ``Option("--long", "-s", help=...)`` inside ``Annotated`` (the parameter's own default applies; a first
    string that starts with "-" is therefore a flag, never a default). A bool
    declared ``"--x/--no-x"`` has an off switch; ``min`` bounds a number; ``callback(value)`` runs as soon as the
    option is parsed when ``is_eager`` (``--version``)."""

    def __init__(self, default: Any = _UNSET, *decls: str, help: Optional[str] = None,
                 metavar: Optional[str] = None, min: Optional[float] = None,
                 callback: Optional[Callable[[Any], None]] = None, is_eager: bool = False) -> None:
        if isinstance(default, str) and default.startswith("-"):
            decls, default = (default, *decls), _UNSET
        self.default, self.decls, self.help, self.metavar = default, decls, help, metavar
        self.min, self.callback, self.is_eager = min, callback, is_eager


class Argument:
    """A positional argument's declaration: ``Argument(..., help=...)`` (``...``: required)."""

    def __init__(self, default: Any = _UNSET, *, help: Optional[str] = None, metavar: Optional[str] = None) -> None:
        self.default, self.help, self.metavar = default, help, metavar


class UsageError(Exception):
    """The command line itself is wrong (an unknown option, a value of the wrong type): one line, exit code 2."""

    def __init__(self, message: str, invocation: Optional["Invocation"] = None) -> None:
        super().__init__(message)
        self.message, self.invocation = message, invocation


class Exit(Exception):
    """Stop the command here with ``code`` (0: success, nothing more printed)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


def echo(message: object = "", err: bool = False) -> None:
    """One line on stdout (or stderr with ``err``)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{message}\n")
    stream.flush()


# --- parameters read from a command's signature -------------------------------------------------------------


class Param:
    """One option or argument of a command, as read from its signature."""

    def __init__(self, name: str, kind: str, value_type: type, decl, default: Any, multiple: bool) -> None:
        self.name, self.kind, self.type, self.multiple = name, kind, value_type, multiple
        self.help = decl.help
        self.metavar = decl.metavar
        self.min = getattr(decl, "min", None)
        self.callback = getattr(decl, "callback", None)
        self.is_eager = getattr(decl, "is_eager", False)
        self.default = default
        self.required = default is REQUIRED
        self.flag = kind == "option" and value_type is bool
        self.opts: list[str] = []          # the flags that set it (True, for a bool)
        self.off: list[str] = []           # a bool's flags that set it False (--no-x)
        for d in getattr(decl, "decls", ()):
            on, _, off = d.partition("/")
            self.opts.append(on.strip())
            if off:
                self.off.append(off.strip())
        if kind == "option" and not self.opts:
            self.opts.append("--" + name.replace("_", "-"))
        if not (value_type in (str, Path, int, float, bool) or _is_enum(value_type)):
            raise TypeError(f"option {name!r}: the command line reads str, Path, int, float, bool or an Enum, not "
                            f"{value_type!r}")

    @property
    def label(self) -> str:
        """How errors name it: ``'--format' / '-f'`` (an option), ``'NAME'`` (an argument)."""
        if self.kind == "argument":
            return f"'{self.name.upper()}'"
        return " / ".join(f"'{o}'" for o in self.opts)

    def convert(self, text: str, invocation: "Invocation") -> Any:
        """The value of one string the user typed."""
        try:
            value = self.type(text)       # str, Path, int, float, or an Enum by its value
        except ValueError:
            raise UsageError(f"Invalid value for {self.label}: {self._wanted(text)}", invocation) from None
        if self.min is not None and value < self.min:
            raise UsageError(f"Invalid value for {self.label}: must be >= {self.min}, got {text!r}", invocation)
        return value

    def _wanted(self, text: str) -> str:
        t = self.type
        if t is int:
            return f"must be a whole number, got {text!r}"
        if t is float:
            return f"must be a number, got {text!r}"
        if _is_enum(t):
            return f"{text!r} is not one of {', '.join(repr(m.value) for m in t)}."
        return f"{text!r} is not a valid {t.__name__}"

    def type_metavar(self) -> str:
        if self.metavar:
            return self.metavar
        t = self.type
        if _is_enum(t):
            return "[" + "|".join(str(m.value) for m in t) + "]"
        name = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH"}.get(t, "VALUE")
        return f"{name} RANGE" if self.min is not None else name


def _is_enum(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


def _unwrap(annotation: Any) -> tuple[Any, Any, bool]:
    """(value type, Option/Argument declared in Annotated or None, repeatable) of a parameter's annotation."""
    decl = None
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *extras = typing.get_args(annotation)
        decl = next((e for e in extras if isinstance(e, (Option, Argument))), None)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union and type(None) in args:     # Optional[X]
        annotation = next(a for a in args if a is not type(None))
    multiple = typing.get_origin(annotation) in (list, typing.List)
    if multiple:
        annotation = typing.get_args(annotation)[0]
    return annotation, decl, multiple


def read_params(fn: Callable) -> tuple[list[Param], Optional[str]]:
    """A command's parameters from its signature, and the name of its ``Invocation`` parameter (or None)."""
    params, invocation_name = [], None
    for p in inspect.signature(fn, eval_str=True).parameters.values():
        value_type, decl, multiple = _unwrap(p.annotation)
        if value_type is Invocation:
            invocation_name = p.name
            continue
        if isinstance(p.default, (Option, Argument)):
            decl = p.default
            default = decl.default
        else:
            default = p.default
            if decl is not None and decl.default is not _UNSET:
                default = decl.default
        if decl is None:
            decl = Option()
        if default is inspect.Parameter.empty or default is _UNSET:
            default = REQUIRED
        kind = "argument" if isinstance(decl, Argument) else "option"
        params.append(Param(p.name, kind, value_type, decl, default, multiple))
    return params, invocation_name


# --- commands and groups ------------------------------------------------------------------------------------


class Command:
    """A registered command: its name and the function that runs it (which a module may wrap later)."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name, self.callback = name, callback

    @property
    def help(self) -> str:
        return inspect.cleandoc(self.callback.__doc__ or "")

    def read(self) -> tuple[list[Param], Optional[str]]:
        """Its parameters (``--help`` last) and the name of its ``Invocation`` parameter, read from its signature."""
        params, invocation_name = read_params(self.callback)
        return params + [_help_param()], invocation_name

    def params(self) -> list[Param]:
        return self.read()[0]


class App:
    """A group of commands (and of other groups), with options of its own given before the command name."""

    def __init__(self, name: Optional[str] = None, help: Optional[str] = None, no_args_is_help: bool = False) -> None:
        self.name, self.help, self.no_args_is_help = name, inspect.cleandoc(help or ""), no_args_is_help
        self.registered_commands: list[Command] = []
        self.groups: dict[str, App] = {}
        self.root: Optional[Callable] = None

    def command(self, name: Optional[str] = None) -> Callable:
        """Decorator: register a function as a command (named after it, ``_`` as ``-``, unless ``name``)."""

        def register(fn: Callable) -> Callable:
            self.registered_commands.append(Command(name or fn.__name__.replace("_", "-"), fn))
            return fn

        return register

    def callback(self) -> Callable:
        """Decorator: the function that takes this group's own options (run before the command)."""

        def register(fn: Callable) -> Callable:
            self.root = fn
            return fn

        return register

    def add_group(self, group: "App", name: str) -> None:
        self.groups[name] = group

    @property
    def commands(self) -> dict[str, "Command | App"]:
        """Every command and group by name, in help order (commands first)."""
        return {**{c.name: c for c in self.registered_commands}, **self.groups}

    def params(self) -> list[Param]:
        return (read_params(self.root)[0] if self.root else []) + [_help_param()]

    def run(self, argv: list[str], prog_name: Optional[str] = None) -> Any:
        """Parse ``argv`` down to one command and run it; its return value. ``prog_name`` (default: the app's
        name) begins the command path that help and errors show."""
        return self._run(list(argv), Invocation(prog_name or self.name or "", self))

    def _run(self, argv: list[str], invocation: "Invocation") -> Any:
        if not argv and self.no_args_is_help:
            echo(invocation.get_help())
            return 0
        values, rest = _parse(invocation, self.params(), argv, stop_at_positional=True)
        if self.root is not None:
            self.root(**values)
        if not rest:
            if self.no_args_is_help:
                echo(invocation.get_help())
                return 0
            raise UsageError("Missing command.", invocation)
        name, rest = rest[0], rest[1:]
        target = self.commands.get(name)
        if target is None:
            raise UsageError(f"No such command {name!r}.{_did_you_mean(name, self.commands)}", invocation)
        sub = Invocation(f"{invocation.command_path} {name}", target)
        if isinstance(target, App):
            return target._run(rest, sub)
        params, invocation_name = target.read()
        values, _ = _parse(sub, params, rest, stop_at_positional=False)
        if invocation_name is not None:
            values[invocation_name] = sub
        return target.callback(**values)


class Invocation:
    """The command line a command runs under: its path (``dsdsim predict``) and the options the user typed."""

    def __init__(self, command_path: str, target: "Command | App") -> None:
        self.command_path, self.target = command_path, target
        self.typed: set[str] = set()          # parameter names the user gave (not their defaults)

    def given(self, name: str) -> bool:
        """Whether the user typed the option of parameter ``name``."""
        return name in self.typed

    def get_help(self) -> str:
        return _help(self)


def _help_param() -> Param:
    return Param("help", "option", bool, Option(False, *_HELP_NAMES, help="Show this message and exit."), False,
                 False)


# --- parsing ------------------------------------------------------------------------------------------------


def _parse(invocation: Invocation, params: list[Param], argv: list[str],
           stop_at_positional: bool) -> tuple[dict, list[str]]:
    """(values by parameter name, what follows the first positional when ``stop_at_positional``: a group's
    command and its arguments)."""
    typed, free, rest = _read_tokens(invocation, params, argv, stop_at_positional)
    for p in typed:                      # --help and --version before any value is checked
        if p.name == "help":
            echo(invocation.get_help())
            raise Exit(0)
        if p.is_eager and p.callback is not None:
            p.callback(typed[p][-1])
    for p in [p for p in params if p.kind == "argument"]:
        if free:
            typed[p] = [free.pop(0)]
    values = _values(invocation, params, typed)
    if free:
        raise UsageError(f"Got unexpected extra argument{'s' if len(free) > 1 else ''} ({' '.join(free)})",
                         invocation)
    return values, rest


def _read_tokens(invocation: Invocation, params: list[Param], argv: list[str],
                 stop_at_positional: bool) -> tuple[dict, list[str], list[str]]:
    """(what was typed for each parameter, in the order first typed: strings, or a flag's bools; the positional
    words; what follows the first positional when ``stop_at_positional``), split by a stdlib ``argparse`` parser
    built from the declarations (``_parser``); its errors are reworded as click words them."""
    parser, by_name = _parser(params, stop_at_positional)
    try:
        ns, extra = parser.parse_known_args(_values_attached(params, argv))
    except argparse.ArgumentError as exc:
        p = by_name.get(exc.argument_name)
        if p is None:
            raise UsageError(str(exc), invocation) from None
        flag = _typed_flag(p, argv)
        if p.flag and not flag.startswith("--"):      # -ez: a flag in a cluster, then a letter no option has
            raise UsageError(f"No such option: -{_after_in_cluster(flag, argv)}", invocation) from None
        raise UsageError(f"Option {flag!r} does not take a value." if p.flag else
                         f"Option {flag!r} requires an argument.", invocation) from None
    typed: dict[Param, list] = {}
    for p, value in getattr(ns, "_typed", ()):
        typed.setdefault(p, []).append(value)
    free: list[str] = []
    for i, token in enumerate(extra):
        if token == "--":
            free.extend(extra[i + 1:])
            break
        if token.startswith("-") and token != "-":
            flag = token.partition("=")[0] if token.startswith("--") else token[:2]
            known = {f for q in params if q.kind == "option" for f in q.opts + q.off}
            raise UsageError(f"No such option: {flag}{_did_you_mean(flag, known)}", invocation)
        free.append(token)
    return typed, free, list(getattr(ns, "_rest", []) or [])


def _values_attached(params: list[Param], argv: list[str]) -> list[str]:
    """``argv`` with each option that takes a value joined to the word after it where that word starts with "-"
    (``--tolerance -1%`` as ``--tolerance=-1%``, ``-b -5,8`` as ``-b-5,8``): argparse would read such a word as an
    option, where click, and the user, mean the value (an out-of-range value then gets its own error)."""
    long = {f for p in params if p.kind == "option" and not p.flag for f in p.opts if f.startswith("--")}
    short_value = {f[1] for p in params if p.kind == "option" and not p.flag for f in p.opts if not f.startswith("--")}
    short_flag = {f[1] for p in params if p.kind == "option" and p.flag for f in p.opts + p.off
                  if not f.startswith("--")}
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        takes = token in long or (len(token) >= 2 and token[0] == "-" and token[1] != "-" and token[-1] in short_value
                                  and all(c in short_flag for c in token[1:-1]))
        if takes and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(token + ("=" if token.startswith("--") else "") + argv[i + 1])
            i += 2
            continue
        out.append(token)
        i += 1
    return out


class _Typed(argparse.Action):
    """Records each option as typed, in order, as (parameter, value): a flag its bool, an option its string."""

    def __init__(self, option_strings, dest, param: Param = None, value: Any = None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.param, self.value = param, value

    def __call__(self, parser, namespace, values, option_string=None):
        if not hasattr(namespace, "_typed"):
            namespace._typed = []
        if self.nargs == "+":             # a repeatable option given several words: --measurements a.json b.json
            namespace._typed.extend((self.param, v) for v in values)
        else:
            namespace._typed.append((self.param, self.value if self.nargs == 0 else values))


def _parser(params: list[Param], stop_at_positional: bool) -> tuple[argparse.ArgumentParser, dict]:
    """An ``argparse`` parser of ``params``' options (every spelling: ``--tp=2``, ``-b8``, ``-es8``), that leaves
    the positional words and unknown options to the caller and, for a group, everything from its first positional
    on; and the parameter of each option as argparse names it in its errors."""
    parser = argparse.ArgumentParser(prog="", add_help=False, allow_abbrev=False, exit_on_error=False)
    by_name = {}
    for p in params:
        if p.kind != "option":
            continue
        for flags, value in ((p.opts, True), (p.off, False)):
            if not flags:
                continue
            # a repeatable option of a command takes every word up to the next option (a shell glob's files); a
            # group's would swallow the command name after it
            nargs = {"nargs": 0} if p.flag else {"nargs": "+"} if p.multiple and not stop_at_positional else {}
            action = parser.add_argument(*flags, action=_Typed, dest=p.name, default=argparse.SUPPRESS, param=p,
                                         value=value, **nargs)
            by_name["/".join(action.option_strings)] = p
    if stop_at_positional:
        parser.add_argument("_rest", nargs=argparse.REMAINDER)
    return parser, by_name


def _after_in_cluster(flag: str, argv: list[str]) -> str:
    """The letter after short flag ``flag`` in the cluster of short flags that holds it (``-ez``: z)."""
    for token in argv:
        if token.startswith("-") and not token.startswith("--") and flag[1] in token[1:-1]:
            return token[token.index(flag[1], 1) + 1]
    return "?"


def _typed_flag(p: Param, argv: list[str]) -> str:
    """The spelling of ``p``'s option the user typed last (for an error that quotes it): ``--name``,
    ``--name=VALUE``, or a short flag, alone or in a cluster of short flags."""
    for token in reversed(argv):
        for flag in p.opts + p.off:
            if flag.startswith("--"):
                if token == flag or token.startswith(flag + "="):
                    return flag
            elif token.startswith("-") and not token.startswith("--") and flag[1] in token[1:]:
                return flag
    return p.opts[0]


def _values(invocation: Invocation, params: list[Param], typed: dict) -> dict[str, Any]:
    """Each parameter's value: what was typed, converted and checked in the order typed (as click does), then the
    defaults of the rest (a required one missing is an error)."""
    values: dict[str, Any] = {}
    for p, given in typed.items():
        invocation.typed.add(p.name)
        if p.flag:
            values[p.name] = given[-1]
        elif p.multiple:
            values[p.name] = [p.convert(v, invocation) for v in given]
        else:
            values[p.name] = p.convert(given[-1], invocation)
        if p.callback is not None and not p.is_eager:
            p.callback(values[p.name])
    for p in params:
        if p not in typed and p.name != "help":
            if p.required:
                raise UsageError(f"Missing {'option' if p.kind == 'option' else 'argument'} {p.label}.", invocation)
            values[p.name] = p.default
    return values


def _did_you_mean(word: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(word, [k for k in known if k not in _HELP_NAMES], n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {close[0] if close[0].startswith('-') else repr(close[0])}?)"


# --- help ---------------------------------------------------------------------------------------------------


def _width() -> int:
    """The help's width: the terminal's (COLUMNS first), at most 80, less the margin click keeps."""
    import shutil

    return max(min(shutil.get_terminal_size().columns, _MAX_WIDTH) - 2, 50)


def _help(invocation: Invocation) -> str:
    import textwrap

    width = _width()
    target = invocation.target
    params = target.params()
    arguments = [p for p in params if p.kind == "argument"]
    usage = f"Usage: {invocation.command_path} [OPTIONS]"
    if isinstance(target, App):
        usage += " COMMAND [ARGS]..."
    usage += "".join(f" {p.metavar or p.name.upper()}" for p in arguments)
    lines = [usage]
    if target.help:
        lines += ["", _wrap_doc(target.help, width, textwrap)]
    if arguments:
        lines += ["", "Arguments:", _rows([(p.metavar or p.name.upper(), _param_help(p)) for p in arguments],
                                         width, textwrap)]
    options = [p for p in params if p.kind == "option"]
    lines += ["", "Options:", _rows([(_option_names(p), _param_help(p)) for p in options], width, textwrap)]
    if isinstance(target, App):
        commands = target.commands
        limit = width - 6 - max(len(n) for n in commands)
        lines += ["", "Commands:", _rows([(n, _short_help(c.help, limit)) for n, c in commands.items()], width,
                                         textwrap)]
    return "\n".join(lines)


def _option_names(p: Param) -> str:
    names = ", ".join(sorted(p.opts, key=lambda o: o.startswith("--")))
    if p.off:
        names += " / " + ", ".join(p.off)
    return names if p.flag else f"{names} {p.type_metavar()}"


def _param_help(p: Param) -> str:
    extra = []
    if p.required:
        extra.append("required")
    elif p.flag and p.off:
        extra.append("default: " + (p.opts if p.default else p.off)[0].lstrip("-"))
    elif p.default is not None and not (p.flag and not p.default):
        default = p.default.value if isinstance(p.default, enum.Enum) else p.default
        if isinstance(default, (list, tuple)):
            default = ", ".join(map(str, default))
        extra.append(f"default: {default}")
    if p.min is not None:
        extra.append(f"x>={p.min}")
    text = p.help or ""
    if not extra:
        return text
    return f"{text}  [{'; '.join(extra)}]" if text else f"[{'; '.join(extra)}]"


def _rows(rows: list[tuple[str, str]], width: int, textwrap) -> str:
    """Two columns as click writes them: names, then their help wrapped beside them (or on the next line when the
    names are wider than the column)."""
    first = min(max(len(a) for a, _ in rows), _OPTION_COLUMN) + 2
    text_width = max(width - first - 2, 10)
    out = []
    for names, text in rows:
        wrapped = textwrap.wrap(text, text_width) or [""]
        if len(names) <= first - 2:
            out.append(f"  {names:<{first}}{wrapped[0]}".rstrip())
            rest = wrapped[1:]
        else:
            out.append(f"  {names}")
            rest = wrapped if text else []
        out.extend(f"{' ' * (first + 2)}{line}" for line in rest)
    return "\n".join(out)


def _wrap_doc(doc: str, width: int, textwrap) -> str:
    """A docstring as click shows it: paragraphs rewrapped, a paragraph that starts with a ``\\b`` line kept as
    written."""
    paragraphs, lines = [], []
    for line in doc.split("\f", 1)[0].splitlines() + [""]:
        if line.strip():
            lines.append(line)
            continue
        if lines:
            if lines[0].strip() == "\b":
                paragraphs.append("\n".join("  " + x for x in lines[1:]))
            else:
                indent = " " * (2 + len(lines[0]) - len(lines[0].lstrip()))
                paragraphs.append(textwrap.fill(" ".join(x.strip() for x in lines), width, initial_indent=indent,
                                                subsequent_indent=indent))
            lines = []
    return "\n\n".join(paragraphs)


def _short_help(doc: str, limit: int) -> str:
    """A command's line in its group's help: its first sentence, or as many words as fit and '...'."""
    words = doc.split("\n\n", 1)[0].split()
    if words and words[0] == "\b":
        words = words[1:]
    total = 0
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit:
            break
        if word.endswith("."):
            return " ".join(words[:i + 1])
    else:
        return " ".join(words)
    kept = words[:i]
    while kept and len(" ".join(kept)) + 3 > limit:
        kept.pop()
    return " ".join(kept) + "..."
