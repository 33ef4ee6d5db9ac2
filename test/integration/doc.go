// Package integration holds the suites that hold the whole server to its
// behaviour on the real parts: the real runsc, real SQLite, a real
// browser, a real registry, real OpenID and MCP implementations, a real
// Kubernetes cluster with a real NetworkPolicy enforcer, and real helm.
// Each suite skips, naming what is missing, where a part is not there
// (SANDBOX_TEST_REQUIRE turns the skip into a failure: scripts/test.sh).
// Their benchmarks live here too, beside the helpers they share. The
// wiring package (internal/server) keeps only its own unit tests.
package integration
