"""The persistent compilation cache that ``use_cpu_devices`` turns on: a second process loads
what the first compiled; the user's own cache and the off switch are respected."""

import json
import os
import subprocess
import sys
import textwrap

from course_utils.devices.compile_cache import default_cache_dir

# compile one shard-mapped psum in a fresh process; print the cache folder and JAX's cache hits
SNIPPET = textwrap.dedent(
    """
    import json, jax, numpy as np
    from course_utils import block_collective, data_mesh, use_cpu_devices
    from course_utils.devices.compile_cache import use_compilation_cache
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
    use_cpu_devices(2)
    blocks = np.arange(8.0, dtype=np.float32).reshape(2, 4)
    out = block_collective(data_mesh(), "all_reduce")(blocks)
    folder = use_compilation_cache()
    print(json.dumps({"folder": folder and str(folder), "hits": len(hits),
                      "sum": np.asarray(out).tolist()}))
    """
)


def _run(env_changes: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", "COURSE_COMPILATION_CACHE")}
    env.update(env_changes)
    done = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _entries(folder) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name != ".lockfile")


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    first = _run({"XDG_CACHE_HOME": str(tmp_path)})
    folder = tmp_path / "course-distributed-03" / "jax"
    assert first["folder"] == str(folder)
    stored = _entries(folder)
    assert stored, "the first process stored nothing"
    second = _run({"XDG_CACHE_HOME": str(tmp_path)})
    assert second["hits"] >= 1 and first["hits"] == 0
    assert _entries(folder) == stored  # loaded, not compiled and stored again
    assert second["sum"] == first["sum"] == [[4.0, 6.0, 8.0, 10.0]] * 2


def test_the_off_switch_stores_nothing(tmp_path):
    result = _run({"XDG_CACHE_HOME": str(tmp_path), "COURSE_COMPILATION_CACHE": "off"})
    assert result["folder"] is None
    assert not (tmp_path / "course-distributed-03").exists()


def test_a_cache_of_your_own_is_left_as_it_is(tmp_path):
    own = tmp_path / "mine"
    result = _run({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "JAX_COMPILATION_CACHE_DIR": str(own)})
    assert result["folder"] == str(own)
    assert not (tmp_path / "xdg").exists()


def test_the_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "course-distributed-03" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir().parts[-3:] == (".cache", "course-distributed-03", "jax")
