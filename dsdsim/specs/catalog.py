"""Names -> spec files. Shipped specs, plus user folders (``--specs-dir`` or ``DSDSIM_SPECS_DIRS``).

Lookup is explicit: a name is an exact file stem, or a path. An unknown name fails with one line that lists
the closest known names. A user file named like a shipped spec shadows it, with a ``SpecWarning`` naming both; a
user file that cannot be read fails only the lookups that reach it (a listing skips it, with a warning).

Lookups by name are remembered per catalog state (the user folders, ``DSDSIM_SPECS_DIRS``) and read again when
their file changes (its modification time and size): a loop that names its specs pays a dictionary lookup and a
``stat`` per file, not the parsing and the search.
"""
from __future__ import annotations

import copy
import os
import re
import warnings
from functools import lru_cache
from types import SimpleNamespace
from pathlib import Path
from typing import Iterable, Optional

from dsdsim.errors import DsdsimError, SpecError
from dsdsim.specs.engine import EngineSpec, engine_from_dict
from dsdsim.specs.hardware import HardwareSpec, hardware_from_dict
from dsdsim.specs.io import parse_yaml, pre_parsed, read_structured
from dsdsim.specs.model import ModelSpec

ENV_SPECS_DIRS = "DSDSIM_SPECS_DIRS"
_HW_SUFFIXES = (".yaml", ".yml", ".json")
_MODEL_SUFFIXES = (".json",)
_user_dirs: list[Path] = []
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")   # organisation/name
_KIND_WORDS = {"hw_specs": "hardware", "model_specs": "model", "engine_specs": "engine"}


class SpecWarning(UserWarning):
    """A user spec that shadows a shipped one, or a user file a listing skipped because it cannot be read."""


@lru_cache(maxsize=None)
def shipped_dir(kind: str) -> Path:
    """``hw_specs``, ``model_specs``, ``engine_specs`` or ``measurements``: inside the installed package, or at the
    source checkout's root (found once per process: the package does not move)."""
    here = Path(__file__).resolve().parent.parent  # dsdsim/
    installed = here / kind
    return installed if installed.is_dir() else here.parent / kind


