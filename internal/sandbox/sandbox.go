package sandbox

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"github.com/sandboxd/sandbox/wire"
	"regexp"
	"strings"
	"time"
)

// Sandbox is the record of one lease. Name is the runtime's handle (container
// id or pod name): it is minted per sandbox, never reused, and never shown to
// a caller. Its wire form is Object.
type Sandbox struct {
	ID         string
	Org        string
	Class      string
	Project    string
	Status     Status
	Image      string
	Runtime    string
	Workdir    string
	CreatedAt  time.Time
	LastUsedAt time.Time
	ExpiresAt  time.Time
	Error      string
	// Woken says this call woke the sandbox from sleep.
	Woken bool
	// Forked says this call made the sandbox as a fork (MemoryKept says
	// whether it went on from its original's memory or files only).
	Forked bool
	// MemoryKept says a sleeping sandbox's memory is checkpointed and will
	// come back on wake.
	MemoryKept bool
	// Metadata is the caller's labels (CheckMetadata bounds them).
	Metadata map[string]string
	// Network is the egress policy the sandbox got, canonical; nil is
	// none (its own loopback only).
	Network *NetworkPolicy
	// PublicPorts are the ports whose previews anyone with the URL may
	// open (the lease asked, the operator allowed); sorted, no repeats.
	PublicPorts []int

	Name       string // runtime object name
	UID        string // runtime object identity, for precondition deletes
	Volume     string // runtime volume name
	Checkpoint string // runtime checkpoint key while sleeping
}

// Object is the Sandbox object on the wire (SPEC §4), what every answer
// that carries a sandbox sends: the reference's generated clients decode
// its times as integers, so they are Unix seconds. Its runtime handles
// (container or pod name, identity, checkpoint) are never in it.
type Object = wire.Sandbox

// Object is sb as the wire shows it.
func (sb *Sandbox) Object() *Object {
	o := &Object{
		ID: sb.ID, Kind: "sandbox", Org: sb.Org, Class: sb.Class, Project: sb.Project, Status: string(sb.Status),
		Image: sb.Image, Runtime: sb.Runtime, Workdir: sb.Workdir,
		CreatedAt: sb.CreatedAt.Unix(), LastUsedAt: sb.LastUsedAt.Unix(), ExpiresAt: sb.ExpiresAt.Unix(),
		Error: sb.Error, Woken: sb.Woken, Metadata: sb.Metadata, Network: sb.Network, PublicPorts: sb.PublicPorts,
	}
	if sb.Project != "" {
		o.Volume = sb.Volume
	}
	if sb.Woken || sb.Forked || sb.Status == StatusSleeping {
		kept := sb.MemoryKept
		o.MemoryKept = &kept
	}
	return o
}

// MarshalJSON writes the wire form: a Sandbox encoded anywhere is the
// Sandbox object, never the record.
func (sb Sandbox) MarshalJSON() ([]byte, error) { return json.Marshal(sb.Object()) }

// Runtimes a caller may ask for. The operator decides; the answer says what
// the caller got.
const (
	RuntimeGVisor  = "gvisor"
	RuntimeKataCLH = "kata-clh"
	RuntimeKataFC  = "kata-fc"
	RuntimeRunc    = "runc"
)

// DecideRuntime applies the runtime rules: empty means the server's default;
// runc is never granted to a tenant; kata-fc cannot carry a volume; anything
// else must be one the server offers.
func DecideRuntime(asked, def string, offered []string, hasVolume bool) (string, error) {
	if asked == "" {
		return def, nil
	}
	switch asked {
	case RuntimeRunc:
		return "", Errorf(KindInvalid, "runtime %q is never granted to a tenant", asked)
	case RuntimeKataFC:
		if hasVolume {
			return "", Errorf(KindInvalid, "runtime %q has no shared filesystem and cannot carry a volume", asked)
		}
	case RuntimeGVisor, RuntimeKataCLH:
	default:
		return "", Errorf(KindInvalid, "unknown runtime %q: choose one of gvisor, kata-clh, kata-fc", asked)
	}
	for _, o := range offered {
		if o == asked {
			return asked, nil
		}
	}
	return "", Errorf(KindInvalid, "runtime %q is not offered by this server (offered: %s)", asked, strings.Join(offered, ", "))
}

// DefaultCeiling is the absolute bound on a lease, counted from creation.
const DefaultCeiling = 24 * time.Hour

