"""Finding handlers by path and preparing their typed input."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import stat
import sys
import types
import typing
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from journal import encode_value

from ..errors import HandlerNotFound

_by_path: dict[str, Callable[..., Any]] = {}
NO_INPUT = object()


def handler_path(fn: Callable[..., Any]) -> str:
    """The import path recorded in entry 0, so any process can load the handler again."""
    existing: str | None = getattr(fn, "__journal_path__", None)
    if existing:
        return existing
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", ""))
    if module in (None, "__main__") or module.startswith("_journal_file_"):
        path = f"{os.path.abspath(inspect.getfile(fn))}:{qualname}"
    else:
        path = f"{module}:{qualname}"
    return path


def is_handler_name(handler: str) -> bool:
    """A handler name (`summarize`), as opposed to a TARGET (`pkg.mod:fn`, `path/file.py:fn`)."""
    return ":" not in handler and "/" not in handler and os.sep not in handler


def register(fn: Callable[..., Any], path: str | None = None) -> str:
    path = path or handler_path(fn)
    _by_path[path] = fn
    return path


def load_handler(path: str) -> Callable[..., Any]:
    """Load `path/to/file.py:function` or `package.module:function`, checking it is `async def`."""
    if path in _by_path:
        return _by_path[path]
    target, sep, attr = path.rpartition(":")
    if not sep or not target or not attr:
        raise HandlerNotFound(
            f"handler {path!r} is not of the form path/to/file.py:function or package.module:function"
        )
    if target.endswith(".py") or os.sep in target:
        module = _load_file(target, path)
    else:
        _module_root_clash(target, path)
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
            if missing is not None and (target == missing or target.startswith(missing + ".")):
                raise HandlerNotFound(
                    f"cannot import module {target!r} for handler {path!r}: {exc}. Check the name, and that "
                    "the current directory or PYTHONPATH contains it"
                ) from None
            # The module was found, and raised while it was imported (a missing dependency too).
            raise _import_failed(path, _origin(target), exc) from exc
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise HandlerNotFound(f"{target!r} has no attribute {attr!r} (handler {path!r})")
    if not inspect.iscoroutinefunction(obj):
        raise HandlerNotFound(
            f"handler {path!r} is not an async function; define it as `async def {attr.split('.')[-1]}(ctx, input)`"
        )
    _check_arity(obj, path, attr.split(".")[-1])
    # File targets are recorded by absolute path so a process started elsewhere finds them.
    canonical = f"{os.path.abspath(target)}:{attr}" if module.__name__.startswith("_journal_file_") else path
    obj.__journal_path__ = canonical
    handler: Callable[..., Any] = obj
    _by_path[path] = _by_path[canonical] = handler
    return handler


_OWN_PACKAGES = frozenset({"journal", "runtime", "cli"})


def _check_arity(fn: Callable[..., Any], path: str | None, name: str) -> None:
    """A handler is called as fn(ctx) or fn(ctx, input), the Context first: refuse others
    before anything is journaled. (`path` None: the handler's own, worked out if it is refused.)"""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if not positional:
        raise HandlerNotFound(
            f"handler {path or handler_path(fn)!r} takes no parameters, but its first parameter must be the "
            f"Context, which every handler is called with: define it as `async def {name}(ctx: Context)` or "
            f"`async def {name}(ctx: Context, input)`")
    first = positional[0]
    try:
        hint = typing.get_type_hints(fn).get(first.name)
    except Exception:  # an annotation that does not resolve here: nothing to judge it by
        hint = None
    if hint is not None and not _may_be_context(hint):
        shown = type_text(hint)
        raise HandlerNotFound(
            f"handler {path or handler_path(fn)!r} takes `{first.name}: {shown}` first, but the first parameter "
            f"of a handler is always the Context (the input comes second): define it as "
            f"`async def {name}(ctx: Context, {first.name}: {shown})`")
    for args in ((None,), (None, None)):
        try:
            signature.bind(*args)
            return
        except TypeError:
            continue
    raise HandlerNotFound(
        f"handler {path or handler_path(fn)!r} takes parameters {signature}, but a handler is called with the "
        f"Context first and at most one input: define it as `async def {name}(ctx)` or "
        f"`async def {name}(ctx, input)`"
    )


def _may_be_context(hint: Any) -> bool:
    """Whether a parameter annotated `hint` may receive the Context (`Context`, a base or a
    subclass of it, `Any`, a TypeVar, a union with one of those)."""
    from ._context import Context

    if hint is Any or isinstance(hint, typing.TypeVar):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_may_be_context(arg) for arg in typing.get_args(hint))
    cls = origin or hint
    if not isinstance(cls, type):
        return True  # a form we cannot judge
    try:
        return issubclass(cls, Context) or issubclass(Context, cls)
    except TypeError:  # a protocol that is not runtime-checkable, say
        return True


