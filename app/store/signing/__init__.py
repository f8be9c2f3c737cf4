"""Token signing keys: Ed25519 keys kept in Redis, rotated, published as a JWKS."""
