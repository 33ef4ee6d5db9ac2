// Package sandbox is the domain of the service: the Sandbox record, the closed
// table of classes, the statuses a sandbox moves through, the lease rules that
// are pure functions of their inputs, path confinement, and the error kinds
// every other package wraps so that the HTTP layer can map them to statuses in
// one place.
//
// It imports nothing heavier than the standard library on purpose: the store,
// the runtimes and the API all depend on it, never the reverse.
package sandbox
