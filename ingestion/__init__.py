"""Document ingestion: convert, clean, chunk, embed and write, synchronously or through a Celery queue."""
