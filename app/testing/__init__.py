"""Test your handlers: replay recorded runs against new code, and run handlers on a test stack.

The public surface for users' own CI (``__all__`` is exactly it;
``tests/testing/test_surface.py`` holds it):

* :func:`replay` / :func:`replay_async` and :class:`ReplayReport`
  (:mod:`app.testing.replay`): re-execute an exported run history
  (``leasehold runs export``) against the handler code you are about to deploy, with no
  side effects, and get the drift a live wake would park the run with.
* :func:`load_history`: read and check a history document (``ValueError`` if bad).
* :class:`TestStack` (:mod:`app.testing.stack`): run handlers in-process on a private
  Redis running the real scripts, with a virtual clock: sleeps, signal timeouts and
  delayed starts come when you ``advance`` the clock, not when the wall clock gets there.
"""

from app.testing.replay import (
    ReplayReport,
    ReplayUnsupported,
    load_history,
    replay,
    replay_async,
)
from app.testing.stack import TestStack

__all__ = [
    "ReplayReport",
    "ReplayUnsupported",
    "TestStack",
    "load_history",
    "replay",
    "replay_async",
]
