"""Trainers: HCE (``rag_hier.training.hce``), DHR (``rag_hier.training.dhr``), SVDR (``rag_hier.training.svdr``)."""
