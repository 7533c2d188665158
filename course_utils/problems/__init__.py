"""The problems the series computes on: the seed's toy regression (part one and two) and the
classification task of part three."""
