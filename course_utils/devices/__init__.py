"""Devices: logical CPU devices and meshes (``setup``), the compilation cache, and one process
of a multi-process run (``multiprocess``)."""
