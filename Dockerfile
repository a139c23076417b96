# podprobe's container image, built from source.
#
#   docker build -t <registry>/podprobe:<tag> --build-arg PODPROBE_REVISION=$(git rev-parse --short HEAD) .
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/podprobe:<tag> --push .
#
# The final image holds the binary and what it links (glibc and libgcc from
# distroless/cc), nothing else: no shell, no package manager. It runs as
# root because the CRI socket it talks to (containerd's, CRI-O's) is owned by
# root with mode 0660 and no group a pod can join; the DaemonSet drops every
# capability and makes the root filesystem read-only, so root buys access to
# that socket and nothing more (see SECURITY.md).
#
# hack/image.sh builds the same image without a container engine or a
# registry, for the local cluster.

ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12

FROM ${RUST_IMAGE} AS build
# build.rs compiles the CRI and gRPC health protos with protoc.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG PODPROBE_REVISION=unknown
# No debug info in the image (22 MB instead of 100 MB): symbols stay, so a
# panic's backtrace still names the functions, without line numbers.
ENV PODPROBE_REVISION=${PODPROBE_REVISION} \
    CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo
# Cache mounts keep the crates and the build between builds (BuildKit,
# buildah); the binary is copied out of the cached target directory.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked --bin podprobe \
    && install -D -m 0755 target/release/podprobe /out/podprobe

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/podprobe /podprobe
USER 0:0
ENTRYPOINT ["/podprobe"]
CMD ["run"]
