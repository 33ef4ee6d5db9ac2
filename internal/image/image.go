package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ErrNotBuilt is wrapped by every error that means "no complete image of that
// name is in the images directory".
var ErrNotBuilt = errors.New("image not built")

// Layout of an image directory: DIR/NAME/rootfs and DIR/NAME/image.json.
const (
	rootfsDir    = "rootfs"
	manifestFile = "image.json"
)

// Manifest is image.json: written last into a build, so its presence is what
// makes an image complete.
type Manifest struct {
	Name         string    `json:"name"`
	RecipeHash   string    `json:"recipeHash"`
	Suite        string    `json:"suite"`
	Variant      string    `json:"variant"`
	Arch         string    `json:"arch"`
	Packages     []string  `json:"packages"`          // requested
	Installed    int       `json:"installedPackages"` // dpkg count, dependencies included
	BuiltAt      time.Time `json:"builtAt"`
	BuildSeconds float64   `json:"buildSeconds"`
	SizeBytes    int64     `json:"sizeBytes"` // disk usage of rootfs
	Files        int64     `json:"files"`
	Builder      string    `json:"builder"` // mmdebstrap version
}

// notBuiltError carries the operator-facing message and unwraps to
// ErrNotBuilt.
type notBuiltError struct{ msg string }

func (e *notBuiltError) Error() string { return e.msg }
func (e *notBuiltError) Unwrap() error { return ErrNotBuilt }

// BuildCommand is the command an operator runs to build name under dir.
func BuildCommand(dir, name string) string {
	cmd := "sandbox image build " + name
	if !sameDir(dir, DefaultDir) {
		cmd += " --images " + dir
	}
	return cmd
}

func notBuilt(dir, name, why string) error {
	msg := fmt.Sprintf("image %q is not built: run `%s`", name, BuildCommand(dir, name))
	if why != "" {
		msg += " (" + why + ")"
	}
	return &notBuiltError{msg: msg}
}

// Rootfs returns the absolute rootfs directory of the COMPLETE image name
// under dir, or an error wrapping ErrNotBuilt whose message tells the operator
// the exact build command. A half-built image (no manifest, a manifest of
// another image, no rootfs) is never returned. An image whose recipe has
// changed since it was built is still returned: it is complete, and a
// rebuild (Build) replaces it atomically.
func Rootfs(dir, name string) (string, error) {
	r, err := RecipeFor(name)
	if err != nil {
		return "", err
	}
	if !r.Buildable {
		if _, err := Inspect(dir, name); err != nil {
			return "", &notBuiltError{msg: fmt.Sprintf("image %q is not built, and this tool cannot build it: %s", name, r.Missing)}
		}
	}
	return rootfs(dir, name)
}

// rootfs is Rootfs without the name check (the tests build private recipes).
func rootfs(dir, name string) (string, error) {
	if _, err := Inspect(dir, name); err != nil {
		return "", err
	}
	p, err := filepath.Abs(filepath.Join(dir, name, rootfsDir))
	if err != nil {
		return "", err
	}
	return p, nil
}

// Inspect reads the manifest of a complete image. Any error wraps ErrNotBuilt
// unless the name is unknown.
func Inspect(dir, name string) (Manifest, error) {
	if name == "" || name != filepath.Base(name) || name[0] == '.' {
		return Manifest{}, unknownImage(name)
	}
	imgDir := filepath.Join(dir, name)
	b, err := os.ReadFile(filepath.Join(imgDir, manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(imgDir); serr == nil {
			return Manifest{}, notBuilt(dir, name, "incomplete: no "+manifestFile)
		}
		return Manifest{}, notBuilt(dir, name, "")
	}
	if err != nil {
		return Manifest{}, notBuilt(dir, name, err.Error())
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, notBuilt(dir, name, "unreadable "+manifestFile+": "+err.Error())
	}
	if m.Name != name || m.RecipeHash == "" {
		return Manifest{}, notBuilt(dir, name, "manifest does not describe this image")
	}
	fi, err := os.Stat(filepath.Join(imgDir, rootfsDir))
	if err != nil || !fi.IsDir() {
		return Manifest{}, notBuilt(dir, name, "no rootfs directory")
	}
	return m, nil
}

func sameDir(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}
