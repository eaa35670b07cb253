"""Tenants, users, groups and hashed API keys: who may call the server and what they may read."""
