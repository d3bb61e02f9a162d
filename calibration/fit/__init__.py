"""Fitting the embedded matcher on the shared human-rated sets.

* :mod:`calibration.fit.matcher`: reads the sets, fits the models and thresholds, writes
  ``judge/data/matcher_params.json`` (``python -m calibration.fit.matcher``);
* :mod:`calibration.fit.evaluate`: out-of-fold and leave-one-set-out evaluation;
* :mod:`calibration.fit.multilingual`: the Chinese model and the similarity scale;
* :mod:`calibration.fit.lexicon`: builds the word lexicons the matcher ships
  (``python -m calibration.fit.lexicon``);
* :mod:`calibration.fit.embeddings`: the fit's embedding cache;
* :mod:`calibration.fit.types`: the types they share.
"""
