"""The reconciler: what keeps runs honest when nobody else is there to.

Every worker runs one (and ``leasehold reconciler`` alone): expired leases, runs nobody
claimed in time and each queue's outbox (:mod:`app.reconciler.reconciler`), and due
schedule fires (:mod:`app.reconciler.schedule_pass`). Nothing is imported here: a
worker imports its reconciler only once its first claim is answered.
"""
