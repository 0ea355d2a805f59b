# CI only: an image that holds nothing but the wheels pre-built on the host, passed to the
# production Dockerfile as `--build-arg WHEELHOUSE=...` so its build needs no network.
FROM scratch
COPY . /
