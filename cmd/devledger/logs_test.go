package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// In JSON mode every line the daemon writes is JSON, to the last, which
// says why it stopped, at error level; timestamps carry milliseconds.
// Console mode into a pipe writes no colour.
func TestE2ELogLines(t *testing.T) {
	n := newE2ENode(t, nodeSpec{scenario: sysfsgen.ScenarioSRIOV, config: "testdata/e2e/bad.json", mode: "legacy"})
	p := n.start(t)
	if code := p.wait(t); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	millis := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}`)
	var last map[string]any
	for _, l := range lines {
		last = nil
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Errorf("not a JSON line: %q", l)
			continue
		}
		if ts, _ := last["time"].(string); !millis.MatchString(ts) {
			t.Errorf("time %q has no milliseconds: %s", ts, l)
		}
	}
	if last["level"] != "error" || last["message"] != "devledger run stopped" || !strings.Contains(last["error"].(string), "deviceType") {
		t.Errorf("the last line %v does not say why the daemon stopped, at error level", last)
	}

	args := n.runArgs()
	args[slices.Index(args, "--log-format")+1] = "console"
	code, _, stderr := cli(t, args...)
	if code != exitUsage || strings.Contains(stderr, "\x1b[") || !strings.Contains(stderr, "devledger run stopped") {
		t.Errorf("console log into a pipe: exit %d, colour %v:\n%s", code, strings.Contains(stderr, "\x1b["), stderr)
	}
}
