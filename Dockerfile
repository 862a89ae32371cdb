# jobguard's image: a static binary on distroless, run as a non-root user.
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) -t jobguard .
#   docker run --rm -e REDIS_URL=redis://redis:6379/0 jobguard worker
# No Docker daemon runs on the machines this template is developed on: cmd/jobguard/dockerfile_test.go
# (in make test) builds the binary with this file's exact `RUN go build` line and ENV, runs it with
# the USER's ids from a read-only directory, and runs the HEALTHCHECK command against it. Keep the
# build on one `RUN go build` line so that test reads it.

# The builder runs on the build machine's platform and cross-compiles for the target's (buildx
# --platform linux/amd64,linux/arm64 sets TARGETOS and TARGETARCH; empty, Go builds for its own).
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
ARG TARGETOS
ARG TARGETARCH
ENV CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH}
RUN go build -trimpath -ldflags "-s -w -X github.com/jobguard/jobguard/app.version=${VERSION} -X github.com/jobguard/jobguard/app.commit=${COMMIT}" -o /out/jobguard ./cmd/jobguard

FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639
COPY --from=build /out/jobguard /jobguard
# The API and UI on 8080; /metrics, /healthz and /readyz apart on 9090 (ADMIN_ADDR). A role that
# serves the UI (jobguard, jobguard api) on 0.0.0.0 needs MONITORING_USER and MONITORING_PASSWORD.
ENV HTTP_ADDR=0.0.0.0:8080 ADMIN_ADDR=0.0.0.0:9090
EXPOSE 8080 9090
USER 65532:65532
# No shell in the image: jobguard healthcheck asks /readyz on ADMIN_ADDR's port and exits 0 or 1.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["/jobguard", "healthcheck"]
ENTRYPOINT ["/jobguard"]
CMD ["api"]
