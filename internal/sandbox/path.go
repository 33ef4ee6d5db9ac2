package sandbox

import (
	"path"
	"strings"
)

// ResolvePath confines a caller's path to root (a class workdir such as
// /mnt/data). Empty means root itself; a relative path is taken under root;
// an absolute path must already lie under root. Any ".." element is refused,
// never rewritten, and so is a NUL byte (no program can take one). The result
// is clean and absolute.
func ResolvePath(root, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", Errorf(KindInvalid, "path contains a NUL byte")
	}
	if len(p) > 4096 {
		return "", Errorf(KindInvalid, "path is longer than 4096 bytes")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", Errorf(KindInvalid, "path %q climbs with \"..\": paths must stay under %s", p, root)
		}
	}
	if p == "" {
		return root, nil
	}
	var full string
	if strings.HasPrefix(p, "/") {
		full = path.Clean(p)
		if full != root && !strings.HasPrefix(full, root+"/") {
			return "", Errorf(KindInvalid, "path %q is outside the workdir %s", p, root)
		}
	} else {
		full = path.Join(root, p)
	}
	return full, nil
}
