"""The public measurement corpus (``measurements/``): schema, evaluation against predictions, display.

``dsdsim.accuracy(...)`` (``dsdsim.corpus.evaluate.accuracy``) is the entry point.
"""
