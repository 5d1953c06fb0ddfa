// Package reconciler is the PodResources reconciler actor. The
// device-plugin API never says which pod got a device nor when it let go;
// the kubelet's PodResources service does. Shortly after each allocation
// (its pod is being created) and periodically, the reconciler lists pod
// resources and records what changed (see fold): bindings, releases,
// conflicts, and leaks suspected after a grace period. While PodResources
// cannot be read it says so once, retries with backoff, and the daemon
// serves on.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devledger/devledger/actors/internal/handoff"
	"github.com/devledger/devledger/actors/internal/wake"
	"github.com/devledger/devledger/actors/ledger"
	"github.com/devledger/devledger/actors/reconciler/checkpoint"
	"github.com/devledger/devledger/actors/supervise"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/store"
)

// Lister is the kubelet's PodResources List (grpcapi.PodResourcesClient).
type Lister interface {
	List(ctx context.Context) (*podresourcesapi.ListPodResourcesResponse, error)
}

// Config is what the reconciler needs.
type Config struct {
	Recorder *ledger.Recorder
	Lister   Lister
	// Replayed is the ledger's state for the first incarnation; a
	// restarted reconciler replays.
	Replayed *events.State
	// Interval paces periodic rounds (default 30s), AfterAllocate delays
	// the round after an allocation (2s), LeakGrace is how long one may
	// stay unclaimed (5m), RetryMax caps the backoff while PodResources
	// fails (5m), CallTimeout bounds one List (10s).
	Interval, AfterAllocate, LeakGrace, RetryMax, CallTimeout time.Duration
	// KubeletSettle (1m) is how long after a kubelet starts a bound pod
	// missing from its list is not taken as gone. A kubelet serves
	// PodResources and makes its registration socket before it has its
	// pods back (they are added as its sync loop takes them from the API
	// server, once the runtime is up), and lists none until then, while
	// they hold their devices throughout (the kubelet's checkpoint; it
	// does not call Allocate for them again).
	KubeletSettle time.Duration
	// Self is the daemon's own pod, when it runs in one (the downward
	// API's POD_NAMESPACE and POD_NAME). A kubelet that does not list it
	// has not synced its pods from the API server: one restarted while
	// the API server is away lists static pods alone, for as long as that
	// lasts, past any KubeletSettle. While it does not, a bound pod
	// missing from its list is not taken as gone either. Empty:
	// KubeletSettle alone says.
	Self Pod
	// Checkpoint is the path of the kubelet device manager's checkpoint
	// (<kubelet-dir>/device-plugins/kubelet_internal_checkpoint), read
	// for the pod UID of each binding a round records, and by the first
	// round: PodResources gives none. A file missing or unreadable
	// leaves the UIDs empty, and is logged once each time that changes;
	// so does an entry read before the allocation was in the ledger,
	// which is an earlier pod's (the kubelet writes the file after the
	// Allocate, and not when a pod goes). Empty: no UIDs.
	Checkpoint string
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log zerolog.Logger
}

// Pod names a pod.
type Pod struct{ Namespace, Name string }

// Props returns the props of a reconciler.
func Props(cfg Config) *actor.Props {
	supervise.OrDefault(&cfg.Interval, 30*time.Second)
	supervise.OrDefault(&cfg.AfterAllocate, 2*time.Second)
	supervise.OrDefault(&cfg.LeakGrace, 5*time.Minute)
	supervise.OrDefault(&cfg.RetryMax, 5*time.Minute)
	supervise.OrDefault(&cfg.CallTimeout, 10*time.Second)
	supervise.OrDefault(&cfg.KubeletSettle, time.Minute)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	replayed := handoff.First(cfg.Replayed)
	life := &lifetime{}
	return actor.PropsFromProducer(func() actor.Actor {
		return &reconciler{cfg: cfg, replayed: replayed(), life: life}
	}, actor.WithDispatcher(supervise.Warm))
}

