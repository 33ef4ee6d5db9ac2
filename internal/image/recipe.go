package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
)

// Image names. They match the class names of internal/sandbox on purpose:
// each class runs on the image of the same name.
const (
	Exec    = "exec"
	Dev     = "dev"
	Desktop = "desktop"
	Android = "android"
)

// DefaultDir is where images live unless the operator says otherwise.
const DefaultDir = "/var/lib/sandbox/images"

// recipeFormat is folded into every recipe hash. Bump it when the way a
// recipe is turned into a rootfs changes in a way the fields do not show
// (mmdebstrap options, the layout of the image directory, ...).
const recipeFormat = "sandbox-image/1"

// UID and GID of the unprivileged user every sandbox runs as.
const (
	UserName = "user"
	UserUID  = 1000
	UserGID  = 1000
	UserHome = "/home/user"
)

// Recipe says how one image is built.
type Recipe struct {
	Name    string
	Suite   string   // Debian suite, e.g. "bookworm"
	Variant string   // mmdebstrap variant, e.g. "minbase"
	Arch    string   // Debian architecture, e.g. "amd64"
	Mirrors []string // apt sources, one-line format ("deb URL SUITE COMPONENTS")
	// Packages installed on top of the variant (recommends are not installed).
	Packages []string
	// Exclude are dpkg path-exclude patterns: files of the packages that
	// are never unpacked (headers and static libraries a dependency drags
	// in, translations), to keep an image under its size bound.
	Exclude []string
	// Trim are customisation hooks of this image alone (as
	// customizeHooks, run after them): what cannot be kept from being
	// unpacked, because a package's setup reads it, is removed after.
	Trim []string
	// Commands must resolve to an executable inside the built rootfs
	// (absolute paths inside the image); a build missing one is not published.
	// They check the result and are not part of the hash.
	Commands []string
	// Holds says what the image is for and what is in it, for the
	// image list (GET /v1/images); not part of the hash.
	Holds string
	// Buildable is false for an image this tool cannot build on this kind
	// of host; Missing then says why, for the operator.
	Buildable bool
	Missing   string
}

// customizeHooks run (as mmdebstrap --customize-hook, sh -c with $1 = the
// rootfs) after the packages are installed. They are part of every hash.
var customizeHooks = []string{
	// The one unprivileged user, uid/gid 1000: the runtime runs every sandbox
	// process as 1000:1000 and a bind-mounted volume keeps its host uid.
	fmt.Sprintf(`chroot "$1" groupadd --gid %d %s && chroot "$1" useradd --uid %d --gid %d --home-dir %s --create-home --shell /bin/bash %s`,
		UserGID, UserName, UserUID, UserGID, UserHome, UserName),
	// Class workdirs: exec works in /mnt/data, the others in /work. Both are
	// mount points in practice; owning them keeps a bare sandbox usable.
	fmt.Sprintf(`install -d -o %d -g %d -m 0755 "$1/mnt/data" "$1/work" && chmod 0755 "$1%s"`,
		UserUID, UserGID, UserHome),
	// mmdebstrap copies the build host's /etc/hostname (which would leak the
	// host's name into every sandbox) and writes no /etc/hosts at all.
	`printf 'sandbox\n' > "$1/etc/hostname" && chmod 0644 "$1/etc/hostname"`,
	// The build host's resolver settings are nobody else's business (and a
	// sandbox has no network to use them on).
	`: > "$1/etc/resolv.conf" && chmod 0644 "$1/etc/resolv.conf"`,
	`printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$1/etc/hosts" && chmod 0644 "$1/etc/hosts"`,
	// pip install --user (and into a venv) is the sandbox's own business:
	// Debian marks its Python externally managed (PEP 668), which makes
	// pip refuse even --user installs; a sandbox is no shared system.
	`rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED`,
	// The rootfs is shared read-only and read by uid 1000: its top must be
	// traversable. (Debian's own modes are kept: /root, /etc/shadow and apt's
	// lock files stay private, nothing else in a minbase tree is.)
	`chmod 0755 "$1"`,
}