def _own_name_clash(directory: str, path: str) -> None:
    """Refuse a handler whose directory holds a module named like one of journal's packages:
    Python finds journal's (already imported) first, so the handler's `import cli` would
    silently get journal's instead of the user's."""
    for name in sorted(_OWN_PACKAGES):
        ours_file = getattr(sys.modules.get(name), "__file__", None)
        if ours_file is None:
            continue  # not imported in this process: the handler's own module is what it gets
        for candidate in (os.path.join(directory, name + ".py"), os.path.join(directory, name, "__init__.py")):
            if os.path.isfile(candidate) and not os.path.samefile(candidate, ours_file):
                raise HandlerNotFound(
                    f"{candidate} beside handler {path!r} has the name of journal's own package {name!r}: "
                    f"`import {name}` in the handler would get journal's, not yours. Rename your module "
                    f"(for example to my_{name}.py) and its imports"
                )


def load_recorded(path: str) -> Callable[..., Any]:
    """Load the handler an invocation's record names, if this process may trust the record.

    Handlers are chosen by the process that runs them, never by the store: a record is
    data, and whoever could write it must not thereby choose what code this process
    imports. A handler this process registered or already loaded is used as is. Otherwise
    the recorded TARGET is imported only if it is an ordinary handler of this user's: a
    `.py` file owned by this user (or root) that nobody else can write, or a module that is
    neither in the standard library nor one of journal's own packages. Anything else
    needs the code named explicitly (`--handler TARGET`, or a handler passed to the engine).
    """
    if path in _by_path:
        return _by_path[path]
    check_recorded(path)
    return load_handler(path)


def check_recorded(path: str, named_by: str = "the journal names") -> None:
    """Raise `HandlerNotFound` unless `path`, a handler named by a record or a note (not by
    the user just now), is one `load_recorded` may import: see its rule."""
    target, sep, attr = path.rpartition(":")
    if sep and target and attr:
        if target.endswith(".py") or os.sep in target:
            _check_recorded_file(target, path, named_by)
        else:
            top = target.split(".", 1)[0]
            if top in sys.stdlib_module_names or top in _OWN_PACKAGES:
                raise HandlerNotFound(
                    f"{named_by} handler {path!r}, a module of "
                    + ("the standard library" if top in sys.stdlib_module_names else "journal itself")
                    + ", which is never a handler; it was not imported. If you meant to run this "
                    "invocation, name its code yourself with --handler path/to/file.py:function"
                )


def _module_root_clash(target: str, path: str) -> None:
    """For a `package.module` target found in the current directory, the same clash check
    as for a file's directory."""
    top = target.split(".", 1)[0]
    if top in _OWN_PACKAGES or top in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return  # importing it says what is wrong
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return
    root = os.path.dirname(spec.origin)
    if spec.submodule_search_locations:
        root = os.path.dirname(root)
    if os.path.realpath(root) == os.path.realpath(os.getcwd()):
        _own_name_clash(root, path)


def _check_recorded_file(target: str, path: str, named_by: str) -> None:
    refuse = f"{named_by} handler {path!r}, but "
    fix = "; it was not imported. If it is your code, name it yourself with --handler TARGET"
    if not os.path.isabs(target) or not target.endswith(".py"):
        raise HandlerNotFound(refuse + "a recorded file handler is an absolute path to a .py file" + fix)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise HandlerNotFound(
            f"{named_by} handler {path!r}, but {target} does not exist. If the file was moved or renamed, run "
            f"the invocation with the code at its new place: --handler NEWPATH.py:{path.rpartition(':')[2]}"
        ) from None
    except OSError:
        return  # load_handler says what is wrong with it
    if not stat.S_ISREG(st.st_mode):
        raise HandlerNotFound(refuse + f"{target} is not a regular file" + fix)
    if st.st_uid not in (os.getuid(), 0):
        raise HandlerNotFound(refuse + f"{target} belongs to another user (uid {st.st_uid})" + fix)
    if st.st_mode & 0o022:
        raise HandlerNotFound(refuse + f"{target} can be written by other users (mode {stat.S_IMODE(st.st_mode):o})"
                              + fix)


