"""Healthcheck of an Airflow job process (dag-processor, triggerer): is its heartbeat fresh?

Airflow's own `airflow jobs check` does the same query but first imports all of
Airflow, which takes 10-50 s on a busy host: longer than a healthcheck should run,
so compose kept such services "starting". This asks PostgreSQL directly (psycopg2 is
in the image) for a running job of the type on this host, heartbeating within
MAX_AGE seconds. Exit 0 healthy, 1 not.

    python3 healthcheck.py DagProcessorJob|TriggererJob
"""

from __future__ import annotations

import os
import socket
import sys

MAX_AGE = int(os.environ.get("PITH_HEALTHCHECK_MAX_AGE", "120"))


def main(job_type: str) -> int:
    import psycopg2

    url = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    scheme, _, rest = url.partition("://")
    dsn = "postgresql://" + rest if scheme.startswith("postgresql") else url
    with psycopg2.connect(dsn, connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM job WHERE job_type = %s AND hostname = %s AND state = 'running' "
            "AND latest_heartbeat > now() - make_interval(secs => %s)",
            (job_type, socket.getfqdn(), MAX_AGE),
        )
        row = cur.fetchone()
    alive = bool(row and row[0])
    print(f"{job_type} on {socket.getfqdn()}: {'alive' if alive else 'no recent heartbeat'}")
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
