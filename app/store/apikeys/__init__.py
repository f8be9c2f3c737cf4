"""Stored API keys: created, looked up by the digest of their secret, rotated, revoked."""
