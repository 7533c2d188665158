"""The problems the series computes on: the seed's toy regression (part one and two), the
classification task of part three, and its stream (parts four and five).

Modules: ``classification``: part three's task and MLP; ``regression``: the seed's toy regression;
``stream``: the classification mixture drawn afresh every step, its held-out sample and its floor.
"""