// lifetime is what the reconciler keeps across its incarnations. Only the
// actor's goroutine touches it, one incarnation after another.
type lifetime struct {
	// persist holds messages back while a round's events are being
	// recorded: the fold reads them back, and tells the parent, first.
	persist ledger.Persister
	// kubeletAt is when the parent last told of a kubelet started (see
	// KubeletSettle), before its KubeletRestarted may be in the ledger,
	// or when PodResources answered again after it was away or after
	// the ledger recorded the kubelet stopped. stopAnswered is the
	// recorded stop (its DownSince) whose first answer set kubeletAt.
	kubeletAt, stopAnswered time.Time
	// restartRead is the ledger's KubeletRestarted time (LastRestart)
	// that kubeletAt last took in.
	restartRead time.Time
	// since is when each live allocation a round met began, on this
	// process's clock (see heldSince). It outlives an incarnation: one
	// restarted would read the allocation's age by the wall clock again.
	since map[uint64]time.Time
	// seen are the last round's findings (foldInput.seen): a standing
	// conflict is recorded once, not again by each incarnation. A node
	// coordinator that restarts spawns the reconciler anew, with a
	// lifetime of its own: it records the conflict once more, as a
	// daemon restart does.
	seen map[string]bool
	// away: the last List failed as it does while the kubelet is away
	// (Unavailable: no socket, refused, cut off), or the ledger said
	// PodResources was unavailable as this process started; the next
	// answer may come from a kubelet that has just started. warned: this
	// process has said that PodResources fails, once for each time it
	// starts failing.
	away, warned bool
	// unrecorded counts the rounds in a row whose events the ledger
	// refused: the first is logged as an error, the others at debug.
	unrecorded int
	// checkpointFails is what kept the kubelet's checkpoint from being
	// read last time ("" when it was read), logged when it changes.
	checkpointFails string
	// checkpointSeen holds each entry of the checkpoint last read (by
	// entryKey) with the ledger's end when it was first read (see podUID).
	// checkpointTried: the checkpoint was read once, at the first round.
	checkpointSeen  map[string]uint64
	checkpointTried bool
}

type reconciler struct {
	cfg      Config
	replayed *events.State
	// st is the fold of the ledger up to st.Seq (see catchUp).
	st events.State
	// told are the allocations a round may attribute (Allocated, live at
	// the first start, or recovered here): the pool and the node hold one
	// before they hear of its binding, release or leak.
	told     map[uint64]bool
	failures int
	// listing is the answer the List out will fill (nil: none is out);
	// another, an earlier incarnation's, is not taken.
	listing *listed
	// listedFrom is the ledger's end as the pending List began: what
	// landed after it, the list may not show.
	listedFrom uint64
	again      bool       // a round was asked for while one was out
	timer      wake.Timer // the next round's
	rounds     int
	// quiets came while a round's List was out: the round may record, so
	// they are answered once it has (see quieting).
	quiets  []*ledger.Quiet
	life    *lifetime
	closing bool // ending: a round settled now starts no new one
	// unsynced: the last list lacked Self (logged once per change).
	unsynced bool
}

// Receive implements actor.Actor.
func (r *reconciler) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.start(ctx)
	case *actor.Stopping, *actor.Restarting:
		r.closing = true
		r.timer.Stop()
		r.life.persist.Settle()
		// The round out ends with this incarnation: nothing it owes is left.
		for _, q := range r.quiets {
			close(q.Done)
		}
		r.quiets = nil
	case *ledger.Landed:
		r.life.persist.Land(m, func(m any) { r.handle(ctx, m) })
	case *Crash:
		panic("reconciler: injected crash: " + m.Reason)
	case *ledger.Quiet:
		r.quiet(ctx, m)
	case *Query:
		if !r.life.persist.Busy() {
			// Not while a round's events are in flight: read now, the
			// parent would never hear of them.
			r.catchUp(ctx, nil)
		}
		st := &Status{Available: r.available(), Rounds: r.rounds, Told: len(r.told), Allocations: map[uint64]string{}}
		for seq, a := range r.st.Allocations {
			st.Allocations[seq] = ""
			if b := a.Binding; b != nil {
				st.Allocations[seq] = b.Namespace + "/" + b.Pod + "/" + b.Container
			}
			if a.LeakSuspected {
				st.Suspects = append(st.Suspects, seq)
			}
		}
		slices.Sort(st.Suspects)
		ctx.Respond(st)
	default:
		if !r.life.persist.Hold(m) {
			r.handle(ctx, m)
		}
	}
}

