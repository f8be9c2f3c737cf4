"""Builds (issue 36): which code may run a pinned run, moving runs between builds, and
what each build still has to do before it can be stopped."""
