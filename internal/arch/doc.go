// Package arch holds no code: its test checks the import graph against the
// layering docs/architecture.md states (the domain imports nothing of
// ours, no part above the runtime interface reaches a backend, the store
// never reaches the runtime, the console and the interpreter reach
// sandboxes only through the interfaces they own).
package arch
