"""The one place the course touches private JAX: binding gloo's transport to an address.

Why: with ``jax_cpu_collectives_implementation='gloo'``, gloo binds its TCP transport to whatever
this machine's host name resolves to, and JAX has no public option for that address. ``course
launch`` keeps every byte on 127.0.0.1, so it re-registers the CPU backend factory (before any JAX
operation) with gloo collectives made for that address, through ``jax._src`` names.

Tested on jax 0.10.0, 0.10.2, 0.12.0.1 and 0.12.1. On other versions the names may be gone:
``bind_gloo_to`` then raises ``RuntimeError`` with what to do. (Hosts that are network
namespaces, each with its own ``/etc/hosts``, need none of this: the host name already resolves
to the right address.)
"""

from __future__ import annotations

TESTED_JAX = ("0.10.0", "0.10.2", "0.12.0.1", "0.12.1")


def bind_gloo_to(host: str) -> None:
    """Make the CPU backend's gloo collectives bind to ``host``; call right after joining.

    Raises:
        RuntimeError: this JAX version lacks the private names used here.
    """
    import jax

    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax
        from jax.extend.backend import register_backend_factory

        def make_client():
            collectives = _jax.make_gloo_tcp_collectives(
                distributed_client=distributed.global_state.client, hostname=host
            )
            return xla_bridge.make_cpu_client(collectives=collectives)

        register_backend_factory("cpu", make_client, priority=0, fail_quietly=False)
    except (ImportError, AttributeError, TypeError) as exc:
        raise RuntimeError(
            f"cannot bind gloo to {host} on jax {jax.__version__} (tested on "
            f"{', '.join(TESTED_JAX)}): {exc}; install a tested jax version"
        ) from None
