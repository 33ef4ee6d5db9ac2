package gvisor

// Platforms are the runsc platforms --platform accepts (systrap the
// default). scripts/deps.sh precompiles runsc's seccomp programs for these
// (filtergen) and hashes this file into the pinned runsc's recipe: a
// platform added here is one runsc is built again for.
var Platforms = []string{"systrap", "ptrace", "kvm"}
