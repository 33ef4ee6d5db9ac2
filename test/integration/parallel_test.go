package integration_test

// Which tests run in parallel, and why these.
//
// The suite ran one test at a time for ~19 minutes with the machine's two
// cores 60% idle: most of a test is waiting on something real (a pod to
// start, a helm upgrade, a kernel to boot, a 3 s connect timeout to prove
// a refusal). The longest of those call t.Parallel() first; go test runs
// every serial test before any parallel one, and at most -parallel of
// those at a time (scripts/test.sh: 4).
//
// A test may run in parallel when it is isolated and holds no tight clock:
//   - its server has its own data directory, runsc root and loopback port
//     (newEnv), its kube namespace is its own (testenv.KubeNamespace), its
//     test internet its own network namespaces (testenv.NewInternet); what
//     is the host's (routes to the routed internets) is behind a lock that
//     tests of any package take in turn (testenv.NewRoutedInternet);
//   - it does not call t.Setenv or write a package variable (keywatch.Every);
//   - nothing it asserts is a short time or a rate: sandboxes run at a low
//     CPU weight, so a busy host slows them first. Bounds of the parallel
//     ones were widened where they were near that (a lease within a minute
//     in the SDK suites, 30 s polls).
//
// A test that takes the host's route lock (testenv.NewRoutedInternet) and
// runs in parallel holds one of the slots while it waits for it; the lock's
// longest holder, TestHelmInCluster (~4 minutes), is the only one of them
// that runs in parallel, so no slot waits on it.
//
// Serial on purpose: the host-uplink egress test (it runs before the
// cluster exists), TestAbuseIsContained (it is the load), the resolver
// flood (it measures this process's memory and files), the bandwidth and
// flow-cutting windows, the connection bound (nftables' ct count admits
// connections not yet confirmed: beside other tests 10 of 20 got through a
// bound of 8), the node-filling density test, and every test that
// reads the time it took. The rest are short, or not yet looked at.
