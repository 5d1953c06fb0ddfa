package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devledger/devledger/actors/registrar"
	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/grpcapi/kubelettest"
	"github.com/devledger/devledger/internal/actortest"
	"github.com/devledger/devledger/store/storetest"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// A kubelet that restarts while the disk is full (and a pool that
// crashes then, serving on a new socket) has every pool registered
// again, though the ledger cannot record it; once there is
// room, the ledger has each pool registered on the socket it serves, as
// the registrar has it, and not (in legacy mode, where the kubelet's
// start removes the sockets) on the one before the restart, which a
// replay or a dump would go on telling; and the daemon is ready. The
// pools are not registered anew for it: that would cut short the
// kubelet's calls under way.
func TestRegistrationsMadeOnAFullDiskAreRecordedOnceThereIsRoom(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		crash      bool // the vfio pool crashes too, and serves anew
	}{
		{"legacy", "legacy", false},
		{"watcher", "watcher", false},
		{"legacy, a pool crash", "legacy", true},
		{"watcher, a pool crash", "watcher", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{PluginWatcher: tc.mode == "watcher"})
			n.opts.Registration = tc.mode
			n.opts.SnapshotCheck = 20 * time.Millisecond // retries the disk
			d := n.start(t)
			ctx := waitCtx(t)
			pools := []string{vfioPool, netPool}
			for _, p := range pools {
				if _, err := n.kubelet.WaitRegistered(ctx, p); err != nil {
					t.Fatal(err)
				}
			}

			waitLedger(ctx, t, d, "both pools registered", func(st events.State) bool {
				return st.Pools[vfioPool].Registration.Registered && st.Pools[netPool].Registration.Registered
			})

			room := storetest.RefuseWrites(t, d.rec.Log())
			booted := time.Now()
			if err := n.kubelet.Restart(); err != nil {
				t.Fatal(err)
			}
			if _, err := n.kubelet.RegisteredAfter(ctx, pools, booted); err != nil {
				t.Fatalf("not registered again on a full disk: %v", err)
			}
			// The registrar records a registration as it hears of it:
			// once it has both, their records were refused.
			kids, err := d.Children(ctx)
			if err != nil {
				t.Fatal(err)
			}
			registered := func() *registrar.Status {
				res, err := d.Ask(ctx, kids.Registrar, &registrar.Query{})
				if err != nil {
					t.Fatal(err)
				}
				return res.(*registrar.Status)
			}
			bothRegistered := func(but string) {
				t.Helper()
				for st := registered(); !st.Pools[vfioPool].Registered || !st.Pools[netPool].Registered || st.Pools[vfioPool].Socket == but; st = registered() {
					select {
					case <-ctx.Done():
						t.Fatalf("the registrar never had the pools registered again: %+v", st)
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			bothRegistered("")
			if tc.crash {
				was := registered().Pools[vfioPool].Socket
				crash(d, kids.Pools[vfioPool], "test")
				bothRegistered(was)
			}
			if err := d.rec.Log().Sync(ctx); err != nil {
				t.Fatal(err)
			}
			served := registered()
			room()

			// What the registrar has, the ledger has: each pool
			// registered on the socket it serves.
			var diff string
			for {
				diff = ""
				res := registered()
				st := ledgerState(t, d)
				for _, p := range pools {
					live, reg := res.Pools[p], st.Pools[p].Registration
					if live.Socket != served.Pools[p].Socket {
						t.Fatalf("%s serves on %s once the disk had room, not on %s: registered anew, which cuts the kubelet's calls short", p, live.Socket, served.Pools[p].Socket)
					}
					if !live.Registered || !reg.Registered || !reg.Serving || reg.Socket != live.Socket {
						diff += fmt.Sprintf("%s: the registrar registered=%v on %s, the ledger serving=%v registered=%v on %s\n",
							p, live.Registered, live.Socket, reg.Serving, reg.Registered, reg.Socket)
					}
				}
				if diff == "" {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("once the disk had room, the ledger still lacks the registrations:\n%s", diff)
				case <-time.After(20 * time.Millisecond):
				}
			}
			for !d.Ready(ctx) {
				select {
				case <-ctx.Done():
					t.Fatalf("not ready once the disk had room: %v", d.notReady(context.Background()))
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
}

// A kubelet that stops while the disk is full has its KubeletStopped
// recorded late, once there is room; the KubeletRestarted of the next
// kubelet names that record's time as the stop it ends, as it names a
// stop recorded at once, so that dump's "back after" and the fold's
// outage tell the same stretch.
func TestAKubeletStopRecordedLateIsTheStopItsRestartEnds(t *testing.T) {
	n := newTestNode(t, sysfsgen.ScenarioSRIOV, sriovConfig, kubelettest.Options{})
	n.opts.SnapshotCheck = 20 * time.Millisecond // retries the disk
	logs := &actortest.Log{}
	n.opts.Logger = zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	d := n.start(t)
	ctx := waitCtx(t)
	if _, err := n.kubelet.WaitDevices(ctx, vfioPool, func(l []*pluginapi.Device) bool { return len(l) > 0 }); err != nil {
		t.Fatal(err)
	}
	waitLedger(ctx, t, d, "the pool registered", func(s events.State) bool { return s.Pools[vfioPool].Registration.Registered })

	room := storetest.RefuseWrites(t, d.rec.Log())
	if err := n.kubelet.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the stop's record refused", func() bool {
		return logs.Count("error", `"event":"KubeletStopped","message":"cannot record registration event"`) > 0
	})
	room()
	down := waitLedger(ctx, t, d, "the kubelet recorded down", func(s events.State) bool { return s.Kubelet.Down })

	if err := n.kubelet.Boot(); err != nil {
		t.Fatal(err)
	}
	up := waitLedger(ctx, t, d, "the kubelet back", func(s events.State) bool { return !s.Kubelet.Down && s.Kubelet.Outages == 1 })
	var stops []events.KubeletStopped
	var restarted events.KubeletRestarted
	if err := d.rec.Log().Read(0, func(e events.Envelope) error {
		switch p := e.Payload.(type) {
		case events.KubeletStopped:
			stops = append(stops, p)
		case events.KubeletRestarted:
			restarted = p
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(stops) != 1 || !strings.Contains(stops[0].Reason, "recorded late") {
		t.Errorf("KubeletStopped %+v, want one, saying it was recorded late", stops)
	}
	if logs.Count("info", `"recorded":["KubeletStopped"]`) != 1 {
		t.Errorf("no line names the KubeletStopped recorded late:\n%s", logs)
	}
	if !restarted.StoppedAt.Equal(down.Kubelet.DownSince) || !up.Kubelet.LastOutage.From.Equal(restarted.StoppedAt) {
		t.Errorf("KubeletRestarted names a stop at %s; the ledger's stop is at %s (outage %+v)",
			restarted.StoppedAt, down.Kubelet.DownSince, up.Kubelet.LastOutage)
	}
}
