"""Alembic scripts, installed as `docqa.migrations` so an installed docqa (wheel or editable) can locate them.

A regular package rather than a bare folder: setuptools' editable finder only maps packages with an
`__init__.py`, and `importlib.resources` then yields a plain directory that Alembic can read.
"""
