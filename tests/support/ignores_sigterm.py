"""A child that ignores SIGTERM (run with -m): only SIGKILL ends it."""

import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
