"""Devices: logical CPU devices and meshes (``setup``), the compilation cache, and one process
of a multi-process run (``multiprocess``).

Modules: ``compile_cache``: the persistent compilation cache; ``multiprocess``: one process of a
multi-process run; ``setup``: logical CPU devices, the mesh and the seed's placements.
"""
