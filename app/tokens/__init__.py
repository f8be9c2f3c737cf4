"""Signed tokens, checked: the standalone verifier (``verify``) and the gate (``gate``)."""
