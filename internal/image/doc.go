// Package image builds the root filesystems that sandboxes of each class run
// on, and finds them again for the runtime.
//
// Why it exists: under gVisor every sandbox of a class shares ONE read-only
// rootfs (writes go to a per-sandbox in-memory overlay), so the image is built
// once per machine, ahead of time, not per lease. Building it is slow (the exec
// image with its 13 language toolchains is about 2 GB and a minute and a half
// of mmdebstrap), so three properties matter more than speed:
//
//   - A half-built image is never handed to the runtime. A build happens in a
//     scratch directory beside the final one and is renamed into place only
//     after its manifest (image.json) is written; Rootfs answers only for a
//     directory that has a manifest. A crashed or cancelled build leaves at
//     most a .build-* directory, which the next build removes.
//   - Building is idempotent: the manifest records a hash of everything that
//     shapes the result (suite, variant, architecture, mirrors, packages,
//     customisation hooks), and a build whose recipe hash matches the image in
//     place returns at once.
//   - When an image is missing, the error says the exact command that builds
//     it, because the operator is the one who reads it.
//
// The recipes are defined here, in one place: Debian bookworm, variant
// minbase, plus the packages a class needs, a user "user" with uid/gid 1000
// (the uid the runtime runs sandboxes as) and the class workdirs /mnt/data and
// /work owned by it. mmdebstrap runs in root mode inside a private mount
// namespace, so the /proc, /sys and /dev mounts it makes inside the chroot can
// never outlive it on the host, even when it is killed.
//
// The package uses only the standard library and the mmdebstrap program.
package image