// ExpiryFor returns when a lease asked at now for ttlSec ends: ttlSec <= 0
// means the class default, and nothing ends later than createdAt+ceiling.
func ExpiryFor(c Class, ttlSec int64, now, createdAt time.Time, ceiling time.Duration) time.Time {
	ttl := c.DefaultTTL
	if ttlSec > 0 {
		// Clamp before multiplying so a huge ttlSec cannot overflow.
		if ttlSec > int64(ceiling/time.Second) {
			ttlSec = int64(ceiling / time.Second)
		}
		ttl = time.Duration(ttlSec) * time.Second
	}
	exp := now.Add(ttl)
	if limit := createdAt.Add(ceiling); exp.After(limit) {
		exp = limit
	}
	return exp
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID mints a public sandbox id: "sb_" and 26 random base32 characters.
func NewID() string {
	return idPrefix + randomToken(16)
}

// The id's prefix, and its spelling in a DNS name. A sandbox id's "_" is
// not a letter of a DNS name (RFC 1123 host names: letters, digits and
// '-'): ingress controllers, certificate authorities and some resolvers
// refuse such a name, so a host names a sandbox by its label, the id with
// '-' for its '_'.
const (
	idPrefix    = "sb_"
	labelPrefix = "sb-"
)

// Label is id's spelling in a host name: "sb-…" for "sb_…".
func Label(id string) string {
	if rest, ok := strings.CutPrefix(id, idPrefix); ok {
		return labelPrefix + rest
	}
	return id
}

// FromLabel is the id a label names ("sb_…" for "sb-…"); anything else
// is returned as it is (an id itself, as older links spell it).
func FromLabel(label string) string {
	if rest, ok := strings.CutPrefix(label, labelPrefix); ok {
		return idPrefix + rest
	}
	return label
}

// NewName mints a runtime object name: fixed length (runsc matches ids by
// prefix, so lengths must not vary) and never reused.
func NewName() string {
	return "sbx-" + randomToken(15)
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return idEncoding.EncodeToString(b)
}

var (
	idPattern      = regexp.MustCompile(`^sb_[a-z2-7]{26}$`)
	projectPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// ValidID reports whether id has the shape NewID mints. A malformed id is
// answered like an unknown one (404) by callers.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ValidateProject checks a project name: 1–64 letters, digits, '.', '_' or
// '-', starting with a letter or digit.
func ValidateProject(p string) error {
	if !projectPattern.MatchString(p) {
		return Errorf(KindInvalid, "project %q is invalid: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", p)
	}
	return nil
}

// namePattern is the shape of a session name (narration, and a terminal's
// tmux session): 1–64 letters, digits, '-' or '_', not starting with '-'.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$`)

// ValidSessionName reports whether s is a valid session name.
func ValidSessionName(s string) bool { return namePattern.MatchString(s) }

// CheckSessionName refuses an invalid session name; what names the field
// for the message ("session", "arg").
func CheckSessionName(what, s string) error {
	if !ValidSessionName(s) {
		return Errorf(KindInvalid, "%s names a session: 1-64 letters, digits, '-' or '_', not starting with '-'", what)
	}
	return nil
}

// Metadata bounds: what one sandbox's labels may hold.
const (
	MaxMetadataKeys  = 32
	MaxMetadataValue = 512
	MaxMetadataBytes = 8 << 10
)

var metadataKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckMetadata refuses metadata beyond the bounds, or with a key that is
// not a plain name (keys go into a JSON path and a query string).
func CheckMetadata(m map[string]string) error {
	if len(m) > MaxMetadataKeys {
		return Errorf(KindInvalid, "metadata has %d keys; at most %d", len(m), MaxMetadataKeys)
	}
	total := 0
	for k, v := range m {
		if !metadataKey.MatchString(k) {
			return Errorf(KindInvalid, "metadata key %q: 1-63 of letters, digits, '.', '_' and '-', starting with a letter or digit", k)
		}
		if len(v) > MaxMetadataValue || strings.IndexByte(v, 0) >= 0 {
			return Errorf(KindInvalid, "metadata %q: a value is at most %d bytes, without NUL", k, MaxMetadataValue)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return Errorf(KindInvalid, "metadata holds %d bytes; at most %d", total, MaxMetadataBytes)
	}
	return nil
}

// NetworkPolicy is a sandbox's egress policy as a lease asks for it and as
// its answer reports it (internal/netpolicy parses, bounds and matches
// it). The zero value, no allow entry, is "none": the sandbox's own
// loopback only.
type NetworkPolicy = wire.NetworkPolicy

// LeaseEnd is when sb's lease stops, seen at now. A sandbox that is not
// live (pending, running or sleeping) or whose lease has expired is
// KindNotFound: a lease credential is revoked with its lease.
func (sb *Sandbox) LeaseEnd(now time.Time) (time.Time, error) {
	switch sb.Status {
	case StatusPending, StatusRunning, StatusSleeping:
	default:
		return time.Time{}, Errorf(KindNotFound, "sandbox not found")
	}
	if !sb.ExpiresAt.After(now) {
		return time.Time{}, Errorf(KindNotFound, "sandbox not found")
	}
	return sb.ExpiresAt, nil
}
