"""The Lua machinery: loading and calling scripts by SHA, splicing includes, typed bindings."""
