package wire

import "time"

// Usage is one class's lease count and lease-seconds for an org (GET
// /v1/sandbox/usage).
type Usage struct {
	Class        string  `json:"class"`
	Leases       int64   `json:"leases"`
	LeaseSeconds float64 `json:"leaseSeconds"`
}

// Quota is one quota of the org with its use, as GET /v1/sandbox/quota
// shows it.
type Quota struct {
	Name  string  `json:"name"`
	Class string  `json:"class,omitempty"`
	Limit float64 `json:"limit"`
	Used  float64 `json:"used"`
	Unit  string  `json:"unit,omitempty"`
}

// Policy is an org's quota limits: the body of PUT /v1/orgs/{org}/quota
// and both halves of its answer. In a per-org override a nil field means
// the server's value; in the policy in force every field is set.
type Policy struct {
	// Live bounds the live (pending, running or sleeping) sandboxes per
	// class.
	Live map[string]int `json:"live,omitempty"`
	// CPUs and MemoryMiB bound what the org's pending and running
	// sandboxes reserve (class limits, summed).
	CPUs      *float64 `json:"cpus,omitempty"`
	MemoryMiB *int64   `json:"memoryMiB,omitempty"`
	// DiskMiB bounds the project volumes (each at its class's size) and
	// the checkpoints (each at its sandbox's memory limit) the org keeps.
	DiskMiB *int64 `json:"diskMiB,omitempty"`
	// Projects bounds the projects whose volume the org keeps.
	Projects *int `json:"projects,omitempty"`
	// Commands bounds the org's concurrent commands: exec, file
	// operations, interpreter runs, terminals, screens and event-stream
	// followers.
	Commands *int `json:"commands,omitempty"`
}

// OrgQuota is an org's override and the policy in force (GET and PUT
// /v1/orgs/{org}/quota).
type OrgQuota struct {
	Org string `json:"org"`
	// Override is what the operator set for the org (absent: the server's).
	Override Policy `json:"override"`
	// Effective is the policy in force.
	Effective Policy `json:"effective"`
}

// Volume is a project volume of the org (GET /v1/volumes).
type Volume struct {
	Project    string    `json:"project"`
	SizeMiB    int64     `json:"sizeMiB"`
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt"`
	// LiveSandbox is the live sandbox holding it, if any.
	LiveSandbox string `json:"liveSandbox,omitempty"`
}

// Key is an API key as it can be shown: never its secret.
type Key struct {
	ID         string    `json:"id"`
	Org        string    `json:"org"`
	Subject    string    `json:"subject"`
	Prefix     string    `json:"prefix"` // the secret's first characters, to recognise it
	Scope      string    `json:"scope"`  // ScopeTenant or ScopeAdmin
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
}

// MintedKey is a key just minted (POST /v1/orgs/{org}/keys): its record
// and its secret, shown this once.
type MintedKey struct {
	// Secret is the key itself, shown this once.
	Secret string `json:"secret"`
	Key
}
