"""HTTP server: FastAPI app factory, authentication, routes, limits; served by gunicorn with uvicorn workers."""
