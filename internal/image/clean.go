package image

import (
	"archive/tar"
	"fmt"
	"io"
	"strings"
	"time"
)

// CleanLayer copies the layer tar r to w as the layer a node may unpack:
// each entry's header is made anew from the fields a rootfs needs (a
// clean name, the type, the permission bits and the sticky bit — never
// setuid or setgid —, the owner, the size, the time and a link's target),
// so nothing else the tenant wrote (extended attributes such as file
// capabilities, PAX records, device numbers, user and group names) is in
// it, and the entries ApplyLayer drops (devices, FIFOs and the like) are
// left out. It answers how many were left out. A sparse file is refused,
// so what it writes is never much more than it read.
//
// A node's container runtime unpacks a pushed layer as root and honours
// what ApplyLayer ignores, so a layer is pushed only as CleanLayer wrote
// it, after ApplyLayer checked those very bytes (Append).
func CleanLayer(w io.Writer, r io.Reader) (dropped int64, err error) {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dropped, tw.Close()
		}
		if err != nil {
			return dropped, fmt.Errorf("layer: %w", err)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return dropped, err
		}
		// A sparse file reads as its whole size, holes as zeros: a few
		// bytes of tar would clean to terabytes. No rootfs needs one.
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return dropped, fmt.Errorf("layer: %s is a sparse file", name)
			}
		}
		if h.Typeflag == tar.TypeGNUSparse {
			return dropped, fmt.Errorf("layer: %s is a sparse file", name)
		}
		c := &tar.Header{Name: name, Typeflag: h.Typeflag, Mode: h.Mode & 0o1777, Uid: h.Uid, Gid: h.Gid,
			ModTime: h.ModTime.Truncate(time.Second)}
		switch h.Typeflag {
		case tar.TypeDir:
			if name == "." {
				c.Name = "./"
			} else {
				c.Name += "/"
			}
		case tar.TypeReg:
			c.Size = h.Size
		case tar.TypeSymlink:
			c.Linkname = h.Linkname
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return dropped, err
			}
			c.Linkname = target
		default: // as ApplyLayer: devices, FIFOs, and what a rootfs does not need
			dropped++
			continue
		}
		if err := tw.WriteHeader(c); err != nil {
			return dropped, fmt.Errorf("layer: %s: %w", name, err)
		}
		if c.Typeflag == tar.TypeReg {
			if _, err := io.CopyN(tw, tr, c.Size); err != nil {
				return dropped, fmt.Errorf("layer: %s: %w", name, err)
			}
		}
	}
}
