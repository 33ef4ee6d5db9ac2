package wire

import "time"

// Sandbox is the Sandbox object (SPEC §4), what every answer that carries
// a sandbox sends. Its times are Unix seconds (the reference's generated
// clients decode them as integers); Created, LastUsed and Expires convert
// them. The server's runtime handles (container or pod name, identity,
// checkpoint) are never in it.
type Sandbox struct {
	ID      string `json:"id"`
	Kind    string `json:"kind" jsonschema:"always \"sandbox\""`
	Org     string `json:"org"`
	Class   string `json:"class"`
	Project string `json:"project,omitempty"`
	Status  string `json:"status"` // pending, running, error or sleeping
	Image   string `json:"image"`
	Runtime string `json:"runtime"`
	// Volume names the project volume a project sandbox works on (as GET
	// /v1/volumes lists it by project); a scratch sandbox has none.
	Volume     string `json:"volume,omitempty"`
	Workdir    string `json:"workdir"`
	CreatedAt  int64  `json:"createdAt" jsonschema:"Unix seconds"`
	LastUsedAt int64  `json:"lastUsedAt" jsonschema:"Unix seconds"`
	ExpiresAt  int64  `json:"expiresAt" jsonschema:"Unix seconds"`
	Error      string `json:"error,omitempty"`
	// Woken says this call woke the sandbox from sleep.
	Woken bool `json:"woken,omitempty"`
	// MemoryKept says a sleeping sandbox's memory is checkpointed and will
	// come back on wake; of a woken one, that it came back. It is present,
	// true or false, exactly then: a backend without checkpoints says what
	// it did instead (false: the files were kept, the memory was not).
	MemoryKept *bool `json:"memoryKept,omitempty"`
	// Metadata is the caller's labels, as set at the lease or since.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Network is the egress policy the sandbox got (absent: none, its own
	// loopback only).
	Network *NetworkPolicy `json:"network,omitempty" jsonschema:"the egress policy the sandbox got; absent means no network"`
	// PublicPorts are the ports previewed with no key or link.
	PublicPorts []int `json:"publicPorts,omitempty" jsonschema:"ports whose previews anyone with the URL opens, with no key or link"`
}

// Created is CreatedAt as a time.
func (s *Sandbox) Created() time.Time { return time.Unix(s.CreatedAt, 0) }

// LastUsed is LastUsedAt as a time.
func (s *Sandbox) LastUsed() time.Time { return time.Unix(s.LastUsedAt, 0) }

// Expires is ExpiresAt as a time.
func (s *Sandbox) Expires() time.Time { return time.Unix(s.ExpiresAt, 0) }

// KeptMemory says MemoryKept is present and true: the sandbox's memory is
// checkpointed (sleeping) or came back (woken, forked).
func (s *Sandbox) KeptMemory() bool { return s.MemoryKept != nil && *s.MemoryKept }

// NetworkPolicy is a sandbox's egress policy as a lease asks for it and as
// its answer reports it (the server parses, bounds and matches it). The
// zero value, no allow entry, is "none": the sandbox's own loopback only.
type NetworkPolicy struct {
	// Allow lists destinations: "internet", a domain ("pypi.org"), a
	// wildcard for its subdomains ("*.github.com"), an IPv4 address or CIDR.
	Allow []string `json:"allow,omitempty" jsonschema:"destinations the sandbox may reach: \"internet\" (every public address), a domain (pypi.org), its subdomains (*.github.com), an IPv4 address or CIDR (203.0.113.0/24); empty means no network"`
	// Deny lists destinations (the same forms but "internet") that are
	// refused even when Allow covers them.
	Deny []string `json:"deny,omitempty" jsonschema:"destinations refused even when allow covers them: domains, wildcards, addresses, CIDRs"`
	// Ports restricts the destination ports (TCP and UDP); empty means any.
	Ports []int `json:"ports,omitempty" jsonschema:"destination ports allowed (empty: any)"`
}

// None reports whether the policy reaches nothing (no allow entry).
func (p *NetworkPolicy) None() bool { return p == nil || len(p.Allow) == 0 }

// LeaseRequest is the body of POST /v1/sandbox, and of the typed op and
// MCP tool lease (which embed it); every field may be left out.
type LeaseRequest struct {
	Class   string `json:"class,omitempty" jsonschema:"exec (default: short code runs), dev, desktop or android"`
	Project string `json:"project,omitempty" jsonschema:"project whose volume is mounted; required for every class but exec"`
	Image   string `json:"image,omitempty" jsonschema:"image name; defaults to the class's image"`
	Runtime string `json:"runtime,omitempty" jsonschema:"isolation runtime; defaults to the server's"`
	TTLSec  int64  `json:"ttlSec,omitempty" jsonschema:"lease length in seconds; defaults to the class's"`
	// Metadata is the caller's labels, shown on every answer and filtered
	// by in a list (?metadata.KEY=VALUE).
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"labels of the caller's (at most 32 keys, values of at most 512 bytes)"`
	// Run starts the image's own command once the sandbox runs.
	Run bool `json:"run,omitempty" jsonschema:"start a pulled image's own command (its Entrypoint and Cmd, in its WorkingDir) as a background process (GET .../processes shows it)"`
	// Network is the egress policy asked for; nil is none.
	Network *NetworkPolicy `json:"network,omitempty" jsonschema:"egress policy: what the sandbox may reach (absent: nothing but its own loopback); the operator's --network-allow bounds it, and the answer's network is what it got"`
	// PublicPorts are ports to preview with no key or link; refused
	// unless the operator allows public previews.
	PublicPorts []int `json:"publicPorts,omitempty" jsonschema:"ports whose previews anyone with the URL may open, with no key or link (at most 16); refused (403) unless the server allows public previews"`
}

// Page is one page of the org's sandboxes (GET /v1/sandbox), newest
// first; Next is empty on the last.
type Page struct {
	Sandboxes []*Sandbox `json:"sandboxes"`
	// Next is the cursor of the next page (?cursor=); absent on the last.
	Next string `json:"next,omitempty"`
}
