"""dsdsim.records.frozen against the ground truth it replaces: @dataclasses.dataclass(frozen=True).

Each class below is written once and built twice, by the standard decorator and by ``frozen``; every behaviour a
caller can see (signature, defaults, repr, equality, hash, freezing, replace, asdict, pickling, inheritance,
errors) must come out the same.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import types
from dataclasses import FrozenInstanceError, field
from pathlib import Path

import pytest

from dsdsim.records import frozen

STANDARD = dataclasses.dataclass(frozen=True)


def _body(name: str, body: str, bases: tuple = ()) -> tuple:
    """A class statement's namespace, as a fresh class built from the source each time."""
    ns: dict = {}
    src = f"class {name}({', '.join(b.__name__ for b in bases)}):\n" + "".join(f"    {line}\n" for line in body)
    exec(src, {"field": field, **{b.__name__: b for b in bases}, "__name__": __name__}, ns)
    return ns[name]


def twins(name: str, *body: str, **options):
    """(standard, ours): the same class body under each decorator."""
    return (dataclasses.dataclass(frozen=True, **options)(_body(name, body)),
            frozen(**options)(_body(name, body)) if options else frozen(_body(name, body)))


BODIES = {
    "plain": ('"""A point."""', "x: float", "y: float = 2.0"),
    "one": ('"""One field."""', "x: int"),
    "none": ('"""No field."""',),
    "factory": ('"""A factory."""', "x: int", "items: list = field(default_factory=list)"),
    "hidden": ('"""Fields out of repr, compare, hash and init."""', "x: int",
               "note: str = field(default='n', repr=False, compare=False)",
               "tag: str = field(default='t', hash=False)",
               "later: int = field(default=7, init=False)",
               "made: tuple = field(default_factory=lambda: (1,), init=False)"),
    "undocumented": ("x: int", "y: str = 'a'"),
    "post_init": ('"""Derives a field."""', "x: int", "double: int = field(init=False, default=0)",
                  "def __post_init__(self):\n        object.__setattr__(self, 'double', 2 * self.x)"),
    "own_methods": ('"""Its own repr and eq."""', "x: int", "y: int = 0",
                    "def __repr__(self):\n        return 'mine'",
                    "def __eq__(self, other):\n        return isinstance(other, type(self)) and self.x == other.x"),
    "own_hash": ('"""Its own hash."""', "x: int", "def __hash__(self):\n        return 42"),
}


def _outcome(fn, *args):
    try:
        return "value", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the kind of failure is what is compared
        return "raises", type(exc), str(exc)


