// Package load holds the hostile-tenant suite: it builds and starts the
// real `sandbox serve` on the real runsc, and plays tenant A flooding what
// every org shares beside a quiet tenant B, on this machine's loopback only,
// with bounded loops that stop by themselves. For each flood it reads the
// server's resident memory from /proc, B's `exec true` p50 against its idle
// value, the status and message of every refusal, /readyz, and B's files.
//
// SANDBOX_LOAD_BIN runs it against another build (an older release, for the
// numbers before a bound); SANDBOX_LOAD_REPORT=1 then only reports.
package load
