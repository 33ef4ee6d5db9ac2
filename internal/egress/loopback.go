package egress

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NewLoopback makes a network namespace kept at path (a bind mount, as
// `ip netns add` makes) whose one link, its loopback, is up: the
// namespace of a sandbox with no network. runsc --network=sandbox over it
// gives the sandbox's network stack the same loopback --network=none
// would, and nothing else — but unlike --network=none it lets runsc's own
// port forward (the control socket's PortForward) reach that loopback,
// which previews use instead of a process inside. A namespace with its
// loopback down would give the stack no loopback at all (runsc skips links
// that are down).
func NewLoopback(path string) error {
	ns, err := newNamedNS(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		DropNamespace(path)
		return fmt.Errorf("egress: netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		DropNamespace(path)
		return fmt.Errorf("egress: loopback up: %w", err)
	}
	return nil
}

// DropNamespace unmounts and removes the namespace kept at path (the
// namespace itself ends with the last process in it). Missing is not an
// error.
func DropNamespace(path string) error {
	var errs []error
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("egress: unmount %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("egress: %w", err))
	}
	return errors.Join(errs...)
}
