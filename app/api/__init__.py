"""The HTTP API: routes, problem+json errors, limits."""
