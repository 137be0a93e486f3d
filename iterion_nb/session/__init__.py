"""The composition root: a store, a backend, and the runs started with them.

::

    import iterion_nb as it

    wf = it.compile(source)
    session = it.Session(".iterion", backend=my_backend)   # DuckDB under .iterion/
    run = await session.start(wf, vars={"topic": "tea"})   # returns at once
    q = await run.next_question(timeout=5)
    await run.answer(q.id, "formal")                       # {"queued": ..., "resumed": ...}
    await run.wait()
    run.status, run.outputs

Modules: ``core`` (Session: start, resume, parked runs), ``handle``
(RunHandle), ``service`` (the REST view), ``leases`` (the heartbeat),
``launch`` (backends and scenarios a run is launched with).
"""

from __future__ import annotations

from iterion_nb.runtime.answers import AnswerOutcome
from iterion_nb.session.core import Session
from iterion_nb.session.handle import RunHandle
from iterion_nb.session.service import SessionService

__all__ = ["AnswerOutcome", "RunHandle", "Session", "SessionService"]
