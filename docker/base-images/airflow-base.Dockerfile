# No-registry stand-in for apache/airflow:3.3.2-python3.11, built from Debian and PyPI wheels
# (docker/local_images.py). It keeps the layout docker/Dockerfile relies on: user airflow
# (uid 50000, gid 0), Python 3.11, /entrypoint, AIRFLOW_HOME=/opt/airflow, pip usable
# by that user, and a constraints file (/opt/ci/constraints.txt) like Airflow's.
# Build context: a directory with wheels/ (pip download on the host) and this folder's files
# (docker/local_images.py makes it).
# The Debian base image: docker/local_images.py passes its content-keyed tag.
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home --shell /bin/bash airflow \
 && mkdir -p /opt/airflow /opt/ci \
 && chown airflow:0 /opt/airflow /home/airflow && chmod 0775 /opt/airflow /home/airflow
COPY wheels /opt/ci/wheels
ENV AIRFLOW_HOME=/opt/airflow \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_NO_INDEX=1 \
    PIP_FIND_LINKS=/opt/ci/wheels \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv \
 && pip install -q "apache-airflow[postgres,celery]==3.3.2" "moto[server]" \
 && pip freeze > /opt/ci/constraints.txt \
 && chown -R airflow:0 /opt/venv && chmod -R g+rwX /opt/venv
COPY entrypoint.sh /entrypoint
COPY moto-persistent.py /opt/ci/moto-persistent.py
USER airflow
WORKDIR /opt/airflow
ENTRYPOINT ["/entrypoint"]
CMD []
