//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/html"

	goldenfile "github.com/devledger/devledger/internal/golden"
)

// chromiumTimeout bounds one run of the browser.
const chromiumTimeout = 90 * time.Second

// requireChromium finds Debian's chromium. Without it the test skips, or
// fails where DEVLEDGER_REQUIRE_CHROMIUM=1 (CI, whose .ci/run installs it).
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("DEVLEDGER_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium is not installed and DEVLEDGER_REQUIRE_CHROMIUM=1: apt-get install chromium")
	}
	t.Skip("chromium is not installed (apt-get install chromium): the page is not rendered")
	return ""
}

// runChromium opens the file page in headless chromium, with a profile of
// its own and nothing that reaches the network, and returns its stdout.
func runChromium(t *testing.T, bin, page string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,720"}
	cmd := exec.CommandContext(ctx, bin, append(append(flags, args...), "file://"+page)...)
	// The browser starts helper processes: in a group of their own, they
	// all go when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left behind, if any
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %s\n%s", chromiumTimeout, lastLines(stderr.String(), 20))
	}
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, lastLines(stderr.String(), 20))
	}
	return stdout.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// renderedBody loads page in chromium and returns the attributes its
// script left on <body>: data-ready, data-errors, data-error-text,
// data-lanes (lanes with a size on screen), data-bars (bars a pixel wide
// or more).
func renderedBody(t *testing.T, bin, page string) map[string]string {
	t.Helper()
	dom := runChromium(t, bin, page, "--virtual-time-budget=5000", "--dump-dom")
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	var body *html.Node
	var find func(*html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "body" {
			body = n
		}
		for c := n.FirstChild; c != nil && body == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if body == nil {
		t.Fatalf("no <body> in chromium's DOM:\n%s", lastLines(dom, 20))
	}
	attrs := map[string]string{}
	for _, a := range body.Attr {
		attrs[a.Key] = a.Val
	}
	return attrs
}

// TestHTMLInChromium renders pages in headless chromium: each loads without
// an error, draws one lane per device and every bar.
func TestHTMLInChromium(t *testing.T) {
	bin := requireChromium(t)
	synthetic := func(o synthOptions) func(*testing.T) string {
		return func(t *testing.T) string {
			db := filepath.Join(t.TempDir(), "ledger.db")
			writeLedger(t, db, syntheticStory(o))
			return db
		}
	}
	cases := []struct {
		name      string
		db        func(*testing.T) string
		args      []string
		wantLanes int
	}{
		{"sample", sampleCopy, nil, 8},
		{"sample namespace", sampleCopy, []string{"--namespace", "telco"}, 3},
		{"sample empty", sampleCopy, []string{"--pod", "trainer-0", "--until", "2026-11-24T00:00:00Z"}, 0},
		{"5000 events", synthetic(synthOptions{devices: 64, events: 5000, seed: 2}), nil, 64},
		{"1032 devices", synthetic(synthOptions{devices: 1032, events: 5000, seed: 1}), nil, pageMaxLanes},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			page := htmlPage(t, tc.db(t), tc.args...)
			facts := checkPage(t, page)
			path := filepath.Join(t.TempDir(), "history.html")
			if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
				t.Fatal(err)
			}
			body := renderedBody(t, bin, path)
			if body["data-ready"] != "1" {
				t.Fatalf("the page's script did not finish: body %v", body)
			}
			if body["data-errors"] != "0" {
				t.Errorf("%s errors: %s", body["data-errors"], body["data-error-text"])
			}
			if got := body["data-lanes"]; got != strconv.Itoa(tc.wantLanes) {
				t.Errorf("%s lanes drawn, want %d", got, tc.wantLanes)
			}
			if got := body["data-bars"]; got != strconv.Itoa(facts.bars) {
				t.Errorf("%s bars drawn, of %d", got, facts.bars)
			}
			if tc.name == "sample" && goldenfile.Updating() {
				keepScreenshot(t, bin, path)
			}
		})
	}
}

// TestHTMLInChromiumSeesErrors: the checks above would catch a broken
// script and anything fetched from outside.
func TestHTMLInChromiumSeesErrors(t *testing.T) {
	bin := requireChromium(t)
	page := htmlPage(t, sampleCopy(t))
	cases := []struct{ name, inject, want string }{
		{"script error", `<script>notAFunction();</script>`, "notAFunction"},
		// Refused by the page's content security policy before any fetch.
		{"remote image", `<img alt="" src="https://devledger.invalid/x.png">`, "refused https://devledger.invalid/x.png"},
		{"console error", `<script>console.error("bad data");</script>`, "bad data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "broken.html")
			broken := strings.Replace(page, "<footer>", tc.inject+"<footer>", 1)
			if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			body := renderedBody(t, bin, path)
			if body["data-errors"] == "0" || !strings.Contains(body["data-error-text"], tc.want) {
				t.Errorf("want an error about %q: body %v", tc.want, body)
			}
		})
	}
}

// screenshotMax is the largest screenshot kept under testdata/.
const screenshotMax = 100 << 10

// keepScreenshot saves a picture of the sample's page as
// testdata/dump_html.png, when it is small enough to keep.
func keepScreenshot(t *testing.T, bin, page string) {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "shot.png")
	runChromium(t, bin, page, "--virtual-time-budget=5000", "--hide-scrollbars", "--screenshot="+shot)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > screenshotMax {
		t.Logf("screenshot of %d bytes: not kept", len(b))
		return
	}
	if err := os.WriteFile(filepath.Join("testdata", "dump_html.png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept testdata/dump_html.png, %d bytes", len(b))
}
