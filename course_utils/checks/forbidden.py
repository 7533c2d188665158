"""What a student's function is, calls or runs, for the checks that forbid something: the
package's own kernels (however wrapped, or run inside a jitted program) and the functions an
exercise asks the student not to call (the function is one, wraps one, or names one in its code,
binds one as a default argument or in a closure, is a method or a callable instance that does,
or fetches one from a course module with
``importlib.import_module``, ``__import__`` or ``getattr`` and the name written out).

Feedback on honest slips, not a lock: the student's code runs in the same kernel as the check and
could change anything there, so a function looked up only at call time (a name built from pieces,
an interpreter hook) is not seen. Grading rests on the check's verdict in the grader's own kernel
(``course check-submission`` runs the instructor's checks on the solution cells) and on reading
the solution cells, not on these refusals."""

from __future__ import annotations

import dis
import sys
import traceback
import types

from course_utils.collectives.kernels import Kernel

# the package's kernel builders: a student's kernel must not be, wrap or call what they build
PACKAGE_KERNELS = ("all_reduce_gradient", "reduce_scatter_gradient", "all_gather_shards",
                   "block_collective", "hierarchical_all_reduce")


def package_kernel_in(fn) -> bool:
    """Whether ``fn`` is, or wraps (``jax.jit``, ``functools.wraps``/``partial``), a package kernel
    or a function defined inside a kernel builder."""
    for _ in range(20):
        if fn is None:
            return False
        if isinstance(fn, Kernel):
            return True
        qualname = getattr(getattr(fn, "__code__", None), "co_qualname", "")
        if qualname.split(".<locals>")[0] in PACKAGE_KERNELS:
            return True
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
    return False


def kernel_reached(fn) -> bool:
    """Whether ``fn`` is, wraps, or names (in its globals, defaults or closure cells) a kernel the
    package built (``package_kernel_in``): a ``Kernel``, or its ``.jitted`` program."""
    reached = [fn, *_named_objects(fn)] if hasattr(fn, "__code__") else [fn]
    return any(package_kernel_in(obj) for obj in reached)


def runs_package_kernel(jitted, args: tuple) -> bool:
    """Whether the program of ``jitted`` was traced through a package kernel's body (its source
    locations name ``reduce_scatter_gradient.<locals>.kernel`` and the like)."""
    try:
        text = jitted.lower(*args).as_text(debug_info=True)
    except Exception:  # noqa: BLE001 - no debug text: the other checks still judge the kernel
        return False
    return any(f'"{builder}.<locals>' in text for builder in PACKAGE_KERNELS)


def through_package_kernel(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the package's kernels (a student's code called one)."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(f.filename.endswith("kernels.py") and "collectives" in f.filename
               and f.name in ("__call__", "place", "lower", "kernel", "check") for f in frames)


