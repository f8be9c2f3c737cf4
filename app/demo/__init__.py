"""Demo handlers used by the quick start and the tests (LEASEHOLD_HANDLERS=app.demo)."""

from app.demo import agent as agent
from app.demo import checkout as checkout
from app.demo import handlers as handlers
from app.demo import research as research
from app.demo import waits as waits
