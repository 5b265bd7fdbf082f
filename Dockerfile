# pinplan's image: the static binary of deploy/release.sh on a minimal base,
# run as a non-root user, its data in the /data volume.
#
#   docker build -t pinplan .
#   docker run -d --name pinplan -p 127.0.0.1:8080:8080 -v pinplan-data:/data \
#     -e PINPLAN_WEB_TOKEN="$(openssl rand -hex 24)" -e OPENAI_BASE_URL=... pinplan
#
# The console listens on 0.0.0.0:8080 inside the container, so a published
# port reaches it; beyond loopback pinplan refuses to start without
# PINPLAN_WEB_TOKEN, and the console asks every client for it. The image
# holds no token. The health check asks /readyz, which needs none.
# deploy/deploy_test.go checks this file and runs its build step; docker
# itself is not run there (docs/operations.md says what was checked).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# .git comes along (see .dockerignore) so the build names its commit.
COPY . .
RUN deploy/release.sh /out/pinplan && mkdir -p /out/data

FROM alpine:3.22
RUN addgroup -S -g 10001 pinplan && adduser -S -D -H -u 10001 -G pinplan -s /sbin/nologin pinplan
COPY --from=build /out/pinplan /usr/local/bin/pinplan
COPY --from=build --chown=10001:10001 /out/data /data
USER 10001:10001
ENV PINPLAN_DB=/data/pinplan.db \
    PINPLAN_HTTP_ADDR=0.0.0.0:8080
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD wget -q -O /dev/null http://127.0.0.1:8080/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/pinplan"]
CMD ["serve"]