func (r *reconciler) handle(ctx actor.Context, m any) {
	switch m := m.(type) {
	case *Allocated:
		r.told[m.Seq] = true
		r.schedule(ctx, r.cfg.AfterAllocate)
	case *Reconcile:
		if m.KubeletBack {
			r.life.kubeletAt = r.cfg.Now()
		}
		r.failures = 0 // asked for (the kubelet is back): backoff starts over
		r.round(ctx)
	case *wake.Tick:
		if !r.timer.Take(m) {
			return // stale (see wake)
		}
		r.round(ctx)
	case *listed:
		if m == r.listing {
			r.listed(ctx, m)
			waiting := r.quiets
			r.quiets = nil
			for _, q := range waiting {
				r.quiet(ctx, q)
			}
		}
	case *quieting:
		if r.listing != nil {
			r.quiets = append(r.quiets, m.q)
		} else {
			close(m.q.Done)
		}
	}
}

// quieting is a ledger.Quiet on its way through the actor: at rest means
// no round's List out either, whose answer the round records (a test
// that waits for the reconciler waits for its round).
type quieting struct{ q *ledger.Quiet }

// quiet takes q in order, held behind what an append holds as any
// message is.
func (r *reconciler) quiet(ctx actor.Context, q *ledger.Quiet) {
	if !r.life.persist.Hold(&quieting{q}) {
		r.handle(ctx, &quieting{q})
	}
}

func (r *reconciler) start(ctx actor.Context) {
	r.told = map[uint64]bool{}
	if r.life.since == nil {
		r.life.since = map[uint64]time.Time{}
	}
	st := r.replayed
	if st == nil {
		// Restarted: the ledger may have allocations its pool has not
		// landed yet. The parent tells of those it holds.
		s, err := r.cfg.Recorder.Replay()
		if err != nil {
			panic(err)
		}
		st = &s
		ctx.Send(ctx.Parent(), &NeedTold{})
	} else {
		// First incarnation: the pools and the node start from st too.
		for seq := range st.Allocations {
			r.told[seq] = true
		}
	}
	first := r.replayed != nil
	r.replayed = nil
	r.st = st.Clone()
	if first {
		r.life.away = !r.available()
		if r.cfg.Self.Name == "" {
			// A kubelet that was up before the daemon and has not synced
			// its pods yet is then caught only by KubeletSettle, which a
			// daemon start does not begin: its first round may release
			// the allocations of pods not listed yet (after a reboot).
			r.cfg.Log.Warn().Msg("this daemon's pod is unknown (POD_NAMESPACE, POD_NAME unset): a kubelet that has not synced its pods from the API server cannot be told apart, and bound pods it does not list yet may be taken as gone")
		}
	}
	r.schedule(ctx, 0)
	r.life.persist.Resume(func(m any) { r.handle(ctx, m) })
}

// available says whether the ledger has PodResources answering (until it
// says otherwise).
func (r *reconciler) available() bool {
	a := r.st.Attribution
	return a.Available || a.Since.IsZero()
}

// catchUp folds the ledger's events after st.Seq into st, telling the
// parent of those in mine (just recorded here). Where retention dropped
// what the fold had not read yet, it folds the ledger's state instead,
// which holds it, and tells the parent of mine as they are. An unreadable
// ledger crashes the actor, which replays afresh.
func (r *reconciler) catchUp(ctx actor.Context, mine []events.Envelope) {
	next := r.st.Seq + 1
	err := r.cfg.Recorder.Log().Read(next, func(e events.Envelope) error {
		if e.Seq != next {
			return errRetained
		}
		next++
		if len(mine) > 0 && e.Seq >= mine[0].Seq && e.Seq <= mine[len(mine)-1].Seq {
			r.tell(ctx, e)
		} else {
			r.st = events.Apply(r.st, e)
		}
		return nil
	})
	if errors.Is(err, errRetained) {
		st, err := r.cfg.Recorder.Replay()
		if err != nil {
			panic(fmt.Errorf("reconciler: fold the ledger retention cut after #%d: %w", r.st.Seq, err))
		}
		for _, e := range mine { // none of them read: the read stopped at once
			r.tell(ctx, e)
		}
		r.st = st
		return
	}
	if err != nil {
		panic(fmt.Errorf("reconciler: read the ledger after #%d: %w", r.st.Seq, err))
	}
}

