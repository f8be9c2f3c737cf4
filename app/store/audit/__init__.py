"""The audit stream: who called which operate/admin route, when, from where, with what answer."""
