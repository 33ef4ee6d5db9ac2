// Package metrics holds the service's Prometheus collectors on a registry of
// its own (no global state), served at /metrics to the operator org.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the collectors. A nil *Metrics records nothing.
type Metrics struct {
	reg     *prometheus.Registry
	leases  *prometheus.CounterVec
	live    *prometheus.GaugeVec
	execDur *prometheus.HistogramVec
	ports   *prometheus.CounterVec
}

// New registers the collectors on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_leases_total", Help: "Lease attempts by class and outcome (created, refused, failed).",
		}, []string{"class", "outcome"}),
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandbox_live", Help: "Running sandboxes by class, over all orgs.",
		}, []string{"class"}),
		execDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandbox_exec_seconds", Help: "Latency of commands run in sandboxes (exec and fs), by operation.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"op"}),
		ports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_port_connections_total", Help: "Connections opened to ports on sandboxes' loopback (previews), by path: forward (the runtime's own port forward) or relay (a stream of the runner's relay).",
		}, []string{"path"}),
	}
	m.reg.MustRegister(m.leases, m.live, m.execDur, m.ports,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Lease counts one lease attempt.
func (m *Metrics) Lease(class, outcome string) {
	if m != nil {
		m.leases.WithLabelValues(class, outcome).Inc()
	}
}

// Live moves the live gauge of class by delta.
func (m *Metrics) Live(class string, delta float64) {
	if m != nil {
		m.live.WithLabelValues(class).Add(delta)
	}
}

// Exec observes one command's latency.
func (m *Metrics) Exec(op string, d time.Duration) {
	if m != nil {
		m.execDur.WithLabelValues(op).Observe(d.Seconds())
	}
}

// PortConnection counts one connection to a sandbox's port, by path.
func (m *Metrics) PortConnection(path string) {
	if m != nil {
		m.ports.WithLabelValues(path).Inc()
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
