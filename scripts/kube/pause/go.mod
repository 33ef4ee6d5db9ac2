// Standard library only; kube-up.sh builds it (go build -o ROOT/bin/pause).
module sandboxkube/pause

go 1.21
