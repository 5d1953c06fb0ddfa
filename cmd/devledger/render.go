package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/devledger/devledger/events"
)

// tablePrinter lays events out in fixed columns, so it streams: no column
// width depends on a later row. A heading line marks every new UTC day, and
// the time column holds the time of day.
//
// As a story (dump --device, --pod, --namespace) the rows say in words what
// happened to the device or the pod's allocations, and the event type
// column gives its width to them: the words name the event.
type tablePrinter struct {
	w *bufio.Writer
	// out is where w writes: a terminal's line cutter is closed at the end.
	out     io.Closer
	header  bool
	lastDay string
	story   bool
	// about is the device a story is about, "" for a pod's story.
	about string
	// holders, in a story, names what holds a device when its health
	// changes; nil when unknown.
	holders func(addr string) string
	// unhealthyFor, in a story, says for how long the device a healthy
	// verdict is about was unhealthy; nil or false when unknown.
	unhealthyFor func(e events.Envelope) (time.Duration, bool)
	// start, in a device's story, says what held the device where the
	// events shown begin; "" when nothing did.
	start string
}

// eventWidth is the width of the event type column: the longest type name
// of the catalog, so that every row lines up.
var eventWidth = func() int {
	n := 0
	for _, t := range events.Types() {
		n = max(n, len(t))
	}
	return n
}()

const (
	tableRow = "%7s  %-8s  %-*s  %s\n"
	storyRow = "%7s  %-8s  %s\n"
)

func (p *tablePrinter) writeHeader() {
	if p.story {
		fmt.Fprintf(p.w, storyRow, "SEQ", "TIME", "WHAT HAPPENED")
		if p.start != "" {
			fmt.Fprintln(p.w, p.start)
		}
	} else {
		fmt.Fprintf(p.w, tableRow, "SEQ", "TIME", eventWidth, "EVENT", "DETAIL")
	}
	p.header = true
}

func (p *tablePrinter) event(e events.Envelope) error {
	if !p.header {
		p.writeHeader()
	}
	t := e.Time.UTC()
	if day := t.Format(time.DateOnly); day != p.lastDay {
		fmt.Fprintf(p.w, "--- %s (UTC) ---\n", day)
		p.lastDay = day
	}
	var err error
	if p.story {
		text := tell(e, p.about)
		if p.unhealthyFor != nil {
			if d, ok := p.unhealthyFor(e); ok {
				text = strings.Replace(text, "healthy again", "healthy again after "+humanDuration(d), 1)
			}
		}
		if h, ok := e.Payload.(events.DeviceHealthChanged); ok && p.holders != nil {
			text = withReason(text, "; held by ", p.holders(h.Address))
		}
		_, err = fmt.Fprintf(p.w, storyRow, fmt.Sprint(e.Seq), t.Format(time.TimeOnly), text)
	} else {
		_, err = fmt.Fprintf(p.w, tableRow, fmt.Sprint(e.Seq), t.Format(time.TimeOnly), eventWidth, e.Type, describe(e))
	}
	if p.w.Buffered() > 32<<10 {
		return p.w.Flush()
	}
	return err
}

func (p *tablePrinter) end() error {
	if !p.header {
		p.writeHeader()
		p.w.WriteString("(no events)\n")
	}
	if err := p.w.Flush(); err != nil {
		return err
	}
	return p.out.Close()
}

// truncate shortens s to n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// jsonPrinter writes envelopes as JSON: one per line (jsonl), or one JSON
// array (json). Field names are the envelope's and the payload's JSON tags,
// which are part of devledger's interface and do not change.
type jsonPrinter struct {
	w     *bufio.Writer
	lines bool
	n     int
}

func (p *jsonPrinter) event(e events.Envelope) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event %d: %w", e.Seq, err)
	}
	switch {
	case p.lines:
	case p.n == 0:
		p.w.WriteString("[\n")
	default:
		p.w.WriteString(",\n")
	}
	p.w.Write(b)
	if p.lines {
		p.w.WriteByte('\n')
	}
	p.n++
	return nil
}

func (p *jsonPrinter) end() error {
	if !p.lines {
		if p.n == 0 {
			p.w.WriteString("[]\n")
		} else {
			p.w.WriteString("\n]\n")
		}
	}
	return p.w.Flush()
}

