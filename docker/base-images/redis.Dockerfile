# No-registry stand-in for the official redis image (the compose `celery` profile's broker), from
# Debian's redis-server package. Same contract: serves on 6379, redis-cli on PATH.
# The Debian base image: docker/local_images.py passes its content-keyed tag.
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/*
USER redis
EXPOSE 6379
ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/var/lib/redis"]
