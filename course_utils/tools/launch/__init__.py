"""``course launch``: the command (``command``) and one process of it (``worker``)."""