// describe says in a few words what an event records, for the table.
func describe(e events.Envelope) string {
	switch p := e.Payload.(type) {
	case events.DaemonStarted:
		s := fmt.Sprintf("%s pid %d", p.Version, p.PID)
		if p.Node != "" {
			s += " node " + p.Node
		}
		if p.KernelBootID != "" {
			s += " kernel boot " + p.KernelBootID[:min(8, len(p.KernelBootID))]
		}
		return s
	case events.DaemonStopped:
		if p.Clean {
			return "clean: " + p.Reason
		}
		return "unclean: " + p.Reason
	case events.ConfigApplied:
		names := make([]string, len(p.Pools))
		for i, s := range p.Pools {
			names[i] = s.Resource
		}
		s := fmt.Sprintf("%.12s, %d pools: %s", p.SHA256, len(p.Pools), strings.Join(names, ", "))
		for _, c := range p.Changes {
			s += "; " + poolChangeText(c)
		}
		return s
	case events.ConfigRejected:
		if len(p.Errors) == 0 {
			return p.Path
		}
		return fmt.Sprintf("%s: %s", counted(len(p.Errors), "error", "errors"), p.Errors[0])
	case events.DeviceDiscovered:
		return deviceLine(p.Device)
	case events.DeviceChanged:
		return fmt.Sprintf("%s %s", p.Device.Address, strings.Join(p.Changed, ","))
	case events.DeviceRemoved:
		return strings.TrimSpace(p.Address + " " + p.Reason)
	case events.DeviceHealthChanged:
		verdict := "healthy"
		if !p.Healthy {
			verdict = "UNHEALTHY"
		}
		if p.Reason != "" {
			return fmt.Sprintf("%s %s: %s", p.Address, verdict, p.Reason)
		}
		return p.Address + " " + verdict
	case events.PoolMembershipChanged:
		s := p.Pool
		if len(p.Added) > 0 {
			s += fmt.Sprintf(" +%d", len(p.Added))
		}
		if len(p.Removed) > 0 {
			s += fmt.Sprintf(" -%d", len(p.Removed))
		}
		if p.Reason != "" {
			s += " (" + p.Reason + ")"
		}
		return s
	case events.PluginServing:
		return fmt.Sprintf("%s %s", p.Pool, p.Mode)
	case events.PluginRegistered:
		return fmt.Sprintf("%s %s", p.Pool, p.Mode)
	case events.RegistrationFailed:
		s := fmt.Sprintf("%s #%d: %s", p.Pool, p.Attempt, p.Error)
		if p.KubeletHolds != "" {
			s += "; the kubelet holds " + p.KubeletHolds
		}
		if p.Action != "" {
			s += "; " + p.Action
		}
		return s
	case events.KubeletRestarted:
		if !p.StoppedAt.IsZero() {
			return fmt.Sprintf("%s: back after %s (stopped %s)", p.Socket, humanDuration(e.Time.Sub(p.StoppedAt)), p.StoppedAt.UTC().Format(time.TimeOnly))
		}
		return p.Socket
	case events.KubeletStopped:
		return "DOWN: " + p.Reason
	case events.SocketLost:
		return p.Pool
	case events.DevicesAllocated:
		return fmt.Sprintf("%s %s", p.Pool, strings.Join(p.DeviceIDs, ",")) + allocatedNotes(p)
	case events.AllocationConflict:
		return fmt.Sprintf("%s %s", p.Device, p.Reason)
	case events.AllocationBound:
		return fmt.Sprintf("#%d %s", p.AllocationSeq, podRef(p.Namespace, p.Pod, p.Container, p.UID))
	case events.DaemonCrashed:
		return fmt.Sprintf("boot %s crashed: last alive %s, its last event #%d", p.BootID, p.LastAlive.UTC().Format(time.RFC3339), p.LastSeq)
	case events.AllocationRecovered:
		return fmt.Sprintf("%s %s %s/%s/%s: %s", p.Pool, strings.Join(p.DeviceIDs, ","), p.Namespace, p.Pod, p.Container, p.Reason)
	case events.DevicesReleased:
		return fmt.Sprintf("#%d %s after %s", p.AllocationSeq, strings.Join(p.DeviceIDs, ","), p.HeldFor.Round(time.Second))
	case events.AllocationLeakSuspected:
		return fmt.Sprintf("#%d %s unclaimed for %s", p.AllocationSeq, strings.Join(p.DeviceIDs, ","), p.Age.Round(time.Second))
	case events.AttributionChanged:
		verdict := "available"
		if !p.Available {
			verdict = "UNAVAILABLE"
		}
		return withReason(verdict, ": ", p.Reason)
	case events.SnapshotTaken:
		return fmt.Sprintf("state at #%d, %d bytes", p.Seq, p.Size)
	case events.EventsDropped:
		return fmt.Sprintf("#%d-#%d (%d events): %s", p.FromSeq, p.ToSeq, p.Count, p.Reason)
	case nil:
		return fmt.Sprintf("unknown to this build (%s, schema v%d): a newer devledger wrote it", e.Type, e.Version)
	case events.EventLost:
		return withReason(cmp.Or(p.Type, "an event"), " lost: ", p.Reason)
	case events.LedgerDamaged:
		return withReason("DAMAGED: "+p.Problem, "; ", p.Served)
	case events.DamageAcknowledged:
		return withReason(fmt.Sprintf("%d %s acknowledged", len(p.Problems), plural(len(p.Problems), "damage", "damages")), ": ", p.Note)
	}
	return e.Subject
}

// poolChangeText says what a config changed of a pool: "changed
// intel.com/vfio (excludeTopology: false → true), +0000:3b:02.1".
func poolChangeText(c events.PoolChange) string {
	s := c.Change + " " + c.Pool
	if len(c.Fields) > 0 {
		s += " (" + strings.Join(c.Fields, ", ") + ")"
	}
	var moved []string
	for _, addr := range c.Joined {
		moved = append(moved, "+"+addr)
	}
	for _, addr := range c.Left {
		moved = append(moved, "-"+addr)
	}
	if len(moved) > 0 {
		s += ": " + strings.Join(moved, " ")
	}
	return s
}

// deviceLine is a one-line description of a PCI function.
func deviceLine(d events.DeviceFacts) string {
	s := fmt.Sprintf("%s %s:%s", d.Address, d.Vendor, d.Device)
	if d.Driver != "" {
		s += " " + d.Driver
	}
	if d.PF != "" {
		s += fmt.Sprintf(" vf%d", d.VFIndex)
	}
	return s
}

// podRef names a container as "namespace/pod/container", followed by its
// pod's UID where the ledger has it (the kubelet's checkpoint gave it):
// a pod deleted and made again under its name is another UID.
func podRef(namespace, pod, container, uid string) string {
	ref := namespace + "/" + pod + "/" + container
	if uid != "" {
		ref += " (uid " + uid + ")"
	}
	return ref
}
