// Standard library only: go run . -ref NAME:TAG ROOTFS > image.tar (kube-image.sh builds it into ROOT/bin/imgtar).
module sandboxkube/imgtar

go 1.21