// errRetained stops a read that retention left a gap before.
var errRetained = errors.New("retention dropped events the fold had not read")

// schedule arranges a round after d, unless one is due sooner.
func (r *reconciler) schedule(ctx actor.Context, d time.Duration) {
	if !r.closing {
		r.timer.At(ctx, r.cfg.Now(), d)
	}
}

// round lists pod resources off the actor's thread.
func (r *reconciler) round(ctx actor.Context) {
	if r.closing {
		return
	}
	if r.listing != nil {
		r.again = true
		return
	}
	l := &listed{}
	r.listing = l
	r.catchUp(ctx, nil)
	r.listedFrom = r.st.Seq
	self, root, lister, timeout := ctx.Self(), ctx.ActorSystem().Root, r.cfg.Lister, r.cfg.CallTimeout
	go func() {
		lctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		l.resp, l.err = lister.List(lctx)
		root.Send(self, l)
	}()
}

// listed records what the fold of a round's pods finds; once durable,
// recorded reads it back, tells the parent and schedules the next round.
func (r *reconciler) listed(ctx actor.Context, m *listed) {
	r.listing = nil
	r.catchUp(ctx, nil)
	r.forgetEnded()
	if m.err != nil {
		r.failures++
		if status.Code(m.err) == codes.Unavailable {
			r.life.away = true
		}
		delay := supervise.Doubling(time.Second, r.cfg.RetryMax, r.failures)
		if !r.available() {
			// The ledger says so already (this process's own record, or
			// one from before it started, which it has not said yet).
			if !r.life.warned {
				r.life.warned = true
				r.cfg.Log.Warn().Err(m.err).Time("since", r.st.Attribution.Since).Dur("retry_in_ms", delay).
					Msg("pod resources still unavailable; devices are served but not attributed to pods")
			}
			r.schedule(ctx, delay)
			r.roundAgain(ctx)
			return
		}
		unavailable := events.AttributionChanged{Available: false, Reason: m.err.Error()}
		r.life.persist.Persist(ctx, r.cfg.Recorder, nil, []events.Payload{unavailable}, func(envs []events.Envelope, err error) {
			if err != nil {
				r.life.unrecorded++
				r.cfg.Log.WithLevel(supervise.FailureLevel(r.life.unrecorded)).Err(err).Msg("cannot record that pod resources are unavailable")
			} else {
				r.life.unrecorded = 0
				r.catchUp(ctx, envs)
				r.life.warned = true
				r.cfg.Log.Warn().Err(m.err).Dur("retry_in_ms", delay).Msg("pod resources unavailable; devices are served but not attributed to pods")
			}
			r.schedule(ctx, delay)
			r.roundAgain(ctx)
		})
		return
	}
	r.failures = 0
	now := r.cfg.Now()
	// Back: a kubelet may have started, serving PodResources before
	// the parent hears of its kubelet.sock. A restart between two rounds
	// fails no List, but the registrar records the kubelet stopped.
	k := r.st.Kubelet
	if stopped := k.Down && !k.DownSince.Equal(r.life.stopAnswered); r.life.away || stopped {
		r.life.kubeletAt = now
	}
	if k.Down {
		r.life.stopAnswered = k.DownSince
	}
	r.life.away, r.life.warned = false, false
	var payloads []events.Payload
	if !r.available() {
		payloads = append(payloads, events.AttributionChanged{Available: true, Reason: "pod resources answered"})
	}
	// The kubelet settles from its start: as the parent told, as the
	// ledger says (KubeletRestarted), which a reconciler its parent
	// starts again reads, or from the first answer after it was away or
	// recorded stopped.
	if last := r.st.Kubelet.LastRestart; !last.Equal(r.life.restartRead) {
		// The event's time is the wall clock's, which NTP may step
		// between then and now: its age, read once and never below
		// zero, becomes a time on this process's clock, which steps do
		// not move. Compared by the wall, a clock stepped back since
		// would keep the kubelet settling for as long as the step, and
		// one stepped forward would end its settle at once.
		r.life.restartRead = last
		if at := now.Add(-max(now.Sub(last), 0)); at.After(r.life.kubeletAt) {
			r.life.kubeletAt = at
		}
	}
	back := r.life.kubeletAt
	settle := r.cfg.KubeletSettle - now.Sub(back)
	if settle > 0 {
		r.schedule(ctx, settle) // a round once the kubelet has its pods
	}
	r.synced(m.resp.GetPodResources())
	res := fold(foldInput{pools: r.st.Pools, allocs: r.heldSince(now), now: now, grace: r.cfg.LeakGrace, seen: r.life.seen,
		settling: settle > 0 || r.unsynced}, m.resp.GetPodResources())
	payloads = append(payloads, res.payloads...)
	r.podUIDs(payloads)
	if len(payloads) == 0 {
		r.recorded(ctx, res.seen, 0, nil, nil)
		return
	}
	// The list may not show what landed since (see staleBy).
	guard := store.Guard{After: r.listedFrom, Check: staleBy(payloads)}
	r.life.persist.Persist(ctx, r.cfg.Recorder, &guard, payloads, func(envs []events.Envelope, err error) {
		r.recorded(ctx, res.seen, len(payloads), envs, err)
	})
}