def _make(cls, name: str):
    return cls() if name == "none" else cls(3)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_same_class_as_the_standard_decorator(name):
    std, ours = twins(name, *BODIES[name])
    assert str(inspect.signature(std)) == str(inspect.signature(ours))
    assert std.__init__.__annotations__ == ours.__init__.__annotations__
    assert std.__doc__ == ours.__doc__
    assert std.__match_args__ == ours.__match_args__
    assert [(f.name, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(std)] == \
        [(f.name, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(ours)]
    a_std, a_ours = _make(std, name), _make(ours, name)
    assert repr(a_std).replace(std.__qualname__, "C") == repr(a_ours).replace(ours.__qualname__, "C")
    assert dataclasses.asdict(a_std) == dataclasses.asdict(a_ours)
    assert vars(a_std) == vars(a_ours)
    for a, cls in ((a_std, std), (a_ours, ours)):
        assert a == _make(cls, name) and not (a != _make(cls, name))
        assert (a == object()) is False
    assert _outcome(hash, a_std) == _outcome(hash, a_ours)    # the same tuple of fields hashed (or a list refused)
    assert _outcome(hash, a_ours) == _outcome(hash, _make(ours, name))
    for attr in ["x", "not_a_field"]:
        for a in (a_std, a_ours):
            with pytest.raises(FrozenInstanceError, match=f"cannot assign to field '{attr}'"):
                setattr(a, attr, 1)
            with pytest.raises(FrozenInstanceError, match=f"cannot delete field '{attr}'"):
                delattr(a, attr)


def test_equality_and_hash_follow_compare_and_hash_flags():
    std, ours = twins("H", *BODIES["hidden"])
    for cls in (std, ours):
        a, b = cls(1, note="a", tag="a"), cls(1, note="b", tag="b")
        c = cls(1, note="z", tag="a")
        assert a != b and a == c           # note is not compared, tag is
        assert hash(a) == hash(b)          # neither note nor tag is hashed
        assert cls(2) != cls(1)
    assert std(1) != ours(1) and ours(1) != std(1)     # another class: NotImplemented both ways


def test_defaults_factories_and_post_init():
    std, ours = twins("F", *BODIES["factory"])
    for cls in (std, ours):
        a, b = cls(1), cls(1)
        assert a.items == [] and a.items is not b.items
        assert cls(1, [5]).items == [5]
    std, ours = twins("P", *BODIES["post_init"])
    assert std(4).double == ours(4).double == 8
    with pytest.raises(TypeError):
        ours(4, 8)                         # double is not an init parameter
    std, ours = twins("Z", *BODIES["hidden"])
    assert std(1).made == ours(1).made == (1,) and std(1).later == ours(1).later == 7


def test_replace_pickle_and_copy():
    std, ours = twins("Point", *BODIES["plain"])
    globals()["Point"] = ours                 # pickle finds classes by module and name
    try:
        ours.__qualname__ = "Point"
        a = ours(1.0)
        assert dataclasses.replace(a, y=5.0) == ours(1.0, 5.0)
        assert pickle.loads(pickle.dumps(a)) == a
        assert copy.copy(a) == a and copy.deepcopy(a) == a
    finally:
        del globals()["Point"]
    assert dataclasses.replace(std(1.0), y=5.0) == std(1.0, 5.0)


def test_inheritance_adds_fields_and_keeps_freezing():
    Base = frozen(_body("Base", ('"""Base."""', "x: int", "y: int = 1")))
    Child = frozen(_body("Child", ('"""Child."""', "z: int = 2"), (Base,)))
    c = Child(1, 2, 3)
    assert (c.x, c.y, c.z) == (1, 2, 3)
    assert repr(c).endswith("Child(x=1, y=2, z=3)")
    assert c != Base(1, 2) and c == Child(1, 2, 3)
    with pytest.raises(FrozenInstanceError):
        c.z = 0
    Plain = types.new_class("Plain", (Base,))           # a plain subclass may hold attributes that are not fields
    p = Plain(1)
    p.note = "ok"
    with pytest.raises(FrozenInstanceError):
        p.x = 2
    StdBase = STANDARD(_body("StdBase", ('"""A standard frozen base."""', "x: int")))
    Mixed = frozen(_body("Mixed", ('"""On a standard base."""', "y: int = 0"), (StdBase,)))
    assert Mixed(1).y == 0 and Mixed.__dataclass_params__.frozen      # handed to the standard decorator
    Open = dataclasses.dataclass(_body("Open", ('"""Not frozen."""', "x: int")))
    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        frozen(_body("Bad", ('"""On an open base."""', "y: int = 0"), (Open,)))


def test_errors_match_the_standard_decorator():
    order = ('"""Out of order."""', "x: int = 1", "y: int")
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        STANDARD(_body("O", order))
    with pytest.raises(TypeError, match="non-default argument 'y' follows default argument"):
        frozen(_body("O", order))
    own_setattr = ('"""Sets."""', "x: int", "def __setattr__(self, n, v):\n        pass")
    for decorate in (STANDARD, frozen):
        with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__ in class S"):
            decorate(_body("S", own_setattr))
    with pytest.raises(TypeError, match="frozen\\(\\) takes init, repr and eq"):
        frozen(slots=True)


def test_init_false_and_switched_off_methods():
    body = ('"""Its own init."""', "x: int",
            "def __init__(self, text):\n        object.__setattr__(self, 'x', int(text))")
    std, ours = twins("I", *body, init=False)
    assert std("4").x == ours("4").x == 4 and ours("4") == ours("4")
    std, ours = twins("N", *BODIES["plain"], repr=False, eq=False)
    a = ours(1.0)
    assert a != ours(1.0) and hash(a) == object.__hash__(a)      # identity, as the standard decorator leaves it
    assert repr(a).startswith("<")


def test_a_field_named_self():
    std, ours = twins("Me", '"""Has self."""', "self: int")
    assert str(inspect.signature(std)) == str(inspect.signature(ours))
    assert ours(self=3).self == 3


def test_recursive_repr_is_cut():
    std, ours = twins("R", '"""Holds a list."""', "items: list")
    for cls in (std, ours):
        a = cls([])
        a.items.append(a)
        assert repr(a).endswith("(items=[...])")


def test_dsdsim_builds_its_frozen_dataclasses_with_frozen():
    """The package's own sources use the fast decorator (a @dataclass(frozen=True) would cost start-up again)."""
    root = Path(__file__).resolve().parents[1] / "dsdsim"
    standard = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py"))
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if line.lstrip().startswith("@") and "dataclass(" in line and "frozen=True" in line]
    assert not standard, f"use @frozen (dsdsim.records) for: {standard}"


def test_a_dsdsim_result_behaves_as_before():
    from dsdsim.specs.deployment import Deployment
    from dsdsim.policy.options import PredictOptions

    a, b = PredictOptions(), PredictOptions()
    assert a == b and hash(a) == hash(b) and repr(a).startswith("PredictOptions(")
    assert dataclasses.replace(a, context=4096) != a
    with pytest.raises(FrozenInstanceError):
        a.context = 1
    assert Deployment(tp=2) == Deployment(tp=2) and {Deployment(tp=2): 1}[Deployment(tp=2)] == 1


def test_init_is_compiled_at_the_first_instance_with_the_same_signature():
    std, ours = twins("L", *BODIES["hidden"])
    before, stub = str(inspect.signature(ours)), ours.__init__
    Plain = types.new_class("Plain", (ours,))             # a plain subclass instantiated first
    assert Plain(1, note="a").note == "a"
    assert ours.__init__ is not stub and str(inspect.signature(ours)) == before == str(inspect.signature(std))
    assert ours(2).x == 2 and vars(ours(2)) == vars(std(2))
    with pytest.raises(TypeError):
        ours()                                            # x is required, as by the standard __init__
    with pytest.raises(TypeError):
        std()


def test_eq_and_hash_are_compiled_at_their_first_call():
    std, ours = twins("Q", *BODIES["plain"])
    stubs = ours.__eq__, ours.__hash__
    a, b = ours(1.0), ours(1.0)
    assert a == b and hash(a) == hash(b) == hash(std(1.0))
    assert ours.__eq__ is not stubs[0] and ours.__hash__ is not stubs[1]     # the compiled ones now
    assert a == b and a != ours(2.0) and (a == std(1.0)) is False and hash(a) == hash((1.0, 2.0))
