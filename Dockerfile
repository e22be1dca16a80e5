# The bigbinf exporter as a container (compose.yaml builds it).  It needs tcpdump and
# the transfer clients; capture needs CAP_NET_RAW and CAP_NET_ADMIN (compose.yaml adds
# them) and runs on the container's own interfaces.  The same image is compose's demo
# remote site (`lab serve`), so it carries the lab's servers too.
# BASE_IMAGE: Debian 12 to build on; the compose stack test builds one locally where no
# image registry can be reached (tests/e2e/test_compose_stack.py).
ARG BASE_IMAGE=debian:12.11-slim
FROM ${BASE_IMAGE}

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv tcpdump iproute2 procps coreutils ca-certificates \
      openssh-client openssh-server curl lftp vsftpd rsync nginx-light iperf3 \
      globus-gass-copy-progs globus-gridftp-server-progs libglobus-xio-udt-driver \
      xrootd-client xrootd-server \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/bigbinf
# Dependencies first, from pyproject.toml alone, so that editing the code rebuilds only
# the layers below (the package itself, --no-deps).
COPY pyproject.toml ./
RUN python3 -m venv /opt/bigbinf/venv \
 && python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && /opt/bigbinf/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY exporter ./exporter
RUN /opt/bigbinf/venv/bin/pip install --no-cache-dir --no-deps .
# The pcap analyser's fast path is machine code numba compiles at first use (2-7 s, in
# the analyser's worker process); compile it now into a cache the image carries, so a
# container's first analysis only loads it (~0.5 s).  numba keys its cache by CPU model:
# NUMBA_CPU_NAME=generic makes the cached code run (and be found) on any CPU of the
# architecture, not only the build machine's (the scan measured as fast either way).
# numba uses a cache directory only if it can write to it; run as another user (or
# with a read-only root) the worker copies this one to a temporary directory, and
# without any writable place numba compiles in memory: slower to start, never wrong.
ENV NUMBA_CACHE_DIR=/opt/bigbinf/numba-cache NUMBA_CPU_NAME=generic
RUN /opt/bigbinf/venv/bin/python -m bigbinf.measure.wire.analyser_worker --warm-up \
 && chmod -R a+rX /opt/bigbinf/numba-cache
COPY schedules ./schedules

EXPOSE 9753
VOLUME ["/var/lib/bigbinf"]
ENTRYPOINT ["/opt/bigbinf/venv/bin/bigbinf-exporter"]
CMD ["--config.file", "/opt/bigbinf/schedules/compose.yaml", "--web.listen-address", "0.0.0.0:9753"]