// podUIDs fills in the pod UID of each binding among payloads from the
// kubelet's checkpoint, read once if there is one. It is read after the
// list: the kubelet writes a container's entry after our Allocate has
// answered, so an allocation it names is in the ledger, and one that
// landed since the list makes the round stale. The kubelet does not
// write the file when a pod goes, so it may still hold a deleted pod's
// entry when the pod made again on the same devices is listed: each
// entry is kept with the ledger's end when it was first read, and one
// read before an allocation was in the ledger is not that allocation's.
// The first round reads it whatever it records: entries a daemon before
// this one bound are older than what this one allocates.
func (r *reconciler) podUIDs(payloads []events.Payload) {
	binds := slices.ContainsFunc(payloads, func(p events.Payload) bool {
		_, ok := p.(events.AllocationBound)
		return ok
	})
	if r.cfg.Checkpoint == "" || r.life.checkpointTried && !binds {
		return
	}
	r.life.checkpointTried = true
	entries, err := checkpoint.Read(r.cfg.Checkpoint)
	fails := ""
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fails = "missing"
	case errors.Is(err, checkpoint.ErrUnknownFormat):
		fails = "not in a layout this daemon reads"
	case err != nil:
		fails = "unreadable"
	}
	if fails != r.life.checkpointFails {
		if fails != "" {
			r.cfg.Log.Warn().Err(err).Str("path", r.cfg.Checkpoint).
				Msg("the kubelet's device checkpoint is " + fails + ": bindings are recorded without the pod's UID")
		} else {
			r.cfg.Log.Info().Str("path", r.cfg.Checkpoint).Msg("the kubelet's device checkpoint is read again: bindings carry the pod's UID")
		}
		r.life.checkpointFails = fails
	}
	if err != nil {
		return
	}
	// An allocation past the ledger's end now had not been answered
	// when the file was read: the store ends a commit before its events
	// land.
	end := r.cfg.Recorder.Log().LastSeq()
	seen := make(map[string]uint64, len(entries))
	for _, e := range entries {
		k := entryKey(e)
		if at, ok := r.life.checkpointSeen[k]; ok {
			seen[k] = at
		} else {
			seen[k] = end
		}
	}
	r.life.checkpointSeen = seen
	for i, p := range payloads {
		if b, ok := p.(events.AllocationBound); ok {
			b.UID = podUID(entries, seen, b)
			payloads[i] = b
		}
	}
}

