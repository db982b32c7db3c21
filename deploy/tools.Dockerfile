# The harness payload (`pomona harnesses install` fills /var/cache/pomona/tools) as an image:
#   docker build -f deploy/tools.Dockerfile -t pomona/tools:TAG /var/cache/pomona/tools
# Nothing else is in it: sandbox pods copy /pomona/tools with the gate's busybox (init-copy), or
# mount the image with subPath pomona/tools (image volumes, Kubernetes >= 1.33).
FROM scratch
COPY . /pomona/tools/
