package main

import "testing"

// TestSentryKept: of the sentry's option keys, those of a platform the
// runtime allows and no device proxy are kept.
func TestSentryKept(t *testing.T) {
	const base = `GOARCH="amd64" Platform="systrap" HostNetwork=false HostNetworkRawSockets=false HostFilesystem=true ProfileEnable=false Instrumentation=false NVProxy=false NVProxyCaps= TPUProxy=false RDMAProxy=false CgoEnabled=false PluginNetwork=false`
	for key, want := range map[string]bool{
		base: true,
		`GOARCH="amd64" Platform="kvm" HostNetwork=true NVProxy=false TPUProxy=false RDMAProxy=false`:       true,
		`GOARCH="amd64" Platform="slimvm" HostNetwork=true NVProxy=false TPUProxy=false RDMAProxy=false`:    false,
		`GOARCH="amd64" Platform="systrap" NVProxy=true NVProxyCaps=compute TPUProxy=false RDMAProxy=false`: false,
		`GOARCH="amd64" Platform="systrap" NVProxy=false TPUProxy=true RDMAProxy=false`:                     false,
		`GOARCH="amd64" Platform="systrap" NVProxy=false TPUProxy=false RDMAProxy=true`:                     false,
		// A key without a field it is judged by (a renamed option) is not
		// kept: the generator then fails for having kept none.
		`GOARCH="amd64" Platform="systrap" TPUProxy=false RDMAProxy=false`: false,
		"": false,
	} {
		if got := sentryKept(key); got != want {
			t.Errorf("sentryKept(%q) = %v, want %v", key, got, want)
		}
	}
}