// entryKey names a checkpoint entry by all it holds.
func entryKey(e checkpoint.Entry) string {
	return strings.Join(append([]string{e.PodUID, e.Container, e.Resource}, e.DeviceIDs...), "\x00")
}

// podUID is the UID of the one pod the checkpoint entries give b's
// container name, resource and exact device set; "" when none does, or
// when more than one pod does: the checkpoint names no pod, so it cannot
// say which. An entry first read (seen) before b's allocation was in the
// ledger is an earlier allocation's, and is passed over.
func podUID(entries []checkpoint.Entry, seen map[string]uint64, b events.AllocationBound) string {
	ids := slices.Clone(b.DeviceIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	uid := ""
	for _, e := range entries {
		if e.Resource != b.Pool || e.Container != b.Container || !slices.Equal(e.DeviceIDs, ids) || e.PodUID == uid ||
			seen[entryKey(e)] < b.AllocationSeq {
			continue
		}
		if uid != "" {
			return ""
		}
		uid = e.PodUID
	}
	return uid
}

// synced notes whether pods lists Self (see Config.Self).
func (r *reconciler) synced(pods []*podresourcesapi.PodResources) {
	self := r.cfg.Self
	unsynced := self.Name != "" && !slices.ContainsFunc(pods, func(p *podresourcesapi.PodResources) bool {
		return p.GetNamespace() == self.Namespace && p.GetName() == self.Name
	})
	if unsynced == r.unsynced {
		return
	}
	r.unsynced = unsynced
	pod := self.Namespace + "/" + self.Name
	if unsynced {
		r.cfg.Log.Warn().Str("pod", pod).Int("pods", len(pods)).
			Msg("the kubelet does not list this daemon's pod: it has not synced its pods from the API server, and no pod missing from its list is taken as gone until it does")
	} else {
		r.cfg.Log.Info().Str("pod", pod).Msg("the kubelet lists this daemon's pod: its pods are synced")
	}
}

// recorded ends a round whose n events (envs) are durable, or were
// refused with err.
func (r *reconciler) recorded(ctx actor.Context, seen map[string]bool, n int, envs []events.Envelope, err error) {
	switch {
	case errors.Is(err, errStale):
		r.cfg.Log.Debug().Err(err).Msg("a round went stale; another follows")
		r.again = true
	case err != nil:
		// Not recorded, not applied: the next round finds the same.
		r.life.unrecorded++
		r.cfg.Log.WithLevel(supervise.FailureLevel(r.life.unrecorded)).Err(err).Int("events", n).Msg("cannot record reconciliation; will retry")
		r.schedule(ctx, r.cfg.AfterAllocate)
	default:
		r.life.unrecorded = 0
		if n > 0 {
			r.catchUp(ctx, envs)
		}
		r.life.seen = seen
		r.rounds++
		r.schedule(ctx, r.cfg.Interval)
	}
	r.roundAgain(ctx)
}

// roundAgain starts the round asked for while one was out.
func (r *reconciler) roundAgain(ctx actor.Context) {
	if r.again {
		r.again = false
		r.round(ctx)
	}
}

// tell applies e, recorded here, and tells the parent what changed for the
// pools and the node.
func (r *reconciler) tell(ctx actor.Context, e events.Envelope) {
	log := r.cfg.Log
	r.st = events.Apply(r.st, e)
	switch p := e.Payload.(type) {
	case events.AttributionChanged:
		if p.Available {
			log.Info().Uint64("seq", e.Seq).Msg("pod resources available again")
		}
	case events.AllocationBound:
		ctx.Send(ctx.Parent(), &Recorded{Event: e})
		log.Info().Uint64("allocation", p.AllocationSeq).Str("pool", p.Pool).Str("pod", p.Namespace+"/"+p.Pod).
			Str("uid", p.UID).Str("container", p.Container).Uint64("seq", e.Seq).Msg("allocation bound to a container")
	case events.DevicesReleased:
		ctx.Send(ctx.Parent(), &Recorded{Event: e})
		log.Info().Uint64("allocation", p.AllocationSeq).Str("pool", p.Pool).Strs("devices", p.DeviceIDs).
			Dur("held_for_ms", p.HeldFor).Str("reason", p.Reason).Uint64("seq", e.Seq).Msg("devices released")
	case events.AllocationLeakSuspected:
		ctx.Send(ctx.Parent(), &Recorded{Event: e})
		log.Warn().Uint64("allocation", p.AllocationSeq).Str("pool", p.Pool).Strs("devices", p.DeviceIDs).
			Str("reason", p.Reason).Uint64("seq", e.Seq).Msg("allocation suspected leaked")
	case events.AllocationRecovered:
		r.told[e.Seq] = true
		ctx.Send(ctx.Parent(), &Recorded{Event: e})
		log.Warn().Uint64("seq", e.Seq).Str("pool", p.Pool).Strs("devices", p.DeviceIDs).Str("pod", p.Namespace+"/"+p.Pod).
			Str("container", p.Container).Str("reason", p.Reason).Msg("allocation recovered from the kubelet")
	case events.AllocationConflict:
		log.Warn().Str("pool", p.Pool).Str("bdf", p.Device).Str("reason", p.Reason).Uint64("seq", e.Seq).Msg("allocation conflict")
	}
}

// attributed returns the live allocations told of (the others wait for a
// later round).
func (r *reconciler) attributed() map[uint64]events.Allocation {
	out := make(map[uint64]events.Allocation, len(r.st.Allocations))
	for seq, a := range r.st.Allocations {
		if r.told[seq] {
			out[seq] = a
		}
	}
	return out
}

// forgetEnded forgets the allocations told of that the fold has read
// and that are over. Every round's answer does it, failed or not: while
// PodResources fails, the pools go on allocating.
func (r *reconciler) forgetEnded() {
	for seq := range r.told {
		if _, live := r.st.Allocations[seq]; !live && seq <= r.st.Seq {
			delete(r.told, seq)
		}
	}
}

// heldSince is attributed with each allocation's At on this process's
// clock: its age by the wall clock when a round first met it, never below
// zero, counted on from then by the monotonic clock. NTP may step the wall
// clock by hours (or years, after a dead CMOS battery) while an allocation
// is live: its age by the wall would then pass LeakGrace at once, or not
// for as long as the step.
func (r *reconciler) heldSince(now time.Time) map[uint64]events.Allocation {
	allocs := r.attributed()
	for seq, a := range allocs {
		at, ok := r.life.since[seq]
		if !ok {
			at = now.Add(-max(now.Sub(a.At), 0))
			r.life.since[seq] = at
		}
		a.At = at
		allocs[seq] = a
	}
	for seq := range r.life.since {
		// One live but not told of yet (a restarted incarnation waits
		// for the parent) keeps its time.
		if _, live := r.st.Allocations[seq]; !live {
			delete(r.life.since, seq)
		}
	}
	return allocs
}

var errStale = errors.New("an allocation landed or ended since the round")

// staleBy guards a round's payloads: a DevicesAllocated of a device they
// name makes them stale (one that supersedes an allocation they name
// allocates one of its devices: a pool supersedes only what holds them),
// and so does a pool's DevicesReleased of one (an allocation that landed
// after the kubelet gave up on its Allocate).
func staleBy(payloads []events.Payload) func(events.Envelope) error {
	devices := map[string]bool{}
	for _, p := range payloads {
		for _, id := range (events.Envelope{Payload: p}).Devices() {
			devices[id] = true
		}
	}
	return func(e events.Envelope) error {
		var ids []string
		what := "allocated"
		switch p := e.Payload.(type) {
		case events.DevicesAllocated:
			ids = p.DeviceIDs
		case events.DevicesReleased:
			ids, what = p.DeviceIDs, "released"
		}
		for _, id := range ids {
			if devices[id] {
				return fmt.Errorf("%w: #%d %s %s", errStale, e.Seq, what, id)
			}
		}
		return nil
	}
}
