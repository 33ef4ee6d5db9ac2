// Package sdk runs the test suites of the Python and TypeScript SDKs
// against a real server: each test starts `sandbox serve` (testenv.Serve),
// installs the SDK the way its README says, and runs the SDK's own test
// runner (pytest, node --test) with SANDBOX_URL and SANDBOX_KEY.
package sdk
