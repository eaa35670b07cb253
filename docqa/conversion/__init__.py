"""Reading files into text sections and chunks, inside bounded conversion boxes.

Below components in the layers: ingestion jobs, sources and the web page reader all convert files through it.
"""
