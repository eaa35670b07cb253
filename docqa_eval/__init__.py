"""Evaluation helpers that stay in the checkout: multi-hop sample loaders (`datasets`, reading ../shared/data)
and short-answer scores (`qa_metrics`, re-exported from the installed `docqa.evaluation.metrics`). Used by
bench/ and tests; the loaders are not part of the installed docqa package, so
nothing a deployer installs reads data from outside its own install.
"""
