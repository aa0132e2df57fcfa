# The production agent image, from a base image that already carries the vendor CLI (template;
# not built by the gate or the tests).
#
# cordon builds this image itself from the pinned Claude Code CLI and the host's libraries
# (`cordon::image::agent::build_agent_image`, see README.md). This template makes the same layout
# from an image VENDOR_BASE that carries the CLI at /usr/bin/claude. The result is FROM scratch
# and holds only:
#   - the CLI, its interpreter (PT_INTERP) and every library of its closure, each a regular file
#     (COPY --from follows the base image's links: nothing here is a link);
#   - the CA bundle;
#   - cordon's static binaries (cordon-init, the entrypoint; cordon-probe; cordon-egress);
#   - the directories these need, and no other: none at /tmp, /work, /home, /home/agent, /run or
#     under /run (a tmpfs the engine mounts over a directory the image has takes that directory's
#     mode and owner), so no WORKDIR and no VOLUME either.
# The image's contents are the real exec allowlist (the ELF loader can map any readable dynamic
# binary): the agent's policy lets it execute the CLI and its interpreter, and there is nothing
# else to run: no shell.
#
# The library list below is the closure of Claude Code 2.1.332 on an x86-64 glibc base: check
# yours with `ldd /usr/bin/claude` in VENDOR_BASE, and put each library in a directory the
# interpreter searches by default.
#
# Build the static binaries first and put them in the build context, execute-only (the classic
# builder's COPY keeps the context's modes): the interpreter is on the agent's exec allowlist, and
# `ld-linux-x86-64.so.2 FILE` runs any ELF it can read, static ones included:
#   RUSTFLAGS="-C target-feature=+crt-static" cargo build --profile static \
#     --target x86_64-unknown-linux-gnu -p cordon-init -p cordon-probe -p cordon-egress
#   chmod 0711 cordon-init cordon-probe cordon-egress
# No USER: the profile starts the init as root and the init drops to the agent's uid.
ARG VENDOR_BASE
FROM ${VENDOR_BASE} AS vendor

FROM scratch
COPY --from=vendor /usr/bin/claude /usr/bin/claude
COPY --from=vendor /lib64/ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
COPY --from=vendor /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libdl.so.2 \
    /lib/x86_64-linux-gnu/libm.so.6 /lib/x86_64-linux-gnu/libpthread.so.0 \
    /lib/x86_64-linux-gnu/librt.so.1 /lib/x86_64-linux-gnu/
COPY --from=vendor /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY cordon-init /sbin/cordon-init
COPY cordon-probe cordon-egress /usr/bin/
ENTRYPOINT ["/sbin/cordon-init"]
