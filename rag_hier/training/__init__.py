"""Trainers, one per method, on sentence-transformers' trainer where it applies.

* HCE: ``rag_hier.training.hce`` · EHI: ``rag_hier.training.ehi`` · DHR: ``rag_hier.training.dhr`` ·
  SVDR: ``rag_hier.training.svdr`` · Tied-Atomic and DSI-atomic: ``rag_hier.training.tied_atomic``.
* Shared parts: ``rag_hier.training.corpus`` (:class:`~rag_hier.training.corpus.TrainingCorpus`, what every
  trainer accepts as a corpus) and ``rag_hier._compat.st_training`` (sentence-transformers' training classes,
  with one error for missing training extras).
"""
