"""Part three's training: one step per strategy (``strategies``) and ``train``, one run."""
