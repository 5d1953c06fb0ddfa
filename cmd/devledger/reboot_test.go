package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/devledger/devledger/events"
)

// TestPageMarksTheRebootTheFoldCounts: the history page marks a node
// reboot where the fold (replay) counts one, also once retention dropped
// the start before it: the snapshot that retention kept carries the
// kernel boot id of the run before.
func TestPageMarksTheRebootTheFoldCounts(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload, boot string) {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Minute), boot))
	}
	add(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 1, Registration: "legacy", KernelBootID: "k-1"}, "boot-1")
	add(events.ConfigApplied{Path: "/etc/devledger/config.json"}, "boot-1")
	add(events.DaemonStopped{Reason: "SIGTERM", Clean: true}, "boot-1")
	cut := uint64(len(envs) + 1)
	add(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: 2, Registration: "legacy", KernelBootID: "k-2"}, "boot-2")

	const mark = "node rebooted; daemon started"
	db := retainedCopy(t, envs, cut)
	code, out, errOut := runCLI(t, "replay", "--db", db)
	if code != exitOK || !strings.Contains(out, "1 node reboot") {
		t.Fatalf("replay: exit %d (%s): want 1 node reboot counted:\n%s", code, errOut, out)
	}
	code, out, errOut = runCLI(t, "dump", "--db", db, "--format", "html")
	if code != exitOK || !strings.Contains(out, mark) {
		t.Errorf("dump --format html after retention: exit %d (%s): the page does not mark the reboot replay counts (%q)", code, errOut, mark)
	}
}

// TestPageAndFoldAgreeOnAStartThatCouldNotReadTheBootID: a start that
// could not read the kernel boot id sits between two that read
// different ones. The page marks a reboot exactly where the fold counts
// one.
func TestPageAndFoldAgreeOnAStartThatCouldNotReadTheBootID(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var envs []events.Envelope
	add := func(p events.Payload, boot string) {
		envs = append(envs, events.New(p, t0.Add(time.Duration(len(envs))*time.Minute), boot))
	}
	for i, k := range []string{"k-1", "", "k-2"} {
		boot := "boot-" + string(rune('1'+i))
		add(events.DaemonStarted{Version: "v0.1.0", Node: "worker-3", PID: i + 1, Registration: "legacy", KernelBootID: k}, boot)
		add(events.DaemonStopped{Reason: "SIGTERM", Clean: true}, boot)
	}
	s := events.NewState()
	for _, e := range envs {
		s = events.Apply(s, e)
	}
	db := filepath.Join(t.TempDir(), ledgerFileName)
	writeLedger(t, db, envs)
	_, out, _ := runCLI(t, "dump", "--db", db, "--format", "html")
	if marked := len(regexp.MustCompile(`class="mk daemon"[^>]*node rebooted; daemon started`).FindAllString(out, -1)); marked != s.Daemon.Reboots {
		t.Errorf("the page marks %d reboots, the fold counts %d", marked, s.Daemon.Reboots)
	}
}
