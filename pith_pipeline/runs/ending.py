"""How a `Run` ends when its block ends without error: the `Ending` interface.

Its own light module (no publishing code imported), so `runs.steps`, which the DAG
files import while the scheduler parses them, can define an Airflow chunk's ending
without loading the publisher. The endings a run offers are in `runs.run`.
"""

from __future__ import annotations

from typing import Any


class Ending:
    """What a run does when its block ends without error (see `runs.run`).

    `holds_index`: the run takes the index lease with its paper lease, at its start,
    and keeps both to its end (a rebuild rewrites bundles and then every index, with
    no writer in between); otherwise the paper lease is released first and the index
    lease, if the ending needs one, is taken by `finish`.
    `indexes_rows`: the run keeps the index rows of the bundles it writes (its ending
    indexes them); otherwise none are made.
    `appends_log`: the run makes events, which go into the store's transparency log,
    so it settles its log key before publishing (`tlog.run_log.prepare_run_log`);
    otherwise it needs no log key, and its pages name the store's own log, if any.
    """

    holds_index = False
    indexes_rows = True
    appends_log = True

    def finish(self, run: Any) -> None:
        """End `run` (a `runs.run.Run`); what it produced goes in `run.result`."""
        raise NotImplementedError
