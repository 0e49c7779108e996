# coterie's image: nothing but the binary and its shared libraries, on top of
# an empty filesystem. The cluster file and its secret are mounted at /config
# (see docker-compose.yml), never baked in. No base image can be
# pulled where this project is built, so there is no `FROM debian` here.
#
# Do not run `docker build` directly: scripts/build-image.sh first builds the
# release binary and stages the root filesystem in target/docker-rootfs/
# (binary at /coterie, the libraries `ldd` lists at their usual paths, the
# dynamic loader, /etc/nsswitch.conf and an empty /config), then builds
# this file. .dockerignore keeps the rest of the repository (and target/)
# out of the build context.
FROM scratch
COPY target/docker-rootfs/ /
# The peer, client and witness ports used by config/docker.toml.
EXPOSE 7100 7200 7300
ENTRYPOINT ["/coterie"]
CMD ["--help"]
