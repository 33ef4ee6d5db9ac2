module sandboxkube/coredns

// Its own module, so that the repository's go build/vet ./... leaves it
// alone: kube-up.sh builds it in ROOT/src/coredns with CoreDNS required.

go 1.26.0
