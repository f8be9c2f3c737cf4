"""The only code that talks to Redis: key layout, scripts, and typed transitions."""