def add_specs_dir(path: str | Path) -> None:
    """Search this folder (and its hw_specs/, model_specs/, engine_specs/ subfolders) before the shipped specs."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise SpecError(f"specs folder {p} does not exist; give an existing folder")
    if p not in _user_dirs:
        _user_dirs.insert(0, p)
    _index.cache_clear()
    _by_name.clear()


def _search_dirs(kind: str) -> list[Path]:
    dirs: list[Path] = []
    env = [Path(d).expanduser() for d in os.environ.get(ENV_SPECS_DIRS, "").split(os.pathsep) if d]
    for d in env:
        if not d.is_dir():
            raise SpecError(f"{ENV_SPECS_DIRS} names {d}, which is not a folder; fix or unset {ENV_SPECS_DIRS}")
    for base in [*_user_dirs, *env]:
        dirs += [base / kind, base]
    dirs.append(shipped_dir(kind))
    return [d for d in dirs if d.is_dir()]


@lru_cache(maxsize=8)
def _index(kind: str, env_value: str) -> dict[str, Path]:
    """name -> file for one kind; `env_value` (DSDSIM_SPECS_DIRS) is part of the cache key so a changed
    environment is seen; add_specs_dir clears the cache."""
    suffixes = _MODEL_SUFFIXES if kind == "model_specs" else _HW_SUFFIXES
    found: dict[str, Path] = {}
    declared: dict[str, Path] = {}       # the name a hardware file declares inside it -> that file
    shipped = shipped_dir(kind)
    for d in _search_dirs(kind):
        for f in sorted(d.iterdir()):
            if f.suffix.lower() in suffixes and f.is_file() and f.stem not in found:
                if d.name not in _KINDS and not _looks_like(kind, f):
                    continue
                found[f.stem] = f
                if d != shipped:
                    _warn_if_shadowing(kind, f, shipped, suffixes)
                if kind == "hw_specs":
                    name = f.stem if d == shipped else _declared_name(f)
                    if name in declared:
                        raise SpecError(f"two hardware specs are named {name!r}: {declared[name]} and {f}; rename "
                                        "one (its file and its name: field)")
                    declared[name] = f
    return found


_KINDS = ("hw_specs", "model_specs", "engine_specs")


def _warn_if_shadowing(kind: str, user_file: Path, shipped: Path, suffixes: tuple) -> None:
    for suffix in suffixes:
        own = shipped / f"{user_file.stem}{suffix}"
        if own.is_file():
            warnings.warn(SpecWarning(f"{user_file} shadows the shipped {_KIND_WORDS[kind]} spec {user_file.stem!r} "
                                      f"({shipped.name}/{own.name}); rename the file to keep both"), stacklevel=2)
            return


def _skipped(path: Path, exc: Exception) -> str:
    """'skipped FILE: its error' (the error's first line, which names the file already where it can)."""
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"skipped {line}" if str(path) in line or path.name in line else f"skipped {path}: {line}"


def user_spec_file(kind: str, name: str) -> Optional[Path]:
    """The user file (not a shipped one) that catalog name ``name`` of ``kind`` reads, None for a shipped spec."""
    path = _names(kind).get(name)
    return None if path is None or path.parent == shipped_dir(kind) else path


def catalog_state() -> tuple:
    """What a name lookup depends on besides the files: DSDSIM_SPECS_DIRS and the folders add_specs_dir added."""
    return (os.environ.get(ENV_SPECS_DIRS, ""), *_user_dirs)


# (kind, name, catalog_state()) -> (spec, file, the file's stamp when it was read)
_by_name: dict[tuple, tuple] = {}
_BY_NAME_MAX = 512


def _remembered(kind: str, text: str, load):
    """``load(text)`` -> (spec, file), remembered for catalog names (and engine names such as ``vllm@0.10.1``) per
    catalog state, read again when the file changes. A path is not remembered: what it names follows the working
    folder."""
    state = catalog_state()
    key = (kind, text, state)
    hit = _by_name.get(key)
    if hit is not None and _stamp(hit[1]) == hit[2]:
        return hit[0], hit[1]
    spec, path = load(text)
    if _is_name(kind, text, state[0]):
        if len(_by_name) >= _BY_NAME_MAX:
            _by_name.clear()
        _by_name[key] = (spec, path, _stamp(path))
    return spec, path


def is_catalog_name(kind: str, text: str) -> bool:
    """Whether ``text`` is a name of the catalog (``hw_specs``, ``model_specs``; engines: any text that is not a
    path), not a path whose meaning follows the working folder."""
    return _is_name(kind, text, os.environ.get(ENV_SPECS_DIRS, ""))


def stamped(files: Iterable[Path]) -> tuple:
    """((file as text, its stamp), ...): compare with ``unchanged`` to tell whether any was rewritten since."""
    return tuple((os.fspath(f), _stamp(f)) for f in files)


def unchanged(stamps: tuple) -> bool:
    for f, st in stamps:              # os.stat on the text: a remembered Setup is checked on every call
        try:
            now = os.stat(f)
        except OSError:
            if st != (0, 0):
                return False
            continue
        if (now.st_mtime_ns, now.st_size) != st:
            return False
    return True


def _is_name(kind: str, text: str, env_value: str) -> bool:
    if kind == "engine_specs":
        return os.sep not in text and "/" not in text and not text.endswith((".yaml", ".yml", ".json"))
    return text in _index(kind, env_value)


def _declared_name(path: Path) -> str:
    """The `name:` inside a user's hardware file (its stem if it has none or cannot be read)."""
    try:
        data = read_structured(path)
    except Exception:          # a broken file fails with its own message when it is loaded
        return path.stem
    name = data.get("name") if isinstance(data, dict) else None
    return str(name) if name else path.stem


def _looks_like(kind: str, path: Path) -> bool:
    """In a mixed user folder, tell model configs (have model_type) from engine specs (have host_step_s) from
    hardware specs."""
    try:
        text = path.read_text(encoding="utf-8", errors="ignore")
    except OSError:
        return False
    is_model = '"model_type"' in text
    is_engine = not is_model and (("cuda_graphs" in text and "overlap" in text)
                                  or text.startswith("extends:") or "\nextends:" in text)
    if kind == "model_specs":
        return is_model
    if kind == "engine_specs":
        return is_engine
    return not is_model and not is_engine


def _names(kind: str) -> dict[str, Path]:
    return _index(kind, os.environ.get(ENV_SPECS_DIRS, ""))


def hardware_names() -> list[str]:
    return sorted(_names("hw_specs"))


def model_names() -> list[str]:
    return sorted(_names("model_specs"))


def engine_names() -> list[str]:
    return sorted(_names("engine_specs"))


@lru_cache(maxsize=256)
def _real(path: Path) -> Path:
    """``path.resolve()``, remembered: resolving walks every component with a system call (tens of us), and a
    setup resolves its engine on every call that names it."""
    return path.resolve()


def _resolve(kind: str, name_or_path: str, what: str) -> Path:
    listing = {"model_specs": "models", "hw_specs": "hardware", "engine_specs": "engines"}[kind]
    text = str(name_or_path).strip()
    if not text:
        raise SpecError(f"empty {what} name; run `dsdsim list {listing}` to see the known names")
    known = _names(kind)
    if text in known:
        return known[text]
    p = Path(text).expanduser()
    if kind == "model_specs" and p.is_dir():          # a downloaded checkpoint folder holding config.json
        if (p / "config.json").is_file():
            return p / "config.json"
        raise SpecError(f"folder {text} has no config.json; pass the folder of a Hugging Face checkpoint or the "
                        "config.json itself")
    looks_like_path = os.sep in text or p.suffix.lower() in (".json", ".yaml", ".yml")
    if looks_like_path:
        if p.is_file():
            return p
        if p.is_dir():
            raise SpecError(f"{what} spec {text} is a folder; give a spec file")
        if kind == "model_specs" and _HUB_ID.fullmatch(text):
            raise SpecError(f"{text!r} looks like a Hugging Face hub id: dsdsim does not download; fetch its "
                            "config.json (e.g. huggingface-cli download " + text + " config.json) and pass that "
                            "file or its folder")
        raise SpecError(f"{what} spec file {text} does not exist")
    from difflib import get_close_matches       # only for the error

    close = get_close_matches(text.lower(), list(known), n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise SpecError(f"unknown {what} {text!r}{hint} (run `dsdsim list {listing}`, or pass a path to a spec file)")


def _stamp(path: Path) -> tuple[int, int]:
    """(mtime_ns, size): part of the cache key, so a file rewritten in place is read again."""
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _load_hardware_file(path: Path) -> HardwareSpec:
    return _load_hardware_cached(path, _stamp(path))


@lru_cache(maxsize=128)
def _load_hardware_cached(path: Path, stamp: tuple[int, int]) -> HardwareSpec:
    return hardware_from_dict(read_structured(path), where=path.name)


@lru_cache(maxsize=64)
def _load_engine_file(path: Path, stamp: tuple[int, int]) -> EngineSpec:
    return engine_from_dict(engine_data(path), where=path.name)


@lru_cache(maxsize=64)
def _engine_file_data(path: Path, stamp: tuple[int, int]) -> object:
    """One engine file parsed, once per (file, stamp): a parent is read once for all the specs that extend it."""
    return read_structured(path)


def engine_data(path: Path, _seen: tuple = ()) -> dict:
    """An engine spec file's data with the specs it ``extends`` merged in (``dsdsim.specs.engine``): the parent is
    looked up by name beside the file, then in the catalog."""
    from dsdsim.specs.engine import merge_engine_data

    data = copy.deepcopy(_engine_file_data(path, _stamp(path)))
    if not isinstance(data, dict):
        raise SpecError(f"{path.name}: an engine spec is a mapping of fields")
    parent = data.get("extends")
    if parent is None:
        return data
    if path in _seen:
        raise SpecError(f"{path.name}: 'extends' loops back to itself ({' -> '.join(p.name for p in _seen)})")
    return merge_engine_data(engine_data(_parent_path(path, parent), (*_seen, path)), data)


def _parent_path(path: Path, parent: object) -> Path:
    """The spec an engine file ``extends``: beside the file, else in the catalog."""
    here = path.parent / f"{parent}{path.suffix}"
    return here if here.is_file() else _real(_resolve("engine_specs", str(parent), "engine"))


def engine_chain(path: Path) -> list[Path]:
    """The file and the files it extends, the file first (where a term is written when it is fitted)."""
    chain = [path]
    while True:
        data = _engine_file_data(chain[-1], _stamp(chain[-1]))
        parent = data.get("extends") if isinstance(data, dict) else None
        if parent is None:
            return chain
        chain.append(_parent_path(chain[-1], parent))


def _engine_files() -> tuple[tuple[str, Path], ...]:
    """(name, file) of every engine spec in the catalog: the key under which name resolution is remembered. It
    changes as the catalog's file index does (another DSDSIM_SPECS_DIRS, add_specs_dir); the spec a name resolves
    to is still read again when its file is rewritten (load_engine checks the file's stamp)."""
    return tuple(sorted(_names("engine_specs").items()))


@lru_cache(maxsize=64)
def _engines_of_files(family: str, files: tuple) -> list[tuple[str, SimpleNamespace]]:
    """(stem, an object with ``name`` and ``versions``) per spec of ``family``; read from each file's head where
    it states both (a shipped spec does, first), else from the whole spec."""
    from dsdsim.specs.engine import parse_version

    out = []
    for stem, path in files:
        head = _engine_head(_real(path), _stamp(path))
        if head is None:
            spec = _engine_or_warning(path)
            if spec is None:
                continue
            head = SimpleNamespace(name=spec.name, versions=spec.versions)
        if head.name == family and head.versions is not None:
            out.append((stem, head))
    return sorted(out, key=lambda s: parse_version(s[1].versions.first))


_HEAD_KEYS = ("extends", "name", "versions")


@lru_cache(maxsize=64)
def _engine_head(path: Path, stamp: tuple[int, int]) -> Optional[SimpleNamespace]:
    """``name`` and ``versions`` from the lines before the first other top-level field (parsing only those:
    resolving ``vllm`` must not parse every spec); None where the head does not settle them (a spec that
    extends another and inherits its range, a JSON file, an unreadable head)."""
    if path.suffix.lower() not in (".yaml", ".yml"):
        return None
    try:       # a shipped spec: its whole data pre-parsed (dsdsim.specs.io.PARSED), no YAML to read
        data = pre_parsed(path, path.read_bytes().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError):
        data = None
    if data is not None:
        return _head_of(data)
    lines = []
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                key = line.split(":", 1)[0]
                if line[:1].isalpha() and key not in _HEAD_KEYS:
                    break
                lines.append(line)
        data = parse_yaml("".join(lines), path.name)
    except (OSError, UnicodeDecodeError, SpecError):
        return None
    return _head_of(data)


def _head_of(data) -> Optional[SimpleNamespace]:
    """``name`` and ``versions`` of an engine spec's data (None where they are not settled there: see above)."""
    from dsdsim.specs.engine import VersionRange

    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    if "versions" not in data:
        return None if "extends" in data else SimpleNamespace(name=data["name"], versions=None)
    try:
        return SimpleNamespace(name=data["name"], versions=VersionRange(**data["versions"]))
    except Exception:          # a malformed range fails with its own message when the spec is loaded
        return None


def engine_families() -> list[str]:
    """Engine names that have version ranges (``vllm``, ``sglang``, ``trtllm``, ...)."""
    names = set()
    for path in _names("engine_specs").values():
        spec = _engine_or_warning(path)
        if spec is not None and spec.versions is not None:
            names.add(spec.name)
    return sorted(names)


def _engine_or_warning(path: Path) -> Optional[EngineSpec]:
    """The engine spec in ``path``; None, with a ``SpecWarning``, for a user file that cannot be read (a shipped one
    fails): looking up another engine by its family must not fail on it."""
    try:
        return _load_engine_file(_real(path), _stamp(path))
    except DsdsimError as exc:
        if _real(path).parent == _real(shipped_dir("engine_specs")):
            raise
        warnings.warn(SpecWarning(_skipped(path, exc)), stacklevel=2)
        return None


def resolve_engine_name(name: str) -> str:
    """The engine spec file name for ``name``: a file name as it is; ``FAMILY`` its current release line (the range
    with no last release); ``FAMILY@VERSION`` the range covering VERSION. Remembered per catalog state. A VERSION
    past the newest release an open range was checked at is priced with that range, with a warning naming it."""
    text = str(name).strip()
    stem = _resolve_engine_name(text, _engine_files())
    family, at, version = text.partition("@")
    if at:
        spec = dict(_engines_of_files(family.strip(), _engine_files())).get(stem)
        if spec is not None and spec.versions.past_checked(version.strip()):
            v = spec.versions
            warnings.warn(SpecWarning(
                f"{family.strip()} {version.strip()} is past the newest release the {stem} spec ({v.label}) was "
                f"checked at ({v.checked_through}: {v.checked_source}); priced with it, which a later release may "
                "not match"), stacklevel=2)
    return stem


@lru_cache(maxsize=128)
def _resolve_engine_name(text: str, files: tuple) -> str:
    from dsdsim.specs.engine import parse_version

    family, at, version = text.partition("@")
    if not at:
        if text in _names("engine_specs"):
            return text
        specs = _engines_of_files(text, files)
        current = [stem for stem, spec in specs if spec.versions.last is None]
        if len(current) == 1:
            return current[0]
        if len(current) > 1:
            raise SpecError(f"engine {text!r} has {len(current)} open-ended version ranges ({', '.join(current)}); "
                            "give one of them by name")
        if specs:
            raise SpecError(f"engine {text!r} has no current release line; give a version ({text}@VERSION)")
        if os.sep not in text and not text.endswith((".yaml", ".yml", ".json")):
            from difflib import get_close_matches       # only for the error

            known = sorted(set(engine_families()) | set(_names("engine_specs")))
            close = get_close_matches(text.lower(), known, n=4, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SpecError(f"unknown engine {text!r}{hint} (run `dsdsim list engines`; ENGINE@VERSION picks a "
                            "release, e.g. vllm@0.10.1; or pass a path to a spec file)")
        return text
    family, version = family.strip(), version.strip()
    specs = _engines_of_files(family, files)
    if not specs:
        _resolve("engine_specs", family, "engine")        # an unknown engine: close matches
        raise SpecError(f"engine {family!r} has no version ranges; use --engine {family}")
    parse_version(version)
    hits = [stem for stem, spec in specs if spec.versions.covers(version)]
    if not hits:
        ranges = ", ".join(f"{spec.versions.label} ({stem})" for stem, spec in specs)
        raise SpecError(f"no {family} engine spec covers version {version}; the shipped ranges are {ranges}")
    return hits[-1]


def load_engine(name_or_path: "str | Path | EngineSpec") -> EngineSpec:
    """A shipped or user engine spec: a file name (``vllm-0.8-0.13``), an engine's current release line (``vllm``,
    ``sglang``, ``trtllm``, ``ideal``), ``ENGINE@VERSION`` (``vllm@0.10.1``), or a path to a YAML file."""
    if isinstance(name_or_path, EngineSpec):
        return name_or_path
    return engine_and_file(name_or_path)[0]


def engine_and_file(name_or_path: "str | Path") -> tuple[EngineSpec, Path]:
    """``load_engine`` and the file it read."""
    return _remembered("engine_specs", str(name_or_path).strip(), _read_engine)


def _read_engine(text: str) -> tuple[EngineSpec, Path]:
    path = _engine_path(text)
    spec = _load_engine_file(path, _stamp(path))
    family, at, version = text.partition("@")
    if at and "/" not in text:      # ENGINE@VERSION: the spec of the range, knowing the release asked for
        spec = spec.model_copy(update={"release": version.strip()})
    return spec, path


def _engine_path(text: str) -> Path:
    return _real(_resolve("engine_specs", resolve_engine_name(text) if "/" not in text and not text.endswith(
        (".yaml", ".yml", ".json")) else text, "engine"))


def engine_source(name_or_path: "str | Path | EngineSpec") -> Optional[str]:
    """The file an engine spec was read from (None for an object built in memory)."""
    if isinstance(name_or_path, EngineSpec):
        return None
    path = engine_and_file(name_or_path)[1]
    shipped = _real(shipped_dir("engine_specs"))
    return f"engine_specs/{path.name}" if path.parent == shipped else str(path)


def is_shipped_engine(name: str) -> bool:
    """A shipped spec file's name or a shipped engine's name (vllm, sglang, ...)."""
    d = shipped_dir("engine_specs")
    if any((d / f"{name}{s}").is_file() for s in _HW_SUFFIXES):
        return True
    return any(_load_engine_file(_real(p), _stamp(p)).name == name for p in d.glob("*.yaml"))


def _load_model_file(path: Path, name: str) -> ModelSpec:
    return _load_model_cached(path, name, _stamp(path))


@lru_cache(maxsize=128)
def _load_model_cached(path: Path, name: str, stamp: tuple[int, int]) -> ModelSpec:
    from dsdsim.specs.hf_config import model_from_hf_config

    data = read_structured(path)
    meta = data.get("_dsdsim", {}) if isinstance(data, dict) else {}
    source = meta.get("source", "") if isinstance(meta, dict) else ""
    if isinstance(source, list):
        source = " ; ".join(map(str, source))
    return model_from_hf_config(data, name=name, source=str(source))


def load_hardware(name_or_path: str | Path | HardwareSpec) -> HardwareSpec:
    """A shipped or user hardware spec by name (``h100-sxm``), or by path to a YAML/JSON file."""
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    return hardware_and_file(name_or_path)[0]


def hardware_and_file(name_or_path: "str | Path") -> tuple[HardwareSpec, Path]:
    """``load_hardware`` and the file it read."""
    return _remembered("hw_specs", str(name_or_path), _read_hardware)


def _read_hardware(text: str) -> tuple[HardwareSpec, Path]:
    path = _real(_resolve("hw_specs", text, "hardware"))
    return _load_hardware_file(path), path


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A shipped or user model by name (``llama-3.1-8b``), or by path to a Hugging Face config.json."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    return model_and_file(name_or_path)[0]


def model_and_file(name_or_path: "str | Path") -> tuple[ModelSpec, Path]:
    """``load_model`` and the file it read."""
    return _remembered("model_specs", str(name_or_path), _read_model)


def _read_model(text: str) -> tuple[ModelSpec, Path]:
    path = _real(_resolve("model_specs", text, "model"))
    name = path.parent.name if path.name == "config.json" else path.stem
    return _load_model_file(path, name), path


def iter_models(names: Optional[Iterable[str]] = None) -> Iterable[ModelSpec]:
    """The models ``names`` (all known ones by default). Listing them all, a user file that cannot be read is
    skipped with a ``SpecWarning`` naming it and its error; a name asked for fails with that error."""
    return _iter_specs("model_specs", load_model, names, model_names)


def iter_hardware(names: Optional[Iterable[str]] = None) -> Iterable[HardwareSpec]:
    """The accelerators ``names`` (all known ones by default), skipping unreadable user files as ``iter_models``."""
    return _iter_specs("hw_specs", load_hardware, names, hardware_names)


def iter_engines(names: Optional[Iterable[str]] = None) -> Iterable[tuple[str, EngineSpec]]:
    """(name, spec) of the engine specs ``names`` (all known ones by default), skipping unreadable user files as
    ``iter_models``."""
    return _iter_specs("engine_specs", load_engine, names, engine_names, keep_names=True)


def _iter_specs(kind: str, load, names, all_names, keep_names: bool = False):
    for n in all_names() if not names else names:
        try:
            spec = load(n)
        except DsdsimError as exc:
            user_file = user_spec_file(kind, n) if not names else None
            if user_file is None:
                raise
            warnings.warn(SpecWarning(_skipped(user_file, exc)), stacklevel=2)
            continue
        yield (n, spec) if keep_names else spec
