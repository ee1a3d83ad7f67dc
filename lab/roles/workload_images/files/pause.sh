#!/bin/sh
# PID 1 of a fieldlab pause container. It holds the alloc's network namespace and nothing else:
# SIGTERM or SIGINT end it at once with status 0 (so `docker stop` neither waits for the timeout nor
# reports a failure), and otherwise it waits forever, reaping every child it inherits.
trap 'exit 0' TERM INT
while :; do
    sleep 3600 &
    wait
done
