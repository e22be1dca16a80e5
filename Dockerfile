# The bigbinf exporter as a container (compose.yaml builds it).  It needs tcpdump and
# the transfer clients; capture needs CAP_NET_RAW and CAP_NET_ADMIN (compose.yaml adds
# them) and runs on the container's own interfaces.
FROM debian:12.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv tcpdump iproute2 procps openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/bigbinf
# Dependencies first, so editing the code does not reinstall them.
COPY pyproject.toml ./
COPY exporter ./exporter
RUN python3 -m venv /opt/bigbinf/venv \
 && /opt/bigbinf/venv/bin/pip install --no-cache-dir .
COPY schedules ./schedules

EXPOSE 9753
VOLUME ["/var/lib/bigbinf"]
ENTRYPOINT ["/opt/bigbinf/venv/bin/bigbinf-exporter"]
CMD ["--config.file", "/opt/bigbinf/schedules/compose.yaml", "--web.listen-address", "0.0.0.0:9753"]
