"""Figures: data as plain dicts and their validator (``data``), one renderer (``plot``)."""