// Package sets. exec carries the toolchains of the 13 code-interpreter
// languages (py js ts bash r php go rs c cpp java d f90).
var (
	execPackages = []string{
		"ca-certificates", "coreutils", "procps", "bash",
		"python3",                   // py
		"nodejs", "node-typescript", // js, ts (tsc)
		"r-base-core",             // r (Rscript)
		"php-cli",                 // php
		"golang-go",               // go
		"rustc",                   // rs
		"gcc", "g++", "libc6-dev", // c, cpp
		"default-jdk-headless",  // java
		"gdc",                   // d
		"gfortran",              // f90
		"socat", "less", "file", // plumbing the service itself uses
		// An agent's package managers and fetcher: pip (and --user
		// installs), venv, npm, cargo, curl, git.
		"python3-pip", "python3-venv", "npm", "cargo", "curl", "git",
	}
	// The exec image's data stack and Jupyter kernels: code contexts run
	// on them (python3 on ipykernel, r on IRkernel), and a figure or a
	// frame comes back as PNG or HTML.
	execData = []string{
		"python3-ipykernel", "python3-jupyter-client", "r-cran-irkernel",
		"python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy",
	}
	// What the data stack drags in and nobody runs: SciPy's build-time
	// Pythran pulls Boost's headers and OpenBLAS's static library (one
	// 160 MB, the other 56 MB); translations. Manuals stay (OpenJDK's
	// setup fails without their directories), and so do the copyright
	// files.
	execExclude = []string{
		"/usr/include/boost/*", "/usr/lib/x86_64-linux-gnu/openblas-pthread/*.a",
		"/usr/share/locale/*", "/usr/share/doc/*/changelog*", "/usr/share/doc/*/examples/*",
	}
	// The Python packages' own test suites (150 MB, never imported) are
	// removed after the install: their setup byte-compiles them, so they
	// cannot be excluded.
	execTrim = []string{`d="$1/usr/lib/python3/dist-packages"; [ ! -d "$d" ] || find "$d" -depth -type d -name tests -prune -exec rm -rf {} +`}
	// execHolds is what every class image has, for Holds.
	execHolds    = "Python 3 with pip and venv, Node.js with npm and TypeScript, R, Go, Rust with cargo, C and C++, Java, D, Fortran, PHP, bash, git and curl"
	devExtra     = []string{"tmux", "zsh", "make", "openssh-client", "vim-tiny"}
	desktopExtra = []string{"xvfb", "openbox", "xterm", "x11vnc", "socat"}

	execCommands = []string{
		"/usr/bin/python3", "/usr/bin/node", "/usr/bin/tsc", "/bin/bash",
		"/usr/bin/Rscript", "/usr/bin/php", "/usr/bin/go", "/usr/bin/rustc",
		"/usr/bin/gcc", "/usr/bin/g++", "/usr/bin/javac", "/usr/bin/java",
		"/usr/bin/gdc", "/usr/bin/gfortran", "/usr/bin/socat", "/usr/bin/file",
		"/usr/bin/pip3", "/usr/bin/npm", "/usr/bin/cargo", "/usr/bin/curl", "/usr/bin/git",
	}
	devCommands     = []string{"/usr/bin/tmux", "/usr/bin/zsh", "/usr/bin/make", "/usr/bin/ssh", "/usr/bin/vi"}
	desktopCommands = []string{"/usr/bin/Xvfb", "/usr/bin/openbox", "/usr/bin/xterm", "/usr/bin/x11vnc"}
)

// Names lists the class images this package knows, in class order.
func Names() []string {
	return []string{Exec, Dev, Desktop, Android}
}

// RecipeFor returns the recipe of a named image. The result is a fresh copy.
func RecipeFor(name string) (Recipe, error) {
	r := Recipe{
		Name:      name,
		Suite:     "bookworm",
		Variant:   "minbase",
		Arch:      debianArch(runtime.GOARCH),
		Mirrors:   bookwormMirrors(),
		Buildable: true,
	}
	switch name {
	case Exec:
		r.Packages = join(execPackages, execData)
		r.Commands = join(execCommands)
		r.Exclude, r.Trim = execExclude, execTrim
		r.Holds = execHolds + "; the data stack (numpy, pandas, matplotlib, scipy) and Jupyter kernels for Python and R (code contexts)"
	case Dev:
		r.Holds = execHolds + "; tmux, zsh, make, ssh and vi for a coding session in a project volume"
		r.Packages = join(execPackages, devExtra)
		r.Commands = join(execCommands, devCommands)
	case Desktop:
		r.Holds = "the dev image and an X desktop (Xvfb, openbox, xterm) served over VNC: a screen to open"
		r.Packages = join(execPackages, devExtra, desktopExtra)
		r.Commands = join(execCommands, devCommands, desktopCommands)
	case Android:
		r.Packages = join(execPackages, devExtra, desktopExtra)
		r.Buildable = false
		r.Missing = "the Android emulator and SDK are not packaged by Debian bookworm, " +
			"and the emulator needs /dev/kvm on the node; provide this image by other means"
	default:
		return Recipe{}, unknownImage(name)
	}
	return r, nil
}

func unknownImage(name string) error {
	return fmt.Errorf("unknown image %q: known images are %s", name, strings.Join(Names(), ", "))
}

// Hash is a hex SHA-256 over everything that shapes the built rootfs: the
// format version, name, suite, variant, architecture, mirrors, the package SET
// (order and duplicates do not matter) and the customisation hooks. Commands,
// Buildable and Missing do not shape the result and are left out.
func (r Recipe) Hash() string {
	pkgs := slices.Clone(r.Packages)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	b, err := json.Marshal(struct {
		Format   string   `json:"format"`
		Name     string   `json:"name"`
		Suite    string   `json:"suite"`
		Variant  string   `json:"variant"`
		Arch     string   `json:"arch"`
		Mirrors  []string `json:"mirrors"`
		Packages []string `json:"packages"`
		Hooks    []string `json:"hooks"`
		Exclude  []string `json:"exclude,omitempty"`
		Trim     []string `json:"trim,omitempty"`
	}{recipeFormat, r.Name, r.Suite, r.Variant, r.Arch, r.Mirrors, pkgs, customizeHooks, r.Exclude, r.Trim})
	if err != nil { // cannot happen: strings only
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// uniquePackages is the package list handed to mmdebstrap: sorted, no
// duplicates (desktop names socat twice on purpose, as the spec does).
func (r Recipe) uniquePackages() []string {
	p := slices.Clone(r.Packages)
	slices.Sort(p)
	return slices.Compact(p)
}

func bookwormMirrors() []string {
	return []string{
		"deb http://deb.debian.org/debian bookworm main",
		"deb http://deb.debian.org/debian bookworm-updates main",
		"deb http://deb.debian.org/debian-security bookworm-security main",
	}
}

func join(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// debianArch maps GOARCH to the Debian architecture name.
func debianArch(goarch string) string {
	switch goarch {
	case "386":
		return "i386"
	case "arm":
		return "armhf"
	case "ppc64le":
		return "ppc64el"
	case "mips64le":
		return "mips64el"
	default: // amd64, arm64, riscv64, s390x are spelled alike
		return goarch
	}
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
