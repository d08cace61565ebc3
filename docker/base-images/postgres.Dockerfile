# No-registry stand-in for the official postgres image, from Debian's PostgreSQL 15 packages.
# Same contract: POSTGRES_USER/PASSWORD/DB create the database on first start,
# data in /var/lib/postgresql/data, pg_isready on PATH.
# The Debian base image: docker/local_images.py passes its content-keyed tag.
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]