def _code_objects(code: types.CodeType):
    """``code`` and every code object nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def read_globals(fn) -> dict:
    """The notebook's names ``fn``'s code (nested code too) reads as globals, with what they hold;
    an attribute's name is read on its module (``jax.lax.top_k`` reads no global ``top_k``)."""
    code, scope = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    if code is None:
        return {}
    read = [i.argval for c in _code_objects(code) for i in dis.get_instructions(c)
            if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    return {n: scope[n] for n in dict.fromkeys(read) if n in scope}


def _named_objects(fn) -> list:
    """What the names in ``fn``'s code (nested code too) refer to: the globals it reads (builtins
    excluded), the cells of its closure, its default and keyword-only default arguments (``def
    f(..., _f=bucketed_step_time)``), and what the code's names, and the names its strings spell,
    name on a module among those or on a course module its strings name
    (``cu.overlapped_backward``, ``cu.overlap_runs.modelled``, ``getattr(cu, "modelled_time")``,
    ``importlib.import_module("course_utils.models.latency").bucketed_step_time``)."""
    codes = list(_code_objects(fn.__code__))
    strings = [c for code in codes for c in code.co_consts if isinstance(c, str)]
    own = [n for code in codes for n in code.co_names]
    found = list(read_globals(fn).values())
    # on a module, a name written as a string counts too (getattr(module, "name"))
    names = list(dict.fromkeys(own + [s for s in strings if s.isidentifier()]))
    found += [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    found += [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
    modules = [m for m in found if isinstance(m, types.ModuleType)] + _imported(fn.__code__)
    modules += [sys.modules[s] for s in dict.fromkeys(strings)  # import_module, __import__
                if s.split(".")[0] == "course_utils" and s in sys.modules]
    seen = {id(m) for m in modules}
    while modules:  # vars(), not getattr: a module's lazy __getattr__ is not run
        space = vars(modules.pop())
        named = [space[n] if n in space else _lazy(space, n) for n in names
                 if n in space or _lazy(space, n) is not None]
        found += named
        modules += [v for v in named if isinstance(v, types.ModuleType) and id(v) not in seen]
        seen.update(id(v) for v in modules)
    # one level into the containers those names hold: a copy kept in a dict and called through it
    found += [v for obj in found if isinstance(obj, (dict, list, tuple, set))
              for v in (obj.values() if isinstance(obj, dict) else obj) if callable(v)]
    return found


def _imported(code: types.CodeType) -> list:
    """The course's modules ``code`` imports inside itself (``from course_utils import x`` in a
    function's body), already loaded: a name taken from them is named as much as a global."""
    wanted = {i.argval for c in _code_objects(code) for i in dis.get_instructions(c)
              if i.opname == "IMPORT_NAME" and str(i.argval).split(".")[0] == "course_utils"}
    return [sys.modules[m] for m in sorted(wanted) if m in sys.modules]


def _lazy(space: dict, name: str):
    """``name`` of the package's lazy top-level API when ``space`` is the package's namespace and
    the name's module is loaded, else ``None`` (nothing is imported): a name of ``_API``, or a
    module namespace of ``_NAMESPACES`` (``cu.diloco_sweep``), the module itself."""
    if space.get("__name__") != "course_utils":
        return None
    if (namespace := space.get("_NAMESPACES", {}).get(name)) is not None:
        return sys.modules.get(f"course_utils.{namespace}")
    where = space.get("_API", {}).get(name)
    module = sys.modules.get(f"course_utils.{where[0]}") if where else None
    return vars(module).get(where[1]) if module is not None else None


def public_name(fn) -> str:
    """How the notebooks spell the package's ``fn`` after ``cu.``: its facade name
    (``modelled_time``), or its module namespace's (``overlap_runs.modelled``); else its own."""
    import course_utils

    home, own = getattr(fn, "__module__", ""), getattr(fn, "__name__", repr(fn))
    named = [public for public, (module, attribute) in course_utils._API.items()
             if (f"course_utils.{module}", attribute) == (home, own)]
    spaces = [f"{public}.{own}" for public, module in course_utils._NAMESPACES.items()
              if f"course_utils.{module}" == home]
    return (named + spaces + [own])[0]


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


def uses_forbidden(fn, forbidden, *, depth: int = 6) -> str | None:
    """The name of a forbidden function that ``fn`` is or calls, else ``None``.

    ``forbidden`` holds functions, each caught as itself or as any function whose code has the
    same shape (``_shape``: a copy, one recompiled from its source, a ``functools.wraps``/
    ``partial``/``jax.jit`` wrapper), and names of the notebook's own functions, caught when the
    function of that name was defined in another cell than ``fn`` (a student's own helper of the
    same name, in the same cell, is theirs). Every check module's own functions are forbidden
    too (``check_answer_name``). The names ``fn``'s code uses are resolved through its globals
    and closure, and the functions it reaches that were defined beside it (same globals: the
    notebook) are followed, ``depth`` calls deep; what else it reaches is ``_named_objects``'
    (defaults, closure cells, course modules named in strings)."""
    banned = [f for f in forbidden if not isinstance(f, str)]
    codes = {_shape(f.__code__): f.__name__ for f in banned if hasattr(f, "__code__")}
    names = {f for f in forbidden if isinstance(f, str)}
    home = getattr(getattr(_as_function(fn), "__code__", None), "co_filename", None)
    # the namespace of the student's code
    student = getattr(_as_function(_unwrapped(fn)), "__globals__", None)
    seen: set[int] = set()

    def search(obj, level: int) -> str | None:
        if not any(obj is f for f in banned) and (methods := _class_functions(obj)):
            # a bound method or a callable instance: what its class and the instance hold
            hit = next((hit for f in methods if (hit := search(f, level + 1)) is not None),
                       None)
            if hit is not None:
                return hit
        for _ in range(10):  # unwrap jax.jit, functools.wraps and partial
            if id(obj) in seen:
                return None
            seen.add(id(obj))
            code = getattr(obj, "__code__", None)
            if (hit := next((f for f in banned if obj is f), None)) is not None:
                return getattr(hit, "__name__", repr(hit))
            if code is not None and (answer := check_answer_name(obj)) is not None:
                return answer  # a check's own answer is every exercise's forbidden function
            if code is not None and (copied := codes.get(_shape(code))) is not None:
                return copied  # the package's name, not the copy's
            if (code is not None and code.co_name in names and code.co_filename != home
                    and getattr(obj, "__globals__", None) is student):
                return code.co_name
            inner = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)
            if inner is None:
                break
            obj = inner
        if not isinstance(obj, types.FunctionType) or level > depth:
            return None
        if obj.__globals__ is not student:
            return None  # library code (NumPy, JAX, the course's other functions) is not followed
        for named in _named_objects(obj):
            if (hit := search(named, level + 1)) is not None:
                return hit
        return None

    return search(fn, 0)


def check_answer_name(fn) -> str | None:
    """``checks.<module>.<name>`` when ``fn`` is a function of a check module (a check's own
    reference answer, reachable from the ``checks`` name every page imports), else ``None``.

    Examples:
        >>> from course_utils.checks import local_sgd
        >>> check_answer_name(local_sgd._right), check_answer_name(len)
        ('checks.local_sgd._right', None)
    """
    module = getattr(fn, "__module__", None) or ""
    if not module.startswith("course_utils.checks."):
        return None
    return f"checks.{module.removeprefix('course_utils.checks.')}.{fn.__name__}"


def _shape(code: types.CodeType) -> tuple:
    """What a code object computes, without where it came from: its instructions (method loads
    and attribute loads alike, jump targets left out), names and constants, nested code the
    same way; not its name, file or line. A copy recompiled from the package's source
    (``exec(inspect.getsource(...))``) or a code object renamed has the shape of the original."""
    import dis

    skip = {"CACHE", "NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "KW_NAMES", "PUSH_NULL"}
    same = {"LOAD_METHOD": "LOAD_ATTR", "CALL_METHOD": "CALL"}
    jumps = set(dis.hasjrel) | set(dis.hasjabs)
    steps = tuple((same.get(i.opname, i.opname), None if i.opcode in jumps else repr(i.argval))
                  for i in dis.get_instructions(code) if i.opname not in skip
                  and not isinstance(i.argval, types.CodeType))
    consts = tuple(_shape(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return steps, code.co_varnames, consts


def _class_functions(obj) -> list:
    """For a bound method (its function first) or an instance of a class with a ``__call__`` of
    its own (that first), what its code can reach through ``self``: the functions its class
    defines (static and class methods and properties unwrapped, other callables kept) and the
    callables the instance holds; for anything else, ``[]``."""
    if isinstance(obj, types.MethodType):
        first, instance = [obj.__func__], obj.__self__
    elif not isinstance(obj, (types.FunctionType, type)) and isinstance(
            next((vars(k)["__call__"] for k in type(obj).__mro__ if "__call__" in vars(k)),
                 None), types.FunctionType):  # a __call__ written in Python, not jit's
        first, instance = [], obj
    else:
        return []
    held = [v for k in type(instance).__mro__[:-1] for v in vars(k).values()]
    held += list(getattr(instance, "__dict__", {}).values())
    own = []
    for v in held:
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        parts = [v.fget, v.fset, v.fdel] if isinstance(v, property) else [v]
        own += [f for f in parts if callable(f) and not isinstance(f, type)]
    return first + sorted(own, key=lambda f: getattr(f, "__name__", "") != "__call__")


def _as_function(obj):
    """The Python function that calling ``obj`` runs first (``_class_functions``), else
    ``obj``."""
    return next(iter(_class_functions(obj)), obj)


def _unwrapped(fn):
    for _ in range(10):
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        if inner is None:
            return fn
        fn = inner
    return fn
