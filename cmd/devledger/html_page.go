package main

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// pageWriter lays the fold out as HTML. Every position is a percentage of
// the window, so the page is as wide as the browser window. Everything the
// ledger says (pod names, reasons) is escaped.
type pageWriter struct {
	w          *bufio.Writer
	h          *historyFold
	start, end time.Time
	// clock formats a time of the window: the time of day when the window
	// is one UTC day, else with the date.
	clock string
}

// writePage writes the whole page: one self-contained document, its style
// and script inline, nothing fetched.
func writePage(out io.Writer, h *historyFold) error {
	p := &pageWriter{w: bufio.NewWriterSize(out, 64<<10), h: h}
	p.start, p.end = h.window()
	p.clock = "15:04:05"
	if p.start.UTC().Format(time.DateOnly) != p.end.UTC().Format(time.DateOnly) {
		p.clock = "Jan 2 15:04:05"
	}
	lanes, total := h.shownLanes()
	p.head()
	p.header(lanes, total)
	p.summary()
	if !h.empty() {
		p.timeline(lanes)
	}
	p.footer()
	return p.w.Flush()
}

func (p *pageWriter) printf(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

// esc escapes text for an element or a double-quoted attribute.
func esc(s string) string { return html.EscapeString(s) }

// pos is t's place in the window, in percent.
func (p *pageWriter) pos(t time.Time) float64 {
	total := p.end.Sub(p.start)
	if total <= 0 {
		return 0
	}
	v := float64(t.Sub(p.start)) / float64(total) * 100
	return min(max(v, 0), 100)
}

// pct writes a percentage with at most two decimals and no trailing zeros.
func pct(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s + "%"
}

// percent1 writes a fraction as a percentage with one decimal, at most
// 100%.
func percent1(f float64) string {
	return strconv.FormatFloat(min(f*100, 100), 'f', 1, 64) + "%"
}

// place is the style that puts from..to on a track.
func (p *pageWriter) place(from, to time.Time) string {
	a, b := p.pos(from), p.pos(to)
	return "left:" + pct(a) + ";width:" + pct(b-a)
}

func (p *pageWriter) at(t time.Time) string { return t.UTC().Format(p.clock) }

// fromTo says when a span was, for its title.
func (p *pageWriter) fromTo(s span) string {
	if s.from.Equal(s.to) {
		return p.at(s.from)
	}
	to := p.at(s.to)
	if s.open {
		to = "still at " + to
	}
	return fmt.Sprintf("%s → %s (%s)", p.at(s.from), to, humanDuration(s.to.Sub(s.from)))
}

func (p *pageWriter) head() {
	title := "devledger history"
	if p.h.node != "" {
		title += ": " + p.h.node
	}
	p.printf(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%s</title>
<style>%s</style>
<script>%s</script>
</head>
<body>
`, esc(title), pageStyle, pageErrorScript)
}

func (p *pageWriter) header(lanes []*historyLane, total int) {
	h := p.h
	node := ""
	if h.node != "" {
		node = " of " + h.node
	}
	p.printf("<header>\n<h1>Device history%s</h1>\n", esc(node))
	switch {
	case h.firstSeq == 0 && h.stopped:
		p.printf("<p class=\"meta\">No events at or before --until %s: the ledger's first event, #%d, is at %s.</p>\n",
			untilText(h.f.until), h.next.Seq, h.next.Time.UTC().Format(time.RFC3339))
	case h.empty():
		p.printf("<p class=\"meta\">No events in this window.</p>\n")
	default:
		evs := fmt.Sprintf("%s (#%d–#%d)", counted(h.inWindow, "event", "events"), h.windowFirstSeq, h.lastSeq)
		if h.inWindow == 0 {
			evs = fmt.Sprintf("no events: the state after #%d holds throughout", h.lastSeq)
		}
		p.printf("<p class=\"meta\">%s → %s UTC (%s) · %s · %s</p>\n",
			p.start.UTC().Format(time.DateTime), p.end.UTC().Format(time.DateTime), humanDuration(p.end.Sub(p.start)),
			evs, counted(total, "device", "devices"))
	}
	if filters := p.filters(); filters != "" {
		p.printf("<p class=\"meta\">Filters: %s</p>\n", esc(filters))
	}
	if h.firstSeq > 1 && (h.f.since.IsZero() || !h.f.since.After(h.first)) {
		// The page starts where the ledger does, not where the node's
		// history did.
		if h.priorSeq > 0 {
			p.printf("<p class=\"note\">Retention dropped the events before #%d: the page starts at the first event kept, and an allocation or an unhealthy spell under way then is drawn from its left edge.</p>\n", h.firstSeq)
		} else {
			p.printf("<p class=\"note\">The events before #%d are missing, and no snapshot this devledger can read stands for them (the warning on stderr says why): the page draws the events kept alone.</p>\n", h.firstSeq)
		}
	}
	if h.damage != nil {
		p.printf("<p class=\"note\">The ledger is damaged; this page draws what could be read: %s</p>\n",
			esc(strings.TrimSuffix(h.damage.Error(), " ("+errReadDamaged.Error()+")")))
	}
	if len(lanes) < total {
		p.printf("<p class=\"note\">Showing %s of %s devices, busiest first: a page draws at most %d lanes.</p>\n",
			thousands(len(lanes)), thousands(total), pageMaxLanes)
	}
	merged := 0
	for _, l := range lanes {
		if l.bars.merged > 0 {
			merged++
		}
	}
	if merged > 0 {
		p.printf("<p class=\"note\">%s lanes had more than %d allocations to draw: neighbouring ones are merged into striped bars (hover for counts).</p>\n",
			thousands(merged), laneMaxBars)
	}
	if h.markers.merged > 0 {
		p.printf("<p class=\"note\">More than %d daemon, kubelet, config and attribution events: neighbouring markers are merged.</p>\n", pageMaxMarkers)
	}
	p.printf("</header>\n")
}

// filters restates the flags that shaped the page.
func (p *pageWriter) filters() string {
	f := p.h.f
	var parts []string
	if !f.since.IsZero() {
		parts = append(parts, "--since "+f.since.UTC().Format(time.RFC3339))
	}
	if !f.until.IsZero() {
		parts = append(parts, "--until "+f.until.UTC().Format(time.RFC3339))
	}
	if f.pool != "" {
		parts = append(parts, "--pool "+f.pool)
	}
	if f.device != "" {
		parts = append(parts, "--device "+f.device)
	}
	if f.iface != "" {
		parts = append(parts, "--iface "+f.iface)
	}
	if f.pf != "" {
		parts = append(parts, "--pf "+f.pf)
	}
	switch ps := f.pods; {
	case ps == nil:
	case ps.pod == "":
		parts = append(parts, "--namespace "+ps.namespace)
	case ps.namespace == "":
		parts = append(parts, "--pod "+ps.pod)
	default:
		parts = append(parts, "--pod "+ps.namespace+"/"+ps.pod)
	}
	return strings.Join(parts, " ")
}

func (p *pageWriter) summary() {
	rows := p.h.summaries()
	p.printf("<section>\n<h2>Pools</h2>\n")
	if len(rows) == 0 {
		p.printf("<p class=\"meta\">No pool in this window.</p>\n</section>\n")
		return
	}
	p.printf("<table class=\"sum\">\n<thead><tr><th>pool</th><th>devices</th><th title=\"time held by an allocation, of the devices' time in the pool\">busy</th>" +
		"<th>allocations</th><th>releases</th><th>conflicts</th><th title=\"allocations no container claimed within the grace period\">leak suspects</th>" +
		"<th title=\"device time unhealthy or gone while in the pool\">unhealthy time</th></tr></thead>\n<tbody>\n")
	for _, r := range rows {
		busy, unhealthy := "–", humanDuration(r.unhealthy)
		if r.member > 0 {
			busy = percent1(float64(r.busy) / float64(r.member))
			unhealthy += " (" + percent1(float64(r.unhealthy)/float64(r.member)) + ")"
		}
		p.printf("<tr><td>%s</td><td>%d</td><td title=\"%s held of %s in the pool\">%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
			esc(r.pool), r.devices, humanDuration(r.busy), humanDuration(r.member), busy, r.allocations, r.releases, r.conflicts, r.leaks, unhealthy)
	}
	p.printf("</tbody>\n</table>\n</section>\n")
}

func (p *pageWriter) timeline(lanes []*historyLane) {
	p.printf("<section>\n<h2>Timeline</h2>\n")
	p.printf("<div class=\"tools\"><input id=\"find\" type=\"search\" placeholder=\"filter lanes: address, pool or pod\" aria-label=\"filter lanes\">\n%s</div>\n", pageLegend)
	p.printf("<div class=\"tl\">\n<div class=\"row axis\"><div class=\"lab\">UTC</div><div class=\"trk\">")
	for _, t := range axisTicks(p.start, p.end) {
		// Labels at the edges stay inside the track.
		class, x := "at", p.pos(t.at)
		switch {
		case x < 4:
			class = "at s"
		case x > 96:
			class = "at e"
		}
		p.printf("<span class=\"%s\" style=\"left:%s\">%s</span>", class, pct(x), esc(t.label))
	}
	for _, m := range p.h.markers.spans {
		p.printf("<span class=\"mk %s\" style=\"left:%s\" title=\"%s\"></span>", m.class, pct(p.pos(m.from)), esc(p.markerTitle(m)))
	}
	p.printf("</div></div>\n")
	group := ""
	for i, l := range lanes {
		if g := laneGroup(l); i == 0 || g != group {
			group = g
			n := 1
			for _, o := range lanes[i+1:] {
				if laneGroup(o) != g {
					break
				}
				n++
			}
			name := g
			if g == "~" {
				name = "in no pool"
			}
			p.printf("<div class=\"grp\">%s <small>%s</small></div>\n", esc(name), counted(n, "device", "devices"))
		}
		p.lane(l)
	}
	p.printf("<div class=\"marks\">")
	for _, m := range p.h.markers.spans {
		p.printf("<span class=\"ml %s\" style=\"left:%s\" title=\"%s\"></span>", m.class, pct(p.pos(m.from)), esc(p.markerTitle(m)))
	}
	p.printf("</div>\n</div>\n</section>\n")
}

func (p *pageWriter) markerTitle(m span) string {
	if m.n > 1 {
		return fmt.Sprintf("%d daemon, kubelet, config and attribution events, %s", m.n, p.fromTo(m))
	}
	return p.at(m.from) + " " + m.title
}

func (p *pageWriter) lane(l *historyLane) {
	find := append([]string{l.addr}, l.pools...)
	find = append(find, l.labels...)
	p.printf("<div class=\"row lane\" data-find=\"%s\">", esc(strings.ToLower(strings.Join(find, " "))))

	// The label: address and driver; the title tells the rest.
	var facts []string
	if l.id != "" {
		facts = append(facts, l.id)
	}
	if l.driver != "" {
		facts = append(facts, l.driver)
	}
	if l.numa >= 0 && l.id != "" {
		facts = append(facts, fmt.Sprintf("NUMA %d", l.numa))
	}
	title := l.addr
	if l.name != "" {
		title += ": " + l.name
	}
	if len(facts) > 0 {
		title += "\n" + strings.Join(facts, ", ")
	}
	if len(l.pools) > 0 {
		title += "\npools: " + strings.Join(l.pools, ", ")
	}
	title += fmt.Sprintf("\n%s, busy %s", counted(l.allocations, "allocation", "allocations"), humanDuration(l.busy))
	if l.droppedOpen > 0 {
		title += fmt.Sprintf("\n%d more live allocations not drawn", l.droppedOpen)
	}
	p.printf("<div class=\"lab\" title=\"%s\">%s <small>%s</small></div><div class=\"trk\">", esc(title), esc(l.addr), esc(l.driver))

	// Health: a healthy band from the device's first sighting, bad spells
	// over it.
	if l.health != healthUnknown || len(l.bands.spans) > 0 {
		p.printf("<span class=\"hb\" style=\"%s\" title=\"healthy unless marked\"></span>", p.place(later(l.seen, p.start), p.end))
	}
	for _, b := range l.bands.spans {
		class, t := b.class, b.class
		switch {
		case b.n > 1:
			// Merged spells have healthy time between them: striped, so
			// that they do not read as one long outage.
			class = "mixed"
			t = fmt.Sprintf("%d spells unhealthy or gone, %s in all", b.n, humanDuration(b.total))
		case b.title != "":
			t += ": " + b.title
		}
		p.printf("<span class=\"hb %s\" style=\"%s\" title=\"%s\"></span>", class, p.place(b.from, b.to), esc(t+"\n"+p.fromTo(b)))
	}
	for _, b := range l.bars.spans {
		p.bar(b)
	}
	for _, t := range l.ticks.spans {
		title := p.at(t.from) + " " + t.title
		if t.n > 1 {
			title = fmt.Sprintf("%d pool changes and conflicts, %s", t.n, p.fromTo(t))
		}
		p.printf("<span class=\"tk %s\" style=\"left:%s\" title=\"%s\"></span>", t.class, pct(p.pos(t.from)), esc(title))
	}
	p.printf("</div></div>\n")
}

func (p *pageWriter) bar(b span) {
	class, text, title := b.class, "", ""
	// A bound allocation shows its pod's name, which is what tells bars
	// apart when they are narrow; the title says ns/pod/container.
	pod := b.label
	if parts := strings.Split(pod, "/"); len(parts) == 3 {
		pod = parts[1]
	}
	if b.n > 1 {
		class = "bar merged"
		text = fmt.Sprintf("%d allocations", b.n)
		if b.label != "" {
			text = fmt.Sprintf("%d× %s", b.n, pod)
		}
		title = fmt.Sprintf("%d allocations, merged to fit the page\n%s\nheld %s in all", b.n, p.fromTo(b), humanDuration(b.total))
	} else {
		text = pod
		title = b.title + "\n" + p.fromTo(b)
	}
	// A colour per pod, from blue to magenta: red, orange and green say
	// unhealthy, unclaimed and healthy here.
	hue := ""
	if b.label != "" && !strings.HasPrefix(b.label, "#") {
		f := fnv.New32a()
		io.WriteString(f, b.label)
		hue = ";--h:" + strconv.Itoa(int(185+f.Sum32()%140))
	}
	p.printf("<span class=\"%s\" style=\"%s%s\" title=\"%s\">%s</span>", class, p.place(b.from, b.to), hue, esc(title), esc(text))
}

func (p *pageWriter) footer() {
	last := "no events"
	if p.h.lastSeq > 0 {
		last = fmt.Sprintf("its last event read is #%d, at %s", p.h.lastSeq, p.h.last.UTC().Format(time.RFC3339))
	}
	p.printf("<footer>Written by devledger dump --format html from the ledger; %s. Times are UTC. The page is self-contained: it loads nothing.</footer>\n", last)
	p.printf("<script>%s</script>\n</body>\n</html>\n", pageScript)
}

// axisTick is a labelled time on the axis.
type axisTick struct {
	at    time.Time
	label string
}

// axisSteps are the spacings the axis may use, from the finest.
var axisSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour,
	91 * 24 * time.Hour, 364 * 24 * time.Hour,
}

// axisStep is the spacing of the axis labels of start..end (end after
// start): the shortest of axisSteps that labels it at most eight times,
// else a multiple of the longest.
func axisStep(start, end time.Time) time.Duration {
	total := end.Sub(start)
	step := axisSteps[len(axisSteps)-1]
	for _, s := range axisSteps {
		if total/s <= 8 {
			step = s
			break
		}
	}
	// Longer than eight of the longest (a node whose clock started at
	// 1970 before it synced): a multiple of it. Counted in seconds, as
	// total saturates past 292 years (and total+8*step overflows past
	// 284), and no longer than a Duration holds.
	if total/step > 8 {
		secs, per := end.Unix()-start.Unix(), int64(8*step/time.Second)
		step *= time.Duration(min((secs+per-1)/per, int64(math.MaxInt64/step)))
	}
	return step
}

// axisTicks picks at most 8 round times in start..end (UTC) to label.
func axisTicks(start, end time.Time) []axisTick {
	total := end.Sub(start)
	if total <= 0 {
		return []axisTick{{at: start, label: start.UTC().Format("Jan 2 15:04:05")}}
	}
	step := axisStep(start, end)
	var ticks []axisTick
	lastDay := ""
	for t := start.UTC().Truncate(step); !t.After(end); t = t.Add(step) {
		if t.Before(start) {
			continue
		}
		var label string
		day := t.Format("Jan 2")
		switch {
		case step >= 24*time.Hour:
			label = day
			if start.Year() != end.Year() {
				label = t.Format(time.DateOnly)
			}
		case step < time.Minute:
			label = t.Format(time.TimeOnly)
		default:
			label = t.Format("15:04")
		}
		if step < 24*time.Hour && day != lastDay && (lastDay != "" || start.UTC().Format(time.DateOnly) != end.UTC().Format(time.DateOnly)) {
			label = day + " " + label
		}
		lastDay = day
		ticks = append(ticks, axisTick{at: t, label: label})
	}
	return ticks
}

// thousands writes n with comma separators: 1,032.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// counted is "1 device", "1,032 devices".
func counted(n int, one, many string) string { return thousands(n) + " " + plural(n, one, many) }

// pageLegend explains the marks.
const pageLegend = `<div class="legend"><span><i class="sw bar" style="--h:205"></i>allocation, labelled with its pod</span>` +
	`<span><i class="sw bar unbound"></i>allocation no pod claimed</span>` +
	`<span><i class="sw bar merged"></i>merged allocations</span><span><i class="sw bar unbound leak"></i>leak suspected</span>` +
	`<span><i class="sw hb"></i>healthy</span><span><i class="sw hb unhealthy"></i>unhealthy</span><span><i class="sw hb gone"></i>gone</span><span><i class="sw hb mixed"></i>merged spells</span>` +
	`<span><i class="sw tk joined"></i>joined / <i class="sw tk left"></i>left a pool</span><span><i class="sw tk conflict"></i>conflict</span>` +
	`<span><i class="sw ml daemon"></i>daemon start/stop</span><span><i class="sw ml kubelet"></i>kubelet restart</span><span><i class="sw ml config"></i>config</span><span><i class="sw ml podres"></i>pod attribution lost/back</span>` +
	`<span><i class="sw ml ledger"></i>ledger: events dropped, lost or damaged</span></div>`

// pageStyle is the page's whole style sheet.
const pageStyle = `
:root{--lab:17rem;font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2430;background:#fff}
body{margin:1.2rem 1.5rem}
h1{font-size:1.35rem;margin:0 0 .2rem}
h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
.meta{color:#4a5160;margin:.15rem 0}
.note{display:inline-block;margin:.4rem 0 0;padding:.25rem .6rem;background:#fff6dc;border:1px solid #e6c35c;border-radius:3px}
footer{margin-top:1.5rem;color:#6b7280;font-size:12px}
[hidden]{display:none!important}
table.sum{border-collapse:collapse}
.sum th,.sum td{padding:.25rem .8rem;border-bottom:1px solid #e4e7ec;text-align:right;white-space:nowrap}
.sum th{font-weight:600;background:#f5f6f8}
.sum th:first-child,.sum td:first-child{text-align:left;font-family:ui-monospace,monospace}
.tools{display:flex;flex-wrap:wrap;gap:.6rem 1.2rem;align-items:center;margin-bottom:.6rem}
#find{width:19rem;padding:.2rem .4rem}
.legend{display:flex;flex-wrap:wrap;gap:.3rem 1rem;color:#4a5160;font-size:12px}
.legend span{display:inline-flex;align-items:center;gap:.3rem}
.tl{position:relative;min-width:40rem}
.row{display:flex;height:24px;border-bottom:1px solid #eef0f3}
.lab{flex:0 0 var(--lab);box-sizing:border-box;padding:0 .6rem 0 0;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font:12px/24px ui-monospace,SFMono-Regular,Menlo,monospace}
.lab small{color:#6b7280}
.trk{position:relative;flex:1 1 auto;overflow:hidden}
.axis{height:22px;border-bottom:1px solid #c9ced6}
.axis .lab{color:#6b7280;font-family:inherit}
.at{position:absolute;bottom:2px;transform:translateX(-50%);white-space:nowrap;color:#4a5160;font-size:11px}
.at.s{transform:none}
.at.e{transform:translateX(-100%)}
.mk{position:absolute;top:0;width:7px;height:7px;margin-left:-4px;border-radius:50%;background:currentColor}
.grp{padding:.6rem 0 .1rem;font-weight:600;font-family:ui-monospace,monospace;border-bottom:1px solid #eef0f3}
.grp small{font-weight:400;color:#6b7280;font-family:system-ui,sans-serif}
.bar{position:absolute;top:3px;height:13px;min-width:2px;box-sizing:border-box;padding:0 3px;border-radius:2px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font-size:10px;line-height:13px;color:#fff;background:hsl(var(--h,215) 52% 42%)}
.bar.unbound{color:#5c3b00;background:repeating-linear-gradient(135deg,#f6c35b 0 5px,#fbe2a9 5px 10px)}
.bar.merged{background:repeating-linear-gradient(135deg,hsl(var(--h,215) 40% 45%) 0 4px,hsl(var(--h,215) 40% 60%) 4px 8px)}
.bar.leak{outline:2px dashed #c62828;outline-offset:-2px}
.bar.lost{outline:2px solid #c62828;outline-offset:-2px}
.hb{position:absolute;bottom:2px;height:4px;background:#3f9c5a}
.hb.unhealthy{background:#d93d3d;height:6px;min-width:2px}
.hb.gone{background:#9aa1ab;height:6px;min-width:2px}
.hb.mixed{height:6px;min-width:2px;background:repeating-linear-gradient(90deg,#d93d3d 0 3px,#3f9c5a 3px 6px)}
.tk{position:absolute;top:0;bottom:0;width:2px;margin-left:-1px;background:#7b5cd6}
.tk.left{background:#b07cc6}
.tk.conflict{background:#d93d3d;width:3px}
.marks{position:absolute;top:0;bottom:0;left:var(--lab);right:0;pointer-events:none}
.ml{position:absolute;top:0;bottom:0;width:7px;margin-left:-3px;pointer-events:auto;background:linear-gradient(currentColor,currentColor) center/1px 100% no-repeat;opacity:.55}
.daemon{color:#1f2430}.kubelet{color:#e07b00}.config{color:#2f6fd6}.podres{color:#a23bb5}.ledger{color:#8a8f98}
.legend .sw{position:relative;display:inline-block;width:1.4rem;height:10px;top:auto;bottom:auto;margin:0;padding:0}
.legend .sw.tk,.legend .sw.ml{width:3px;height:12px;opacity:1}
.legend .sw.ml{background:currentColor}
`

// pageErrorScript runs first: it notes every error the page meets (a
// script error, a resource refused, console.error) on <body>, where a
// test, or a curious reader, finds them.
const pageErrorScript = `
(function(){
  var errors=[];
  function note(m){
    errors.push(String(m));
    var b=document.body;
    if(b){b.setAttribute("data-errors",errors.length);b.setAttribute("data-error-text",errors.join(" | "));}
  }
  window.addEventListener("error",function(e){note(e.message||("cannot load "+(e.target&&(e.target.src||e.target.href))));},true);
  document.addEventListener("securitypolicyviolation",function(e){note("refused "+e.blockedURI);});
  var ce=console.error;
  console.error=function(){note(Array.prototype.join.call(arguments," "));return ce.apply(console,arguments);};
  window.pageErrors=errors;
})();
`

// pageScript runs last: the search box, and a record on <body> of what was
// drawn: lanes with a size on screen, bars at least a pixel wide, errors.
const pageScript = `
(function(){
  var b=document.body,lanes=document.querySelectorAll(".lane"),drawn=0,bars=0;
  lanes.forEach(function(l){var r=l.querySelector(".trk").getBoundingClientRect();if(r.width>0&&r.height>0)drawn++;});
  document.querySelectorAll(".lane .bar").forEach(function(e){if(e.getBoundingClientRect().width>=1)bars++;});
  var find=document.getElementById("find");
  if(find)find.addEventListener("input",function(){
    var q=find.value.trim().toLowerCase();
    lanes.forEach(function(l){l.hidden=q!==""&&l.getAttribute("data-find").indexOf(q)<0;});
  });
  b.setAttribute("data-lanes",drawn);
  b.setAttribute("data-bars",bars);
  b.setAttribute("data-errors",window.pageErrors.length);
  b.setAttribute("data-ready","1");
})();
`
