"""``course launch``: the command (``command``) and one process of it (``worker``).

Modules: ``command``: the command; ``jax_private``: the one touch of private JAX; ``worker``: one
process of it.
"""
