package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devledger/devledger/actors/pool"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi"
	"github.com/devledger/devledger/store"
)

// metrics is the daemon's Prometheus view. Counters follow the ledger: they
// move when an event is durable, never before. Gauges of pools are asked of
// the pool actors at scrape time.
type metrics struct {
	reg *prometheus.Registry

	events        *prometheus.CounterVec
	allocations   *prometheus.CounterVec
	releases      *prometheus.CounterVec
	leaks         *prometheus.CounterVec
	conflicts     *prometheus.CounterVec
	unhealthy     *prometheus.CounterVec
	registrations *prometheus.CounterVec
	regFailures   *prometheus.CounterVec
	kubelet       prometheus.Counter
	kubeletDown   prometheus.Gauge
	reloadOK      prometheus.Gauge // the last config read was applied
	reloadAt      prometheus.Gauge // when it was applied or rejected
	latency       *prometheus.HistogramVec

	// ledgerMu guards ledger, the fold of the recorded damage: set from
	// the replay, moved by recorded on the store's writer, read by /readyz.
	// A lock, not a message: the writer must not block on a mailbox, and
	// /readyz must answer while the actors are wedged.
	ledgerMu sync.Mutex
	ledger   events.LedgerState
}

// newMetrics starts from st, the state replay rebuilt in replayTook.
func newMetrics(d *Daemon, st events.State, replayTook time.Duration) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), ledger: st.Ledger}
	f := promauto.With(m.reg)
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Namespace: "devledger", Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Namespace: "devledger", Name: name, Help: help})
	}
	gaugeFunc := func(name, help string, fn func() float64) {
		f.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "devledger", Name: name, Help: help}, fn)
	}
	m.events = counter("events_total", "Events recorded in the ledger by this daemon run, by type.", "type")
	m.allocations = counter("allocations_total", "Allocations recorded (one per container request).", "pool")
	m.releases = counter("releases_total", "Allocations released (no container holds them any more).", "pool")
	m.leaks = counter("leak_suspects_total", "Allocations no container claimed within the grace period.", "pool")
	m.conflicts = counter("allocation_conflicts_total", "Devices claimed twice.", "pool")
	m.unhealthy = counter("unhealthy_allocations_total", "Devices allocated while the pool listed them unhealthy (a race the kubelet lost).", "pool")
	m.registrations = counter("registrations_total", "Registrations the kubelet acknowledged.", "pool")
	m.regFailures = counter("registration_failures_total", "Registrations that failed or were refused.", "pool")
	for name := range st.Pools {
		m.startPool(name)
	}
	// A pool the config dropped keeps its live allocations until their
	// containers go; their release or leak counts from 0, or increase()
	// never sees it.
	for _, a := range st.Allocations {
		m.startPool(a.Pool)
	}
	m.kubelet = f.NewCounter(prometheus.CounterOpts{Namespace: "devledger", Name: "kubelet_restarts_total", Help: "New kubelets seen (their registration socket appeared, or one recorded gone answered or registered a pool again)."})
	m.kubeletDown = gauge("kubelet_down",
		"1 from a recorded KubeletStopped (the kubelet's streams ended or never came, a Register did not reach it or its socket was removed, and the socket then refused a connection, was gone or did not answer) to the next kubelet.")
	m.kubeletDown.Set(b2f(st.Kubelet.Down))
	// The ledger's own, not the Recorder's: the store records snapshots
	// and retention's drops itself.
	gaugeFunc("ledger_sequence", "Sequence of the newest durable event.",
		func() float64 { return float64(d.ledger.LastSeq()) })
	gauge("replay_duration_seconds", "How long replaying the ledger took at start.").Set(replayTook.Seconds())
	m.reloadOK = gauge("config_last_reload_successful",
		"1 if the last config read (at start or on reload) was applied, 0 if it was rejected.")
	m.reloadAt = gauge("config_last_reload_timestamp_seconds",
		"When the last config was applied or rejected (at start: the start).")
	m.reloadOK.Set(1) // a daemon runs only with a config it applied
	m.reloadAt.SetToCurrentTime()
	gaugeFunc("ledger_damage_unacknowledged",
		"Damage found in the ledger file and recorded (LedgerDamaged) that no operator acknowledged yet; /readyz is false while it is not 0.",
		func() float64 { return float64(len(m.damage().Damage)) })
	gaugeFunc("ledger_append_failing",
		"1 while the last append to the ledger failed and none has succeeded since: nothing can be recorded, Allocate fails, /readyz is false.",
		func() float64 { return b2f(d.ledger.AppendFault() != nil) })
	gaugeFunc("ledger_oldest_event_timestamp_seconds",
		"Time of the oldest event the ledger keeps (retention drops older ones); 0 for an empty ledger.",
		func() float64 { return oldestEventTime(d.ledger) })
	gaugeFunc("ledger_size_bytes", "Size of the ledger file.",
		func() float64 { return float64(d.ledger.SizeBytes()) })
	f.NewCounterFunc(prometheus.CounterOpts{Namespace: "devledger", Name: "ledger_append_failures_total",
		Help: "Appends to the ledger whose transaction failed (disk full, I/O error); each failed the calls it carried."},
		func() float64 { return float64(d.ledger.AppendFailures()) })
	m.latency = f.NewHistogramVec(prometheus.HistogramOpts{Namespace: "devledger", Name: "allocate_duration_seconds",
		Help:    "Allocate calls, from the kubelet's request to the durable answer.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5}}, []string{"pool", "code"})
	f.NewGaugeVec(prometheus.GaugeOpts{Namespace: "devledger", Name: "build_info",
		Help: "The build of the running daemon: its version and Go version; always 1."}, []string{"version", "goversion"}).
		WithLabelValues(d.opts.Version, runtime.Version()).Set(1)
	m.reg.MustRegister(&poolCollector{d: d}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// recorded counts a durable batch.
func (m *metrics) recorded(envs []events.Envelope) {
	for _, e := range envs {
		m.events.WithLabelValues(string(e.Type)).Inc()
		switch p := e.Payload.(type) {
		case events.DevicesAllocated:
			m.allocations.WithLabelValues(p.Pool).Inc()
			// Superseded allocations end here; another pool's holder is a conflict.
			m.releases.WithLabelValues(p.Pool).Add(float64(len(p.Supersedes)))
			m.conflicts.WithLabelValues(p.Pool).Add(float64(len(p.HeldElsewhere)))
			m.unhealthy.WithLabelValues(p.Pool).Add(float64(len(p.Unhealthy)))
		case events.DevicesReleased:
			m.releases.WithLabelValues(p.Pool).Inc()
		case events.AllocationLeakSuspected:
			m.leaks.WithLabelValues(p.Pool).Inc()
		case events.AllocationConflict:
			m.conflicts.WithLabelValues(p.Pool).Inc()
		case events.PluginRegistered:
			m.registrations.WithLabelValues(p.Pool).Inc()
		case events.RegistrationFailed:
			m.regFailures.WithLabelValues(p.Pool).Inc()
		case events.KubeletRestarted:
			m.kubelet.Inc()
			m.kubeletDown.Set(0)
		case events.KubeletStopped:
			m.kubeletDown.Set(1)
		case events.ConfigApplied:
			for _, spec := range p.Pools {
				m.startPool(spec.Resource)
			}
			m.reloadOK.Set(1)
			m.reloadAt.Set(float64(e.Time.UnixNano()) / 1e9)
		case events.ConfigRejected:
			m.reloadOK.Set(0)
			m.reloadAt.Set(float64(e.Time.UnixNano()) / 1e9)
		case events.LedgerDamaged, events.DamageAcknowledged:
			m.ledgerMu.Lock()
			m.ledger = events.ApplyLedger(m.ledger, p)
			m.ledgerMu.Unlock()
		}
	}
}

// storeRecorded counts an event the store appended itself, past the
// Recorder (a snapshot's SnapshotTaken, retention's EventsDropped).
func (m *metrics) storeRecorded(t events.Type) {
	m.events.WithLabelValues(string(t)).Inc()
}

// damage is the damage recorded in the ledger, as the fold has it now.
func (m *metrics) damage() events.LedgerState {
	m.ledgerMu.Lock()
	defer m.ledgerMu.Unlock()
	return m.ledger
}

// startPool makes pool's counters exist at zero, so that a pool without
// events can be told from a pool not there.
func (m *metrics) startPool(pool string) {
	for _, c := range []*prometheus.CounterVec{m.allocations, m.releases, m.leaks, m.conflicts, m.unhealthy, m.registrations, m.regFailures} {
		c.WithLabelValues(pool)
	}
}

// allocated observes one Allocate call.
func (m *metrics) allocated(poolName string, took time.Duration, err error) {
	// The code the kubelet gets: the pool's errors become gRPC statuses
	// only at the server, so status.Code would say Unknown.
	m.latency.WithLabelValues(poolName, grpcapi.Code(err).String()).Observe(took.Seconds())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var (
	poolDevicesDesc   = prometheus.NewDesc("devledger_pool_devices", "Devices in each pool of the config, by health (0 and 0 for a pool with none).", []string{"pool", "health"}, nil)
	poolAllocatedDesc = prometheus.NewDesc("devledger_pool_allocated_devices",
		"Devices of each pool that a live allocation of the pool holds.", []string{"pool"}, nil)
	poolFreeDesc = prometheus.NewDesc("devledger_pool_free_devices",
		"Devices of each pool that can be given out now: healthy, held by no live allocation (of any pool), none being allocated.", []string{"pool"}, nil)
	poolRegisteredDesc = prometheus.NewDesc("devledger_pool_registered",
		"1 if the kubelet acknowledged the pool's registration of its current socket, 0 if not: every pool served (one with no devices is not, unless advertiseEmpty).", []string{"pool"}, nil)
)

// poolCollector asks every pool for its members, and the registrar for its
// registrations, at scrape time.
type poolCollector struct{ d *Daemon }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolDevicesDesc
	ch <- poolAllocatedDesc
	ch <- poolFreeDesc
	ch <- poolRegisteredDesc
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	kids, err := c.d.Children(ctx)
	if err != nil {
		return
	}
	// Every pool is asked at once, and the registrar meanwhile: one pool
	// that does not answer in time (busy placing, restarting) leaves out
	// its own series, not the others'.
	asked := make(map[string]*actor.Future, len(kids.Pools))
	for name, pid := range kids.Pools {
		asked[name] = c.d.system.Root.RequestFuture(pid, &pool.Query{}, timeoutOf(ctx))
	}
	if reg, err := c.d.Status(ctx); err == nil {
		for _, p := range reg.Pools {
			if !p.NoDevices { // a pool not served is not registered, nor meant to be
				ch <- prometheus.MustNewConstMetric(poolRegisteredDesc, prometheus.GaugeValue, b2f(p.Registered), p.Resource)
			}
		}
	}
	for name, f := range asked {
		res, err := f.Result()
		if err != nil {
			continue
		}
		st := res.(*pool.Status)
		ch <- prometheus.MustNewConstMetric(poolDevicesDesc, prometheus.GaugeValue, float64(st.Healthy), name, "healthy")
		ch <- prometheus.MustNewConstMetric(poolDevicesDesc, prometheus.GaugeValue, float64(st.Members-st.Healthy), name, "unhealthy")
		ch <- prometheus.MustNewConstMetric(poolAllocatedDesc, prometheus.GaugeValue, float64(st.Allocated), name)
		ch <- prometheus.MustNewConstMetric(poolFreeDesc, prometheus.GaugeValue, float64(st.Free), name)
	}
	// A pool of the config with no devices runs no allocator once the
	// first scan placed them: it offers none, which is what an alert
	// must see (no series would read as nothing to say).
	for _, name := range kids.Configured {
		if _, running := kids.Pools[name]; running || !kids.Placed {
			continue
		}
		for _, health := range []string{"healthy", "unhealthy"} {
			ch <- prometheus.MustNewConstMetric(poolDevicesDesc, prometheus.GaugeValue, 0, name, health)
		}
		ch <- prometheus.MustNewConstMetric(poolAllocatedDesc, prometheus.GaugeValue, 0, name)
		ch <- prometheus.MustNewConstMetric(poolFreeDesc, prometheus.GaugeValue, 0, name)
	}
}

// metricsIdleTimeout closes a kept-alive connection that sends no next
// request. With none, each such connection (anyone on the host network can
// open them) holds one of the daemon's file descriptors for good; a
// Prometheus scraping every minute or less keeps its own.
var metricsIdleTimeout = 2 * time.Minute

// metricsReadTimeout bounds the reading of a whole request, its body
// included. No handler reads a body, but the server reads one a request
// announces before it answers: one that never comes would hold the
// connection for good. A scraper's GET has none and is read at once.
var metricsReadTimeout = 10 * time.Second

// metricsWriteTimeout bounds the handling of a request and the writing
// of its answer. A client that asks and does not read would else hold
// the connection for good once its window is full. Every handler is
// done in 2 s.
var metricsWriteTimeout = 30 * time.Second

// metricsMaxHeaderBytes bounds a request's header. A scraper or a probe
// sends a few hundred bytes; the net/http default, 1 MiB, let anyone on
// the host network make the daemon buffer a megabyte per connection for
// ReadHeaderTimeout, and a hundred such connections take the container
// past its 128 MiB memory limit.
const metricsMaxHeaderBytes = 8 << 10

// serveMetrics serves /metrics, /healthz (the actors answer) and /readyz
// (every pool registered) on ln.
func (d *Daemon) serveMetrics(ln net.Listener) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	probe := func(check func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := check(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok\n"))
		}
	}
	mux.HandleFunc("/healthz", probe(d.answers))
	mux.HandleFunc("/readyz", probe(d.notReady))
	d.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: metricsReadTimeout,
		WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout, MaxHeaderBytes: metricsMaxHeaderBytes}
	d.metricsAddr = ln.Addr().String()
	go func() {
		if err := d.metricsSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error().Err(err).Msg("metrics server")
		}
	}()
	d.log.Info().Str("addr", d.metricsAddr).Msg("serving metrics, /healthz and /readyz")
}

// oldestEventTime is the Unix time of the ledger's oldest event, 0 when it
// has none (or it cannot be read). An event a newer devledger wrote still
// tells its time: after a rollback, retention stops at the first one, and
// it is the oldest kept from then on. An event without a time (the
// EventLost a salvage puts in place of each event lost from the start of a
// ledger) tells none: the oldest event that has one counts.
func oldestEventTime(l *store.Log) float64 {
	var at time.Time
	stop := errors.New("stop")
	_ = l.ReadRaw(l.FirstSeq(), func(_ uint64, rec []byte) error {
		e, err := events.Unmarshal(rec)
		if err != nil && !errors.Is(err, events.ErrUnknownType) && !errors.Is(err, events.ErrUnknownVersion) {
			return stop
		}
		if e.Time.IsZero() {
			return nil
		}
		at = e.Time
		return stop
	})
	if at.IsZero() {
		return 0
	}
	return float64(at.UnixNano()) / 1e9
}
