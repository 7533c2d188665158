"""Figures: data as plain dicts and their validator (``data``), one renderer (``plot``).

Modules: ``builders``: figure data for what the steps measure and model; ``data``: figure data as
plain dicts and their validator; ``describe``: a figure's alt text; ``labels``: the words and
numbers a figure writes; ``plot``: the one renderer; ``streaming``: step 22's figures.
"""
