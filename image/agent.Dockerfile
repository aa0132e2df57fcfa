# The production agent image (template; not built by the gate or the tests).
#
# VENDOR_BASE is an image that carries the vendor CLI (for example Claude Code and the runtime it
# needs) and nothing the agent must not run: Landlock grants EXECUTE only on the files the policy
# lists, but the ELF loader can map any readable dynamic binary, so the image's contents are the
# real allowlist. Build the static binaries first:
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile static \
#     --target x86_64-unknown-linux-gnu -p cordon-init
ARG VENDOR_BASE
FROM ${VENDOR_BASE}

COPY cordon-init /sbin/cordon-init

# Mountpoints the profile uses (the root filesystem is mounted read-only).
WORKDIR /work
USER 10001:10001
ENTRYPOINT ["/sbin/cordon-init"]
