#!/bin/sh
# Demo remote: generate keys and datasets once, write what the exporter needs into the
# shared volume (client key, ssh_config, known_hosts, SHA256SUMS), then run sshd.
set -eu
shared=${BIGBINF_SHARED:-/shared}
addr=${BIGBINF_REMOTE_ADDRESS:-198.18.0.2}
rm -f "$shared/ready"
mkdir -p "$shared" /data /run/sshd
chmod 700 "$shared"

[ -f "$shared/host_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C bigbinf-demo-host -f "$shared/host_ed25519"
[ -f "$shared/client_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C bigbinf-demo-client -f "$shared/client_ed25519"
cp "$shared/client_ed25519.pub" "$shared/authorized_keys"
echo "$addr $(cat "$shared/host_ed25519.pub")" > "$shared/known_hosts"
cat > "$shared/ssh_config" <<CFG
Host $addr
  IdentityFile $shared/client_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $shared/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  Compression no
  LogLevel ERROR
CFG
cat > /etc/ssh/sshd_config.d/bigbinf.conf <<CFG
HostKey $shared/host_ed25519
AuthorizedKeysFile $shared/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 100
CFG

# Random content: compression cannot flatter a protocol.
for pair in $BIGBINF_DATASETS; do
  name=${pair%%:*}
  size=${pair#*:}
  if [ ! -f "/data/$name" ] || [ "$(stat -c %s "/data/$name")" != "$size" ]; then
    head -c "$size" /dev/urandom > "/data/$name.partial"
    mv "/data/$name.partial" "/data/$name"
  fi
done
(cd /data && sha256sum -- *.bin) > "$shared/SHA256SUMS"

/usr/sbin/sshd -t
touch "$shared/ready"
exec /usr/sbin/sshd -D -e