def type_text(tp: Any) -> str:
    """A type expression as its user wrote it, for messages: `Decision | bool`, with a class
    from a handler file named by that file (`approval.py:Decision`), never by the private
    module name the file was loaded under (`_journal_file_20546ef28fac.Decision`)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else type_text(a) for a in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is not None:
        name = type_text(origin) if isinstance(origin, type) else getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]" if args else name
    if tp is Any:
        return "Any"
    if tp is None or tp is type(None):
        return "None"
    if not isinstance(tp, type):
        return str(tp).replace("typing.", "")
    module = getattr(tp, "__module__", "")
    if module == "builtins":
        return tp.__qualname__
    if module.startswith("_journal_file_"):
        file = getattr(sys.modules.get(module), "__file__", None)
        return f"{os.path.basename(file)}:{tp.__qualname__}" if file else tp.__qualname__
    return f"{module}.{tp.__qualname__}"


def _load_file(target: str, path: str) -> Any:
    full = os.path.abspath(target)
    if not os.path.isfile(full):
        raise HandlerNotFound(f"handler file {target!r} does not exist (handler {path!r})")
    _own_name_clash(os.path.dirname(full), path)
    name = "_journal_file_" + hashlib.blake2b(full.encode(), digest_size=6).hexdigest()
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise HandlerNotFound(f"cannot load {target!r} as Python (handler {path!r})")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # Let the file import its neighbours, as `python file.py` would.
    directory = os.path.dirname(full)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the handler's own module: SyntaxError, NameError, a failed import, ...
        del sys.modules[name]
        raise _import_failed(path, full, exc) from exc
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_failed(path: str, file: str | None, exc: Exception) -> HandlerNotFound:
    """One line, the same from every command and process that loads the handler: what its
    module raised, and where in the user's file (the traceback stays on the exception's cause)."""
    where = ""
    if file is not None and not isinstance(exc, SyntaxError):  # (a SyntaxError says where itself)
        lines = [tb.tb_lineno for tb in _frames(exc.__traceback__) if tb.tb_frame.f_code.co_filename == file]
        where = f" (at {os.path.basename(file)}:{lines[-1]})" if lines else ""
    return HandlerNotFound(f"cannot load handler {path!r}: importing it raised {type(exc).__name__}: {exc}{where}")


def _origin(module: str) -> str | None:
    """The file of `module`, if it can be found without importing it again."""
    try:
        spec = importlib.util.find_spec(module)
    except Exception:  # its package raises on import too: no file to point at
        return None
    return spec.origin if spec is not None else None


def _frames(tb: types.TracebackType | None) -> list[types.TracebackType]:
    found = []
    while tb is not None:
        found.append(tb)
        tb = tb.tb_next
    return found


def input_type(fn: Callable[..., Any]) -> Any:
    """The annotated type of the handler's input parameter; `NO_INPUT` if it takes none."""
    try:
        return _input_types[fn]
    except (KeyError, TypeError):
        pass
    wanted = _input_type(fn)
    try:
        _input_types[fn] = wanted
    except TypeError:  # an unhashable callable: work it out each time
        pass
    return wanted


_input_types: weakref.WeakKeyDictionary[Callable[..., Any], Any] = weakref.WeakKeyDictionary()


def _input_type(fn: Callable[..., Any]) -> Any:
    # A handler passed to the engine as a function is checked here, on first use, as one
    # loaded from a TARGET is when it is loaded.
    _check_arity(fn, None, getattr(fn, "__name__", "handler"))
    params = list(inspect.signature(fn).parameters.values())
    if len(params) < 2:
        return NO_INPUT
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    return hints.get(params[1].name, Any)


def prepare_input(fn: Callable[..., Any], value: Any, *, lax: bool = False) -> tuple[msgspec.Raw, Any]:
    """Validate `value` against the handler's input annotation; return (raw bytes, typed value).

    `lax` accepts JSON-shaped data (strings for datetimes, lists for tuples), as from the CLI.
    Raises `ValueError` saying where and why the input does not fit.
    """
    wanted = input_type(fn)
    if wanted is NO_INPUT:
        if value is not None:
            raise ValueError(_no_input(fn))
        return encode_value(None), None
    try:
        typed = msgspec.convert(value, wanted, strict=not lax) if wanted is not Any else value
    except msgspec.ValidationError as exc:
        raise ValueError(
            f"the input does not fit handler {handler_path(fn)}'s input type "
            f"{type_text(wanted)}: {exc}"
        ) from None
    raw = encode_value(typed)
    return raw, decode_input(fn, raw)


def _no_input(fn: Callable[..., Any]) -> str:
    """The message for an input given to a handler that takes none: its one parameter is
    the Context, which may not be what its author meant."""
    name = getattr(fn, "__name__", "handler")
    params = list(inspect.signature(fn).parameters)
    if params and params[0] not in ("ctx", "context"):
        return (f"handler {handler_path(fn)} takes no input, but an input was given: its one parameter, "
                f"`{params[0]}`, receives the Context, which is always a handler's first parameter; to take an "
                f"input, define it as `async def {name}(ctx: Context, {params[0]})`")
    return (f"handler {handler_path(fn)} takes no input (only the Context), but an input was given; to take "
            f"one, define it as `async def {name}(ctx: Context, input)`")


def decode_input(fn: Callable[..., Any], raw: bytes) -> Any:
    wanted = input_type(fn)
    if wanted is NO_INPUT:
        return NO_INPUT
    from journal import decode_value

    return decode_value(raw, wanted)
