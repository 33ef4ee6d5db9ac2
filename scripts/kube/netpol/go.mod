// The sources kube-up.sh builds kube-network-policies from (main.go is
// copied into ROOT/src/netpol/cmd/kube-netpol, patch/xtqueue.go into its
// copy of the module); a module of its own so that the repository's does
// not require what it imports.
module sandboxkube/netpol

go 1.26.0
