"""Document stores: the embedded default (SQLite + in-memory index) and the Elasticsearch factory."""
