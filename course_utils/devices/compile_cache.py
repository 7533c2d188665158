"""JAX's persistent compilation cache, on for the course: compiled programs kept on disk.

XLA compiles every jitted function once per process. JAX can also keep the compiled program on
disk, keyed by the program, the jaxlib version, the devices, ``XLA_FLAGS`` and the compiler
options, and load it in a later process instead of compiling again (the persistent compilation
cache, https://docs.jax.dev/en/latest/persistent_compilation_cache.html). For this course that
means a second Run All of a notebook, or a later notebook that compiles the same program, skips
most of the compilation; what it loads is the program XLA compiled before, so the numbers are the
same. JAX does not store programs with host callbacks (``jax.debug.print``), and the multi-process
runs (``course launch``, ``course cluster``) do not use this cache.

``use_cpu_devices`` calls ``use_compilation_cache``. The folder is
``$XDG_CACHE_HOME/course-distributed-03/jax`` (``~/.cache/…`` without ``XDG_CACHE_HOME``); a
cache you configured yourself (``JAX_COMPILATION_CACHE_DIR``) is left as it is, with its own
settings; and ``COURSE_COMPILATION_CACHE=off`` turns the course's cache off (to time cold
compiles). Deleting the folder is always safe: it only costs the compilations again.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

OFF_VARIABLE = "COURSE_COMPILATION_CACHE"
MAX_BYTES = 512 * 2**20  # with a size limit, JAX evicts old entries and locks the folder


def default_cache_dir() -> Path:
    """The course's cache folder: ``$XDG_CACHE_HOME/course-distributed-03/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "course-distributed-03" / "jax"


def use_compilation_cache() -> Path | None:
    """Turn on JAX's persistent compilation cache in ``default_cache_dir()``; call it before the
    first compilation.

    Every compiled program is stored, however quick its compilation (JAX's default keeps only
    those that took a second or more, and few if any of the course's do). With a size limit set, JAX
    takes an exclusive file lock for every read and write, so processes that run at once (two
    notebooks, the test workers) never read a half-written entry. A process killed in the middle
    of a write can still leave a broken entry; JAX then warns and compiles again, and deleting the
    folder clears it.

    Returns:
        The folder in use (the course's, or the one you configured), or ``None`` when
        ``COURSE_COMPILATION_CACHE`` is ``off`` (or ``0``): the course then sets nothing, and a
        cache you configured yourself stays on.
    """
    if os.environ.get(OFF_VARIABLE, "").strip().lower() in ("off", "0", "false", "no"):
        return None
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # the user's own cache and its settings
        return Path(configured)
    folder = default_cache_dir()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # any size, no override
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return folder
