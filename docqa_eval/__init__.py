"""Evaluation helpers that stay in the checkout: multi-hop sample loaders (`datasets`, reading ../shared/data)
and short-answer scores (`qa_metrics`). Used by bench/ and tests; not part of the installed docqa package, so
nothing a deployer installs reads data from outside its own install.
"""
