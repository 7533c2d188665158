"""The problems the series computes on: the seed's toy regression (part one and two) and the
classification task of part three.

Modules: ``classification``: part three's task and MLP; ``regression``: the seed's toy regression.
"""
